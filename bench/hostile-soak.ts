// The hostile soak: for ten minutes (`--seconds`), one hostile customer sends everything it may, and
// much it may not, within its quotas and as fast as it is let (every 429 ignored):
//   - the largest reports: 1 MiB diagnostics of 120 items × 8,192 characters (matched against its
//     1,000 whitelist rules, written to be as expensive as the api lets them), status reports with
//     256 KiB snapshots, 4 MiB batches, 1,000-record host metrics of 9e20 values;
//   - what once ended a gateway or stalled a worker: JSON nested 20,000 deep (a batch entry, a
//     metrics body, a snapshot, a command ack's output), a million values;
//   - an Idempotency-Key reused with another body; unknown tokens; artifact uploads up to its quota
//     (then 507); its live streams at their quota;
// while five ordinary customers send heartbeats (each of 20 machines once a second), diagnostics
// and status reports with Idempotency-Keys. It ends when everything is applied, and checks:
//   - every ordinary report answered 200/202 is stored exactly once, counted as inserted rows by a
//     materialized view that never merges (bench/insert-ledger.ts; FINAL and uniqExact cannot see a
//     doubled report, and merges cannot be stopped for ten minutes);
//   - the ordinary customers' heartbeats were applied within 1 s at p99 (the new expiry time of each
//     heartbeat's Redis key is the moment it was applied; the expiry names its receive time; seen by
//     bench/lag-watcher.ts in a thread of its own);
// The service runs as shipped, one gateway, one api, and two workers: one per lane (WORKER_LANES).
//   - no process restarted (same pids, all running), no ordinary report refused, no 5xx to them;
//   - no dead letters of any ordinary customer.
// Prints one JSON object (bench/run.ts); exit code 1 when a check fails.
// Run alone: `npm run bench -- --only hostile-soak`.
import { randomUUID, createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { Pool as HttpPool } from 'undici';
import { loadConfig } from '../lib/infra/config.js';
import { deadLetterStream } from '../lib/contract/messages.js';
import { soakServers, backlog } from './fixtures.js';
import { createCustomer, createToken } from '../lib/store/customers.js';
import { createUser, addMembership } from '../lib/store/accounts.js';
import { setOverrides } from '../lib/store/quotas.js';
import { insertLedger } from './insert-ledger.js';
import { idempotentReportId } from '../lib/contract/ids.js';
import { Proc } from '../deploy/service-process.js';

const arg = (name: string, dflt: number) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : dflt);
const seconds = arg('--seconds', 600);
const ORDINARY = 5;
const MACHINES = 20;
const HOSTILE_LANES = 4;
const log = (m: string) => process.stderr.write(`[hostile-soak] ${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const cfg = loadConfig();
const { pool, ch, nc, jsm } = await soakServers(cfg, 'hostile-soak', 4);

// ---- customers ----
const run = Date.now().toString(36);
interface Cust {
  id: string;
  slug: string;
  token: string;
}
async function customer(name: string): Promise<Cust> {
  const c = await createCustomer(pool, `${name}-${run}`);
  const { token } = await createToken(pool, c.id, 'soak');
  return { id: c.id, slug: c.slug, token };
}
const hostile = await customer('hostile');
const ordinary = await Promise.all(Array.from({ length: ORDINARY }, (_, i) => customer(`ordinary${i}`)));
await pool.query(`UPDATE licences SET device_limit = 1000000 WHERE customer_id = ANY($1::uuid[])`, [[hostile.id, ...ordinary.map((c) => c.id)]]);
// The hostile customer's artifact quota: small enough that it reaches it within the soak.
await setOverrides(pool, hostile.id, { artifact_bytes: 64 * 1024 * 1024 });
const adminEmail = `hostile-admin-${run}@example.com`;
const adminPassword = `pw-${randomUUID()}`;
const admin = await createUser(pool, { email: adminEmail, password: adminPassword });
await addMembership(pool, admin.id, hostile.id, 'admin');

// ---- the service, as shipped (no limit lifted) ----
const env = { LOG_LEVEL: 'info', GATEWAY_PORT: '0', API_PORT: '0', WORKER_HTTP_PORT: '0' };
// Two workers, one per lane (WORKER_LANES, docs/architecture.md "Lanes"): the heartbeats' worker
// shares its CPU with no report of another kind.
const worker = new Proc('worker', 'workers/main.js', { ...env, WORKER_LANES: 'reports' });
const hbWorker = new Proc('worker-heartbeats', 'workers/main.js', { ...env, WORKER_LANES: 'heartbeats' });
await Promise.all([worker, hbWorker].map((w) => w.waitFor((l) => l.msg === 'consuming', 60_000)));
const gateway = new Proc('gateway', 'gateway/main.js', env);
const gwPort = Number((await gateway.waitFor((l) => l.msg === 'listening', 60_000)).port);
const api = new Proc('api', 'api/main.js', env);
const apiPort = Number((await api.waitFor((l) => l.msg === 'listening', 60_000)).port);
const procs = [worker, hbWorker, gateway, api].map((p) => ({ p, pid: p.child.pid }));
const gw = new HttpPool(`http://127.0.0.1:${gwPort}`, { connections: 64 });
const apiUrl = `http://127.0.0.1:${apiPort}`;

const TABLES = ['heartbeats', 'diagnostics', 'status_history'];
const ledger = await insertLedger(ch, TABLES, `soak${Date.now()}`);

async function post(path: string, token: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  try {
    const r = await gw.request({ method: 'POST', path, headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, ...headers }, body });
    return { status: r.statusCode, text: await r.body.text() };
  } catch {
    return { status: -1, text: '' }; // refused before the body was read (429 or 413 with the connection closed)
  }
}

