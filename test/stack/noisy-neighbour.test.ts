// A noisy neighbour: customer A at its full allowed rate with the largest allowed reports
// (1 MiB diagnostics of 120 items of 8,192 characters, status reports with 256 KiB snapshots, 4 MiB
// batches, 1,000-record host metrics), ignoring every 429, with its live streams at their quota,
// while customer B's agents send
// heartbeats. B's p99 apply lag stays within 1 s, every one of B's heartbeats is answered 200 and
// stored once (raw rows, merges stopped), and nothing of B is refused. Then A onboards 3,000 new
// machines while the tables have no planner statistics: B's p99 lag stays within 1 s (with the
// worker's id lookup planned as a join it was 51 s).
//
// Apply lag is measured where the worker applies a heartbeat: its Redis key expires at receive
// time + HEARTBEAT_TIMEOUT_S, so a new expiry time (PEXPIRETIME, polled every 20 ms) is the
// moment that heartbeat was applied, and the expiry time names its receive time.
//
// Runs alone: a latency bound (test/README.md "Files that run alone").
import t, { type Test } from 'tap';
import { testStack, eventually, chRows, request } from '../helpers/stack.js';
import { redisKeys } from '../../lib/infra/redis.js';
import { parseSettings } from '../../lib/infra/config.js';

const TIMEOUT_S = 300;
// The per-customer rates as shipped (the test stack lifts them for other files).
const d = parseSettings({});
const shipped = Object.fromEntries(['QUOTA_INGEST_REQUESTS_PER_S', 'QUOTA_INGEST_BYTES_PER_S', 'QUOTA_STREAM_CONNECTIONS', 'RATE_LIMIT_PER_S', 'RATE_LIMIT_BURST'].map((k) => [k, String(d[k as keyof typeof d])]));
const s = await testStack(t, 'noisy', { api: true, env: { HEARTBEAT_TIMEOUT_S: String(TIMEOUT_S), ...shipped } });
const b = await s.newCustomer(`quiet-${s.id}`);
const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);
const B_MACHINES = 20;
const SECONDS = Number(process.env.NOISY_SECONDS ?? 40);

// ---- A: the largest reports it may send, as fast as it likes ----
const big = (n: number, c: string) => c.repeat(n);
const diagnostics = JSON.stringify({ items: Array.from({ length: 120 }, (_, i) => ({ code: 1000 + i, severity: 2, message: big(8192, 'a') })) });
const statusBody = JSON.stringify({ status: 'degraded', message: big(8000, 'm'), snapshot: { blob: big(250 * 1024, 's') } });
const batch = JSON.stringify({ entries: Array.from({ length: 15 }, (_, i) => ({ machine: `a-batch-${i}`, software: 'agent', kind: 'status', body: { status: 'running', snapshot: { blob: big(250 * 1024, 'b') } } })) });
const metrics = (n: number) => JSON.stringify({ items: Array.from({ length: 1000 }, (_, i) => ({ client_metric_id: `a-${n}-${i}`, values: { v: i, w: 9e20 }, labels: { l: big(100, 'l') } })) });
const aUrl = (machine: string, kind: string) => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/${machine}/agent/${kind}`;
const aAnswers = new Map<number, number>();

async function hostile(stop: () => boolean, lane: number): Promise<void> {
  for (let n = 0; !stop(); n++) {
    const which = n % 4;
    const [url, body] =
      which === 0 ? [aUrl(`a-${lane}`, 'diagnostics'), diagnostics]
      : which === 1 ? [aUrl(`a-${lane}`, 'status'), statusBody]
      : which === 2 ? [`${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, batch]
      : [`${s.gatewayUrl}/api/ingest/${s.customer.slug}/a-${lane}/logcollector/metrics`, metrics(lane * 1_000_000 + n)];
    let answer = -1;
    try {
      answer = (await request('POST', url, s.token, body)).status;
    } catch {
      // Refused before its body was read (429 with the connection closed): the client sees a reset.
    }
    aAnswers.set(answer, (aAnswers.get(answer) ?? 0) + 1);
  }
}

