// Outage tests: reports acknowledged (200) while a dependency refuses them; the worker not ready,
// naming the dependency, and retrying more often than the old WORKER_MAX_DELIVER (5) allowed,
// without a dead letter; then, the fault ended, every report stored exactly once (raw rows:
// test/helpers/stored-once.ts), the instances in Postgres, still no dead letter, ready again.
import type { Test } from 'tap';
import type { Proc } from '../../deploy/service-process.js';
import { deadLetterStream } from '../../lib/contract/messages.js';
import type { Dependency } from '../../lib/infra/storage-errors.js';
import { eventually, chRows, consumed, type TestStack } from './stack.js';
import { storedOnce, stopMerges } from './stored-once.js';

/** The worker's /readyz: status and detail. */
export async function readyz(workerUrl: string): Promise<{ status: number; detail: string }> {
  const r = await fetch(`${workerUrl}/readyz`);
  const body = (await r.json()) as { detail?: string };
  return { status: r.status, detail: body.detail ?? '' };
}

/** The sum of a worker metric's series that have `labels`. */
export async function workerMetric(workerUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${workerUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

/** Whether a /readyz detail names an outage of `dependency`. */
export const outageNamed = (detail: string, dependency: string): boolean => new RegExp(`outage: (.*, )?${dependency} \\(`).test(detail);

/** Messages in the stack's dead-letter stream. */
export async function deadLetterCount(s: TestStack): Promise<number> {
  const jsm = await s.nc.jetstreamManager();
  return (await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!))).state.messages;
}

/** One heartbeat and one status report per marker, on the marker's machine; every answer must be 200. */
export async function sendMarked(s: TestStack, markers: string[]): Promise<void> {
  const answers = await Promise.all(
    markers.flatMap((m) => [s.report(m, 'heartbeat', { version: m }), s.report(m, 'status', { status: 'running', message: m })]),
  );
  const refused = answers.filter((a) => a.status !== 200);
  if (refused.length > 0) throw new Error(`not acknowledged: ${refused.map((a) => `${a.status} ${JSON.stringify(a.body)}`).join('; ')}`);
}

export interface Fault {
  dependency: Dependency;
  /** What /readyz must say about it. */
  reason: RegExp;
  start(): Promise<void>;
  end(): Promise<void>;
}

/**
 * The whole outage test: `n` markers sent during `fault`, which ends only once the worker has
 * tried a batch of them at least 7 times (the old rule dead-lettered at the 5th delivery).
 * The stack's tables must have merges stopped (done here) before anything of theirs is inserted.
 */
export async function outageTest(t: Test, s: TestStack, worker: { proc: Proc; url: string }, prefix: string, n: number, fault: Fault): Promise<void> {
  await stopMerges(s.ch, `t_${s.id}`);
  const markers = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  const dlqBefore = await deadLetterCount(s);
  const since = worker.proc.lines.length;
  await fault.start();
  await sendMarked(s, markers);
  t.pass(`${2 * n} reports acknowledged (200) during the fault`);

  const seen = await eventually(async () => {
    const r = await readyz(worker.url);
    return r.status === 503 && outageNamed(r.detail, fault.dependency) ? r : null;
  }, 60_000, `the worker not ready, naming ${fault.dependency}`);
  t.match(seen.detail, fault.reason, `/readyz: ${seen.detail}`);
  t.equal(await workerMetric(worker.url, 'fleet_worker_outage', { dependency: fault.dependency }), 1, `fleet_worker_outage{dependency="${fault.dependency}"} 1`);
  // Retried far past the old limit of 5 deliveries, and nothing dead-lettered.
  const retried = (l: { msg?: string; deliveries?: unknown }) => / waits for /.test(l.msg ?? '') && Number(l.deliveries) >= 7;
  await eventually(async () => worker.proc.lines.slice(since).some(retried), 120_000, 'a message of the fault delivered 7 times');
  t.ok(await workerMetric(worker.url, 'fleet_worker_retries_total', { dependency: fault.dependency }) >= 6, 'the retries counted');
  t.equal(await deadLetterCount(s), dlqBefore, 'no dead letter while it lasts');
  await fault.end();

  const stored = await eventually(async () => {
    const [hb, st] = await Promise.all([storedOnce(s.ch, 'heartbeats', 'version', markers), storedOnce(s.ch, 'status_history', 'message', markers)]);
    return hb.missing.length === 0 && st.missing.length === 0 ? { hb, st } : null;
  }, 120_000, 'every report stored after the fault');
  // The worker acks after the last write: wait until nothing of the stream is left unacked, then count again.
  await consumed(s, 60_000);
  const hb = await storedOnce(s.ch, 'heartbeats', 'version', markers);
  const st = await storedOnce(s.ch, 'status_history', 'message', markers);
  t.ok(stored.hb.missing.length === 0, 'heartbeats all there');
  t.ok(hb.once, `heartbeats: each exactly once on raw rows (${JSON.stringify(hb)})`);
  t.ok(st.once, `status history: each exactly once on raw rows (${JSON.stringify(st)})`);
  const instances = await s.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM instances WHERE machine = ANY($1)', [markers]);
  t.equal(instances.rows[0]!.n, n, 'every instance in Postgres');
  const status = await s.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM instances WHERE machine = ANY($1) AND status = 'running' AND status_message = machine", [markers]);
  t.equal(status.rows[0]!.n, n, "every instance's latest status in Postgres");
  t.equal(await deadLetterCount(s), dlqBefore, 'zero dead letters');
  const logged = await chRows(s.ch, `SELECT 1 FROM ingest_rejections WHERE method = 'QUEUE' AND path LIKE '%/${prefix}-%'`);
  t.equal(logged.length, 0, 'no dead letter in the rejection log');
  const ready = await eventually(async () => ((await readyz(worker.url)).status === 200 ? true : null), 60_000, 'ready again');
  t.ok(ready, 'ready again once nothing waits');
  t.equal(await workerMetric(worker.url, 'fleet_worker_outage', { dependency: fault.dependency }), 0, 'the outage over');
}