// ---- the hostile customer's setup: whitelist rules at the limits, live streams at their quota ----
const login = await fetch(`${apiUrl}/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: adminEmail, password: adminPassword }) });
const jwt = ((await login.json()) as { token: string }).token;
let rules = 0;
const ruleRefusals = new Map<string, number>();
for (let i = 0; i < 1000; i++) {
  // Expensive as allowed: long literal texts that nearly match the messages sent, in order, each a
  // little different, over the whole code range.
  const message = i % 2 === 0 ? `*${'a'.repeat(200 + (i % 50))}b*` : `*${'a'.repeat(100)}*${'a'.repeat(100 + (i % 100))}c*`;
  const r = await fetch(`${apiUrl}/api/whitelist`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${jwt}` }, body: JSON.stringify({ code_from: -2147483648, code_to: 2147483647, message }) });
  if (r.status === 201) rules++;
  else ruleRefusals.set(String(r.status), (ruleRefusals.get(String(r.status)) ?? 0) + 1);
  await r.body?.cancel();
}
log(`hostile customer: ${rules} whitelist rules (${[...ruleRefusals].map(([s, n]) => `${n} refused ${s}`).join(', ') || 'none refused'})`);
const streams: AbortController[] = [];
for (let i = 0; i < cfg.quotas.streamConnections + 1; i++) {
  const ac = new AbortController();
  const r = await fetch(`${apiUrl}/api/fleet/stream`, { headers: { authorization: `Bearer ${hostile.token}` }, signal: ac.signal }).catch(() => null);
  if (r?.status === 200) streams.push(ac);
  else await r?.body?.cancel();
}
log(`hostile customer: ${streams.length} live streams open`);