// ---- B: heartbeats, one per machine and second ----
interface Beat {
  machine: string;
  status: number;
}
const beats: Beat[] = [];
async function quiet(stop: () => boolean, m: number): Promise<void> {
  const machine = `b-${m}`;
  while (!stop()) {
    const next = Date.now() + 1000;
    const r = await s.report(machine, 'heartbeat', { version: '1' }, { customer: b.customer.slug, token: b.token });
    beats.push({ machine, status: r.status });
    await new Promise((res) => setTimeout(res, Math.max(0, next - Date.now())));
  }
}

t.test("B's heartbeats are applied within 1 s (p99) while A sends everything it may", async (t) => {
  // B's instances first, so the watcher knows their keys.
  for (let m = 0; m < B_MACHINES; m++) t.equal((await s.report(`b-${m}`, 'heartbeat', {}, { customer: b.customer.slug, token: b.token })).status, 200);
  const ids = await eventually(async () => {
    const r = await s.pool.query<{ id: string }>(`SELECT i.id FROM instances i WHERE i.customer_id = $1`, [b.customer.id]);
    return r.rows.length === B_MACHINES ? r.rows.map((x) => x.id) : null;
  }, 30_000, "B's instances");
  await s.ch.command({ query: `SYSTEM STOP MERGES heartbeats` });

  const watch = watchLags(ids);

  // A's live streams: as many as its quota lets it open, held open the whole time.
  // Each Response is held until the end: fetch cancels the body of one that is garbage collected,
  // which closes its stream (and once let a 51st stream in).
  const streams: { ac: AbortController; r: Response }[] = [];
  for (let i = 0; i < Number(shipped.QUOTA_STREAM_CONNECTIONS); i++) {
    const ac = new AbortController();
    const r = await fetch(`${s.apiUrl}/api/fleet/stream`, { headers: { Authorization: `Bearer ${s.token}` }, signal: ac.signal });
    t.equal(r.status, 200, `A's live stream ${i + 1}`);
    streams.push({ ac, r });
  }
  const over = await fetch(`${s.apiUrl}/api/fleet/stream`, { headers: { Authorization: `Bearer ${s.token}` } });
  t.equal(over.status, 429, 'one more is over its quota');
  await over.body?.cancel();

  const until = Date.now() + SECONDS * 1000;
  const stop = () => Date.now() > until;
  await Promise.all([...Array.from({ length: 4 }, (_, lane) => hostile(stop, lane)), ...Array.from({ length: B_MACHINES }, (_, m) => quiet(stop, m))]);
  t.comment(`A's answers: ${[...aAnswers].map(([k, v]) => `${k}: ${v}`).join(', ')}`);
  const used = await request('GET', `${s.apiUrl}/api/quotas`, s.token);
  t.equal(used.body.quotas?.stream_connections?.used, streams.length, `A's ${streams.length} streams still open on the api after the load`);
  for (const { ac } of streams) ac.abort();

  // Every B heartbeat answered 200 and nothing refused.
  const refused = beats.filter((x) => x.status !== 200);
  t.same(refused, [], `all ${beats.length} of B's heartbeats answered 200`);
  // Stored once: on raw rows, merges stopped.
  const want = beats.length + B_MACHINES;
  await eventually(async () => Number((await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats WHERE customer_id = '${b.customer.id}'`))[0]!.n) >= want, 120_000, "B's heartbeats stored");
  const [row] = await chRows<{ n: string; u: string }>(s.ch, `SELECT count() AS n, uniqExact(report_id) AS u FROM heartbeats WHERE customer_id = '${b.customer.id}'`);
  t.equal(Number(row!.n), want, 'each stored');
  t.equal(Number(row!.u), want, 'once (raw rows)');
  const lags = await watch.stop();
  await s.ch.command({ query: `SYSTEM START MERGES heartbeats` });
  lagWithin(t, lags, beats.length);
  t.ok((aAnswers.get(200) ?? 0) + (aAnswers.get(202) ?? 0) > 0, 'A did get reports in');
});

// A fresh deployment, or one restored without planner statistics: A onboards thousands of new
// machines in batches before anything has analysed the tables. Planned from no statistics, the
// worker's id lookup once took keys x instances x machines (25 s for one batch of 480 over 1,200
// instances: lib/store/instances.ts FIND_INSTANCE_IDS_SQL), and every customer's reports waited
// behind it. B's heartbeats must not notice.
t.test("A onboards 3,000 new machines while the tables have no planner statistics: B's heartbeats are applied within 1 s (p99)", async (t) => {
  await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [s.customer.id]);
  await s.pool.query('ALTER TABLE machines SET (autovacuum_enabled = false); ALTER TABLE instances SET (autovacuum_enabled = false)');
  t.teardown(() => s.pool.query('ALTER TABLE machines RESET (autovacuum_enabled); ALTER TABLE instances RESET (autovacuum_enabled)'));
  const unanalysed = () => s.pool.query(`DELETE FROM pg_statistic WHERE starelid IN ('machines'::regclass, 'instances'::regclass)`);
  await unanalysed();
  const ids = (await s.pool.query<{ id: string }>(`SELECT id FROM instances WHERE customer_id = $1`, [b.customer.id])).rows.map((x) => x.id);
  t.equal(ids.length, B_MACHINES, "B's instances");
  beats.length = 0;
  const watch = watchLags(ids);
  const until = Date.now() + 20_000;
  const stop = () => Date.now() > until;
  const LANES = 3;
  const BATCHES = 10; // per lane, 100 new machines each: 3,000
  let accepted = 0;
  const onboard = async (lane: number) => {
    for (let n = 0; n < BATCHES; n++) {
      const entries = Array.from({ length: 100 }, (_, i) => ({ machine: `onb-${lane}-${n}-${i}`, software: 'agent', kind: 'heartbeat', body: {} }));
      const r = await request('POST', `${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, s.token, { entries });
      accepted += r.body?.accepted ?? 0;
      // An analysis here and there (autovacuum is off; the workers' own starts at 5,000 rows) would
      // hide the plan: each batch meets tables without statistics.
      await unanalysed();
      await new Promise((res) => setTimeout(res, 500));
    }
  };
  await Promise.all([...Array.from({ length: LANES }, (_, lane) => onboard(lane)), ...Array.from({ length: B_MACHINES }, (_, m) => quiet(stop, m))]);
  t.equal(accepted, LANES * BATCHES * 100, "every one of A's entries accepted");
  await eventually(async () => (await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instances WHERE customer_id = $1 AND machine LIKE 'onb-%'`, [s.customer.id])).rows[0]!.n === LANES * BATCHES * 100, 60_000, "A's 3,000 instances");
  t.same(beats.filter((x) => x.status !== 200), [], `all ${beats.length} of B's heartbeats answered 200`);
  lagWithin(t, await watch.stop(), beats.length);
});

/** Watches B's heartbeat keys: a new expiry time is a heartbeat applied now; `stop` gives the lags (ms). */
function watchLags(ids: string[]): { stop(): Promise<number[]> } {
  const lags: number[] = [];
  const lastExpiry = new Map<string, number>();
  let watching = true;
  const watcher = (async () => {
    while (watching) {
      const pipe = s.redis.pipeline();
      for (const id of ids) pipe.call('PEXPIRETIME', keys.heartbeat(id));
      const res = (await pipe.exec())!;
      const seenAt = Date.now();
      ids.forEach((id, i) => {
        const exp = Number(res[i]![1]);
        const before = lastExpiry.get(id);
        if (exp > 0 && before !== undefined && exp > before) lags.push(seenAt - (exp - TIMEOUT_S * 1000));
        if (exp > 0) lastExpiry.set(id, exp);
      });
      await new Promise((res) => setTimeout(res, 20));
    }
  })();
  return {
    async stop() {
      watching = false;
      await watcher;
      return lags.sort((x, y) => x - y);
    },
  };
}

function lagWithin(t: Test, lags: number[], sent: number): void {
  const p = (q: number) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))]!;
  t.comment(`B's apply lag over ${lags.length} heartbeats: p50 ${p(0.5)} ms, p99 ${p(0.99)} ms, max ${lags[lags.length - 1]} ms`);
  t.ok(lags.length >= sent * 0.9, `the watcher saw ${lags.length} of ${sent} heartbeats applied`);
  t.ok(p(0.99) <= 1000, `p99 apply lag ${p(0.99)} ms ≤ 1000 ms`);
}