// ---- the hostile customer's traffic ----
const big = (n: number, c: string) => c.repeat(n);
const deep = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
const H = {
  diagnostics: JSON.stringify({ items: Array.from({ length: 120 }, (_, i) => ({ code: 1000 + i, severity: 2, message: big(8191, 'a') + (i % 2 ? 'c' : 'x') })) }),
  status: JSON.stringify({ status: 'degraded', message: big(8000, 'm'), snapshot: { blob: big(250 * 1024, 's') } }),
  batch: JSON.stringify({ entries: Array.from({ length: 15 }, (_, i) => ({ machine: `h-batch-${i}`, software: 'agent', kind: 'status', body: { status: 'running', snapshot: { blob: big(250 * 1024, 'b') } } })) }),
  deepBatch: `{"entries":[{"machine":"h","software":"agent","kind":"heartbeat","body":{"x":${deep(20_000)}}}]}`,
  deepStatus: `{"status":"running","snapshot":{"pad":"${big(300_000, 'p')}","x":${deep(20_000)}}}`,
  deepMetrics: `{"client_metric_id":"d","values":{"x":1},"labels":{"x":${deep(20_000)}}}`,
  deepAck: `{"result":"success","output":${deep(20_000)}}`,
  million: `{"status":"running","snapshot":{"a":[${'0,'.repeat(400_000)}0]}}`,
};
const hostileAnswers = new Map<string, number>();
const count = (what: string, status: number) => hostileAnswers.set(`${what} ${status}`, (hostileAnswers.get(`${what} ${status}`) ?? 0) + 1);
const started = Date.now();
const deadline = started + seconds * 1000;
const over = () => Date.now() > deadline;

async function hostileLane(lane: number): Promise<void> {
  const base = `/api/ingest/${hostile.slug}`;
  for (let n = 0; !over(); n++) {
    const m = `h-${lane}-${n % 10}`;
    const step = n % 12;
    if (step === 0) count('diagnostics', (await post(`${base}/${m}/agent/diagnostics`, hostile.token, H.diagnostics)).status);
    else if (step === 1) count('status', (await post(`${base}/${m}/agent/status`, hostile.token, H.status)).status);
    else if (step === 2) count('batch', (await post(`${base}/batch`, hostile.token, H.batch)).status);
    else if (step === 3) {
      const body = JSON.stringify({ items: Array.from({ length: 1000 }, (_, i) => ({ client_metric_id: `h-${lane}-${n}-${i}`, values: { v: i, w: 9e20 } })) });
      count('metrics', (await post(`${base}/${m}/logcollector/metrics`, hostile.token, body)).status);
    } else if (step === 4) count('deep batch', (await post(`${base}/batch`, hostile.token, H.deepBatch)).status);
    else if (step === 5) count('deep status', (await post(`${base}/${m}/agent/status`, hostile.token, H.deepStatus)).status);
    else if (step === 6) count('deep metrics', (await post(`${base}/${m}/logcollector/metrics`, hostile.token, H.deepMetrics)).status);
    else if (step === 7) count('deep ack', (await post(`${base}/${m}/agent/commands/${randomUUID()}/ack`, hostile.token, H.deepAck)).status);
    else if (step === 8) count('million values', (await post(`${base}/${m}/agent/status`, hostile.token, H.million)).status);
    else if (step === 9) {
      // The same key with another body: the second is refused.
      const key = `reuse-${lane}-${n}`;
      count('key first', (await post(`${base}/${m}/agent/status`, hostile.token, '{"status":"running","message":"one"}', { 'idempotency-key': key })).status);
      count('key reused', (await post(`${base}/${m}/agent/status`, hostile.token, '{"status":"running","message":"two"}', { 'idempotency-key': key })).status);
    } else if (step === 10) count('unknown token', (await post(`${base}/${m}/agent/heartbeat`, `fleet_${randomUUID()}`, '{}')).status);
    else {
      // An artifact of 4 MiB, until the quota says 507.
      const init = await post(`${base}/${m}/agent/artifact-init`, hostile.token, JSON.stringify({ filename: 'x.bin', size: 4 * 1024 * 1024 }));
      count('artifact-init', init.status);
      if (init.status === 201) {
        const u = JSON.parse(init.text) as { upload_id: string; chunks: number; chunk_size: number };
        const chunk = Buffer.alloc(u.chunk_size, lane);
        for (let c = 0; c < u.chunks && !over(); c++) {
          const r = await gw.request({ method: 'PUT', path: `${base}/${m}/agent/artifact-chunk/${u.upload_id}/${c}`, headers: { 'content-type': 'application/octet-stream', authorization: `Bearer ${hostile.token}` }, body: chunk }).catch(() => null);
          count('artifact-chunk', r?.statusCode ?? -1);
          await r?.body.dump();
        }
        count('artifact-complete', (await post(`${base}/${m}/agent/artifact-complete/${u.upload_id}`, hostile.token, '')).status);
      }
    }
  }
}

// ---- the ordinary customers ----
interface Acked {
  customer: number;
  kind: 'heartbeat' | 'diagnostics' | 'status';
  id: string;
  rows: number;
}
const acked: Acked[] = [];
const ordinaryAnswers = new Map<number, number>();
async function ordinaryMachine(ci: number, mi: number): Promise<void> {
  const c = ordinary[ci]!;
  const base = `/api/ingest/${c.slug}/o-${mi}/agent`;
  for (let n = 0; !over(); n++) {
    const due = started + n * 1000 + mi * 37;
    if (due > Date.now()) await sleep(due - Date.now());
    const sends: [Acked['kind'], string, number][] = [['heartbeat', JSON.stringify({ version: '5.10.2', uptime_seconds: n }), 1]];
    if (n % 10 === mi % 10) sends.push(['diagnostics', JSON.stringify({ items: [{ code: 7, severity: 1, message: `disk ${n}` }, { code: 8, severity: 0, message: 'ok' }] }), 2]);
    if (n % 30 === mi % 30) sends.push(['status', JSON.stringify({ status: 'running', snapshot: { cpu: { value: n % 100, type: 'percent' } } }), 1]);
    for (const [kind, body, rows] of sends) {
      const key = `o-${run}-${ci}-${mi}-${kind}-${n}`;
      const r = await post(`${base}/${kind}`, c.token, body, { 'idempotency-key': key });
      ordinaryAnswers.set(r.status, (ordinaryAnswers.get(r.status) ?? 0) + 1);
      if (r.status === 200 || r.status === 202) acked.push({ customer: ci, kind, id: idempotentReportId(c.id, kind, `o-${mi}`, 'agent', key), rows });
    }
  }
}

// ---- apply lag of the ordinary customers' heartbeats (bench/lag-watcher.ts, a thread of its own) ----
const watcherThread = new Worker(new URL('./lag-watcher.js', import.meta.url), {
  workerData: { redisUrl: cfg.redisUrl, redisPrefix: cfg.redisPrefix, timeoutMs: cfg.heartbeatTimeoutS * 1000 },
});
let watching = true;
async function watch(): Promise<number[]> {
  // The instances appear with their first heartbeats; the thread is told each time more exist.
  let n = 0;
  while (watching && n < ORDINARY * MACHINES) {
    const r = await pool.query<{ id: string }>(`SELECT id FROM instances WHERE customer_id = ANY($1::uuid[])`, [ordinary.map((c) => c.id)]);
    if (r.rows.length > n) watcherThread.postMessage({ ids: r.rows.map((x) => x.id) });
    n = r.rows.length;
    await sleep(200);
  }
  while (watching) await sleep(200);
  const done = new Promise<number[]>((resolve) => watcherThread.once('message', (m: { lags: number[] }) => resolve(m.lags)));
  watcherThread.postMessage({ stop: true });
  const lags = await done;
  await watcherThread.terminate();
  return lags;
}

log(`${seconds} s: 1 hostile customer (${HOSTILE_LANES} lanes), ${ORDINARY} ordinary customers × ${MACHINES} machines`);
const watcher = watch();
await Promise.all([
  ...Array.from({ length: HOSTILE_LANES }, (_, l) => hostileLane(l)),
  ...ordinary.flatMap((_, ci) => Array.from({ length: MACHINES }, (_, mi) => ordinaryMachine(ci, mi))),
]);
for (const ac of streams) ac.abort();
const sendS = (Date.now() - started) / 1000;
log(`sent for ${sendS.toFixed(0)} s; waiting for the stream to drain`);
const drainStart = Date.now();
for (;;) {
  if ((await backlog(jsm, cfg)) === 0) break;
  if (Date.now() - drainStart > 600_000) break;
  await sleep(500);
}
watching = false;
const lags = await watcher;

// ---- stored exactly once, on raw rows ----
const want = new Map<string, Map<string, number>>();
for (const a of acked) {
  const table = a.kind === 'heartbeat' ? 'heartbeats' : a.kind === 'diagnostics' ? 'diagnostics' : 'status_history';
  const m = want.get(table) ?? new Map<string, number>();
  m.set(a.id, a.rows);
  want.set(table, m);
}
let missing = 0;
let doubled = 0;
for (const [table, ids] of want) {
  const got = await ledger.inserted(table, ordinary.map((c) => c.id));
  for (const [id, n] of ids) {
    const g = got.get(id) ?? 0;
    if (g < n) missing++;
    else if (g > n) doubled++;
  }
}
await ledger.drop();

const dlq = await jsm.streams.info(deadLetterStream(cfg.streamName), { subjects_filter: '>' });
const dlqBySubject = (dlq.state as { subjects?: Record<string, number> }).subjects ?? {};
const ordinaryDeadLetters = ordinary.reduce((n, c) => n + Object.entries(dlqBySubject).filter(([s]) => s.endsWith(`.${c.slug}`)).reduce((m, [, v]) => m + v, 0), 0);
const restarts = procs.filter(({ p, pid }) => !p.running || p.child.pid !== pid).map(({ p }) => p.name);
lags.sort((a, b) => a - b);
const q = (x: number) => (lags.length ? lags[Math.min(lags.length - 1, Math.floor(x * lags.length))]! : null);
const refusedOrdinary = [...ordinaryAnswers].filter(([s]) => s !== 200 && s !== 202).reduce((n, [, v]) => n + v, 0);

const result = {
  seconds,
  workers: { reports: 1, heartbeats: 1 },
  hostile: {
    whitelist_rules: rules,
    rules_refused: Object.fromEntries(ruleRefusals),
    live_streams: streams.length,
    answers: Object.fromEntries([...hostileAnswers].sort()),
  },
  ordinary: {
    customers: ORDINARY,
    machines: ORDINARY * MACHINES,
    answers: Object.fromEntries([...ordinaryAnswers].sort((a, b) => a[0] - b[0])),
    acknowledged: acked.length,
    missing,
    doubled,
    refused: refusedOrdinary,
    dead_letters: ordinaryDeadLetters,
    heartbeat_apply_lag_ms: { n: lags.length, p50: q(0.5), p99: q(0.99), max: lags.length ? lags[lags.length - 1] : null },
  },
  dead_letters_by_subject: dlqBySubject,
  restarts,
  drain_after_send_s: (Date.now() - drainStart) / 1000,
  digest: createHash('sha256').update(JSON.stringify([...hostileAnswers])).digest('hex').slice(0, 8),
};
const ok = missing === 0 && doubled === 0 && refusedOrdinary === 0 && ordinaryDeadLetters === 0 && restarts.length === 0 && (q(0.99) ?? Infinity) <= 1000;
log(
  `ordinary: ${acked.length} acknowledged, ${missing} missing, ${doubled} doubled, ${refusedOrdinary} refused, ${ordinaryDeadLetters} dead letters; ` +
    `heartbeat apply lag p50 ${q(0.5)} ms, p99 ${q(0.99)} ms; restarts: ${restarts.join(', ') || 'none'}: ${ok ? 'OK' : 'FAILED'}`,
);
await gw.close();
await Promise.all(procs.map(({ p }) => p.stop()));
await nc.close();
await pool.end();
await ch.close();
process.stdout.write(JSON.stringify({ ...result, ok }) + '\n');
process.exit(ok ? 0 : 1);
