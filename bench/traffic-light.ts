// Benchmark of the traffic light (issue 4): N instances heartbeat once, together, and go silent.
// Measures how long after the timeout the last one is recorded red, how many events were recorded
// (exactly one red per instance is the requirement), and the Redis memory each instance's heartbeat
// key costs. Prints one JSON object on stdout; progress goes to stderr.
//
//   node dist/bench/traffic-light.js [--instances 100000] [--workers 1] [--timeout-s 150] [--waiting]
//
// --waiting: every instance heartbeats a second time once all are green, and that heartbeat
// changes nothing, so it skips Postgres and waits in Redis for the flusher (PG_HEARTBEAT_INTERVAL_S)
// as a live fleet's heartbeats do. They fall silent then, and each is judged from its waiting
// heartbeat's time in Redis (HeartbeatState.waiting): the silence of a fleet in steady state, where
// without --waiting every instance's one heartbeat is in Postgres already.
//
// Runs against the servers of the usual environment (NATS_URL, DATABASE_URL, REDIS_URL,
// CLICKHOUSE_URL, CLICKHOUSE_DB, ...; lib/infra/config.ts). It keeps out of the way of a deployment on
// the same servers: its own stream (`${STREAM_NAME}_LIGHTBENCH`), subjects
// (`${SUBJECT_PREFIX}-lightbench`), Redis prefix (`${REDIS_PREFIX}lightbench:`) and customer
// (`lightbench-<random>`), and its own worker processes (dist/workers/main.js) with the given
// timeout. The heartbeats are published straight onto the stream (as a gateway would: one receive
// time for all), so the gateway is not what is measured. Afterwards it removes the customer, its
// ClickHouse rows, the stream and its Redis keys.
import { randomBytes, randomUUID } from 'node:crypto';
import { loadConfig } from '../lib/infra/config.js';
import { createPool } from '../lib/infra/postgres.js';
import { createClickHouse, queryRows } from '../lib/infra/clickhouse.js';
import { chStr } from '../lib/infra/clickhouse-sql.js';
import { createRedis, redisKeys } from '../lib/infra/redis.js';
import { connectNats, ensureStreams } from '../lib/infra/nats.js';
import { migrate } from '../lib/store/migrate.js';
import { createCustomer } from '../lib/store/customers.js';
import { encodeBatch, encodeReport, subjects, deadLetterStream, heartbeatStream } from '../lib/contract/messages.js';
import { Proc } from '../deploy/service-process.js';
import { countArg } from './args.js';
import { snapshot, redisStats, redisDelta, type CpuSnapshot } from './cpu.js';
import type { LightMessage } from '../lib/domain/traffic-light.js';


const N = countArg('instances', 100_000);
const WORKERS = countArg('workers', 1);
// 90 s: the first heartbeats of 100,000 new instances take 30-60 s to apply on this machine
// (creating them), and every one must be applied before its deadline (below).
const TIMEOUT_S = countArg('timeout-s', 150);
const WAITING = process.argv.includes('--waiting');
const PER_MESSAGE = 500;
const log = (msg: string) => process.stderr.write(`[bench traffic-light] ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const base = loadConfig();
const names = {
  STREAM_NAME: `${base.streamName}_LIGHTBENCH`,
  SUBJECT_PREFIX: `${base.subjectPrefix}-lightbench`,
  REDIS_PREFIX: `${base.redisPrefix}lightbench:`,
};

const pool = createPool(base.databaseUrl, 4, 'fleet-bench');
const ch = createClickHouse({ url: base.clickhouseUrl, database: base.clickhouseDatabase, user: base.clickhouseUser, password: base.clickhousePassword });
const redis = createRedis(base.redisUrl);
const nc = await connectNats(base.natsUrl, 'bench-traffic-light');
const workers: Proc[] = [];
let customerId = '';

async function usedMemory(): Promise<number> {
  const info = await redis.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)![1]);
}

/** µs of CPU per change of each process between two snapshots, their total, and the cores busy on average. */
function lightCpu(a: CpuSnapshot, b: CpuSnapshot, changes: number) {
  const us_per_change: Record<string, number> = {};
  let total = 0;
  for (const [name, sec] of Object.entries(b.seconds)) {
    const d = sec - (a.seconds[name] ?? 0);
    total += d;
    us_per_change[name] = Math.round((d * 1e6) / Math.max(1, changes));
  }
  us_per_change.total = Math.round((total * 1e6) / Math.max(1, changes));
  const wall_s = Math.round((b.at - a.at) / 100) / 10;
  const r1 = (x: number) => Math.round(x * 10) / 10;
  // The machine meanwhile: its busy CPU-seconds, how many of them went to anything but the
  // processes above (this bench, other programs), and the time stolen by the hypervisor.
  const host = { busy_s: r1(b.host.busy - a.host.busy), others_s: r1(b.host.busy - a.host.busy - total), steal_s: r1(b.host.steal - a.host.steal) };
  return { changes, wall_s, cpu_s: r1(total), cores_busy: Math.round((total / Math.max(0.1, wall_s)) * 100) / 100, us_per_change, host };
}

/** Whether pg_stat_statements is loaded (PG_STAT_STATEMENTS=1); if so its counts start again now. */
async function statementsReset(): Promise<boolean> {
  try {
    await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await pool.query('SELECT pg_stat_statements_reset()');
    return true;
  } catch {
    return false;
  }
}

/** The 15 statements of the most execution time since statementsReset, all databases. */
async function statementsTop() {
  const r = await pool.query<{ query: string; calls: string; total_ms: number; rows: string }>(
    `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query, calls::text, round(total_exec_time::numeric, 1)::float8 AS total_ms, rows::text
       FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15`,
  );
  return r.rows.map((x) => ({ total_ms: x.total_ms, calls: Number(x.calls), rows: Number(x.rows), query: x.query }));
}

async function countKeys(pattern: string): Promise<number> {
  let n = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 10_000);
    cursor = next;
    n += keys.length;
  } while (cursor !== '0');
  return n;
}

async function countLight(light: string): Promise<number> {
  // The stored colours alone, by their (customer_id, light) index: joined to instances, a count of
  // 100,000 red took Postgres 250 ms (bench/README.md "The light bench's own load").
  const r = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instance_lights WHERE customer_id = $1 AND light = $2`, [customerId, light]);
  return r.rows[0]!.n;
}

/**
 * A worker from dist/ (deploy/service-process.ts) with this bench's names and timeout, ready once it
 * consumes. On Node's own flags, not `nodeFlags()`: this bench has always run its workers so, and its
 * figures stay comparable. FLEET_PROFILE_DIR: a CPU profile of each. BENCH_WORKER_LOG=1: their logs go to stderr (for looking into a run).
 */
async function startWorker(i: number): Promise<void> {
  const env = { ...names, HEARTBEAT_TIMEOUT_S: String(TIMEOUT_S), WORKER_HTTP_PORT: '0', LOG_LEVEL: process.env.BENCH_WORKER_LOG_LEVEL ?? 'info' };
  // FLEET_PROFILE_DIR: each worker writes a V8 CPU profile there when it stops (as deploy/service-process.ts does for the stack's).
  const flags = process.env.FLEET_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.FLEET_PROFILE_DIR}`] : [];
  const worker = new Proc(`worker ${i}`, 'workers/main.js', env, { flags, echo: process.env.BENCH_WORKER_LOG === '1' });
  workers.push(worker);
  await worker.waitFor((l) => l.msg === 'consuming', 60_000);
}

async function cleanup(): Promise<void> {
  await Promise.all(workers.map((w) => w.stop()));
  const jsm = await nc.jetstreamManager();
  await jsm.streams.delete(names.STREAM_NAME).catch(() => {});
  await jsm.streams.delete(deadLetterStream(names.STREAM_NAME)).catch(() => {});
  await jsm.streams.delete(heartbeatStream(names.STREAM_NAME)).catch(() => {});
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${names.REDIS_PREFIX}*`, 'COUNT', 5000);
    cursor = next;
    if (keys.length) await redis.del(...keys);
  } while (cursor !== '0');
  if (customerId) {
    await pool.query('DELETE FROM light_outbox WHERE customer_id = $1', [customerId]);
    await pool.query('DELETE FROM customers WHERE id = $1', [customerId]);
    for (const table of ['heartbeats', 'light_events']) {
      await ch.command({ query: `ALTER TABLE ${table} DELETE WHERE customer_id = ${chStr(customerId)}` }).catch((e) => log(`could not delete ${table} rows: ${e.message}`));
    }
  }
}

/** Checkpoints Postgres has begun so far (timed and requested). */
async function checkpoints(): Promise<number> {
  const r = await pool.query<{ n: string }>('SELECT (checkpoints_timed + checkpoints_req)::text AS n FROM pg_stat_bgwriter');
  return Number(r.rows[0]!.n);
}

async function main() {
  await migrate({ databaseUrl: base.databaseUrl, clickhouseUrl: base.clickhouseUrl, clickhouseDatabase: base.clickhouseDatabase, clickhouseUser: base.clickhouseUser, clickhousePassword: base.clickhousePassword });
  await ensureStreams(await nc.jetstreamManager(), { streamName: names.STREAM_NAME, subjectPrefix: names.SUBJECT_PREFIX, streamMaxBytes: base.streamMaxBytes, streamReplicas: base.streamReplicas });
  const customer = await createCustomer(pool, `lightbench-${randomBytes(4).toString('hex')}`);
  customerId = customer.id;
  log(`${N} instances, ${WORKERS} worker(s), timeout ${TIMEOUT_S} s, customer ${customer.slug}`);
  for (let i = 0; i < WORKERS; i++) await startWorker(i);
  const memBefore = await usedMemory();

  // Every instance heartbeats once, with one receive time: they all fall silent together.
  const js = nc.jetstream();
  const subject = subjects(names.SUBJECT_PREFIX).reports;
  const tokenId = randomUUID();
  /** One heartbeat of every instance, received at `at`. */
  const heartbeatAll = async (at: number) => {
    const inflight = new Set<Promise<unknown>>();
    for (let i = 0; i < N; i += PER_MESSAGE) {
      const reports = [];
      for (let j = i; j < Math.min(N, i + PER_MESSAGE); j++) {
        reports.push(encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: customer.id, customer: customer.slug, machine: `m-${j}`, software: 'agent', tokenId, receivedAt: at }, null));
      }
      const p = js.publish(subject, encodeBatch(reports), { msgID: randomUUID() }).finally(() => inflight.delete(p));
      inflight.add(p);
      if (inflight.size >= 16) await Promise.race(inflight);
    }
    await Promise.all(inflight);
  };
  const t0 = Date.now();
  let deadline = t0 + TIMEOUT_S * 1000;
  await heartbeatAll(t0);
  const published = Date.now();
  log(`published in ${published - t0} ms`);

  let green = 0;
  while (Date.now() < deadline) {
    green = await countLight('green');
    if (green === N) break;
    await sleep(200);
  }
  const applied = Date.now();
  log(`${green} of ${N} green ${applied - t0} ms after the heartbeat`);
  // Instances whose first heartbeat is applied after their deadline turn red when it is applied,
  // not at it: the figures would measure the apply, not the light. No figure, then.
  if (green < N) throw new Error(`only ${green} of ${N} instances applied (green) before their timeout of ${TIMEOUT_S} s: run again with a longer --timeout-s`);
  // The keys are written right after each batch's commit: wait until all are there.
  let keys = 0;
  while (Date.now() < deadline) {
    keys = await countKeys(`${redisKeys(names.REDIS_PREFIX, redis).heartbeatPrefix}*`);
    if (keys >= green) break;
    await sleep(200);
  }
  // --waiting: the second heartbeat of each, which skips Postgres (it changes nothing); every one
  // applied (both streams empty) well before the first one's deadline.
  let waiting: { heartbeats: number; applied_ms: number } | null = null;
  if (WAITING) {
    const t1 = Date.now();
    await heartbeatAll(t1);
    const jsm = await nc.jetstreamManager();
    const queued = async () => (await Promise.all([names.STREAM_NAME, heartbeatStream(names.STREAM_NAME)].map((n) => jsm.streams.info(n)))).reduce((a, i) => a + i.state.messages, 0);
    while ((await queued()) > 0) {
      if (Date.now() > deadline - 10_000) throw new Error(`the second heartbeats were not applied 10 s before the first ones' deadline: run again with a longer --timeout-s`);
      await sleep(200);
    }
    // Waiting in Redis: Postgres still holds the first heartbeat.
    const held = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instances WHERE customer_id = $1 AND last_heartbeat_at < to_timestamp($2::float8 / 1000)`, [customerId, t1]);
    waiting = { heartbeats: held.rows[0]!.n, applied_ms: Date.now() - t1 };
    log(`second heartbeats applied in ${waiting.applied_ms} ms; ${waiting.heartbeats} of ${N} wait in Redis`);
    if (waiting.heartbeats < N * 0.99) throw new Error(`only ${waiting.heartbeats} of ${N} second heartbeats skipped Postgres: the bench would not measure a steady-state silence`);
    deadline = t1 + TIMEOUT_S * 1000;
  }
  const memAfter = await usedMemory();
  log(`${keys} heartbeat keys; used_memory ${memBefore} -> ${memAfter}`);
  // MEMORY USAGE of a sample of heartbeat keys (key, value, expiry and dictionary overhead).
  const sample = await pool.query<{ id: string }>('SELECT id FROM instances WHERE customer_id = $1 ORDER BY random() LIMIT 200', [customerId]);
  const usage = (await Promise.all(sample.rows.map((r) => redis.memory('USAGE', redisKeys(names.REDIS_PREFIX, redis).heartbeat(r.id), 'SAMPLES', '0')))).filter(
    (x): x is number => typeof x === 'number',
  );
  const keyBytes = usage.length ? Math.round(usage.reduce((a, b) => a + b, 0) / usage.length) : null;

  // Wait for the timeout, then for the last one red (stored) and every red event in ClickHouse.
  // Each change the workers record is published on the customer's live stream (core NATS, as the
  // api's dashboards get it): the bench follows it there instead of counting the colours in
  // Postgres, which at 100,000 instances cost Postgres a join of every red row per count, ten
  // times a second, on the two cores the light shares (bench/README.md "The light bench's own
  // load"). A change lost on core NATS is found by a count every 2 s.
  const reds = new Set<string>();
  let lastSeen = 0;
  const sub = nc.subscribe(subjects(names.SUBJECT_PREFIX).control(`light.${customerId}`), {
    callback: (err, m) => {
      if (err) return;
      for (const e of (JSON.parse(new TextDecoder().decode(m.data)) as LightMessage).events) {
        if (e.to === 'red' && !reds.has(e.instance_id)) {
          reds.add(e.instance_id);
          lastSeen = Date.now();
        }
      }
    },
  });
  await nc.flush();
  await sleep(Math.max(0, deadline - Date.now()));
  // What the light's work costs each process from the timeout to the last red (CPU from /proc):
  // the workers, Postgres, Redis, ClickHouse and NATS, not this bench.
  const procs = Object.fromEntries(workers.map((w, i) => [`worker_${i}`, w.child.pid]));
  const cpu0 = await snapshot(base.dataDir, procs, pool);
  const redis0 = await redisStats(redis);
  const statements = await statementsReset();
  const checkpoints0 = await checkpoints();
  // Postgres's own maintenance meanwhile, sampled every 100 ms: what its autovacuum workers ran.
  const autovacuum: Record<string, number> = {};
  let red = 0;
  const giveUp = deadline + Math.max(120_000, N);
  for (let lastCount = 0; Date.now() < giveUp; await sleep(100)) {
    for (const r of (await pool.query<{ q: string }>("SELECT query AS q FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")).rows)
      autovacuum[r.q] = (autovacuum[r.q] ?? 0) + 1;
    if (reds.size >= N) break;
    if (Date.now() - lastCount >= 2000) {
      lastCount = Date.now();
      if ((await countLight('red')) === N) {
        lastSeen = Date.now();
        break;
      }
    }
  }
  const cpu1 = await snapshot(base.dataDir, procs, pool);
  const redis1 = await redisStats(redis);
  const checkpointsDuring = (await checkpoints()) - checkpoints0;
  const topStatements = statements ? await statementsTop() : null;
  await sub.drain();
  red = await countLight('red');
  const allRedSeen = lastSeen;
  const where = `customer_id = ${chStr(customerId)}`;
  let ev: Record<string, string | number> = {};
  while (Date.now() < giveUp + 30_000) {
    ev = (
      await queryRows<Record<string, string | number>>(
        ch,
        `SELECT count() AS events, countIf(to_light = 'red') AS red, countIf(to_light = 'red' AND cause = 'expiry') AS red_by_expiry,
                countIf(to_light = 'red' AND cause = 'sweep') AS red_by_sweep, countIf(to_light = 'red' AND cause = 'report') AS red_by_report,
                uniqExact(instance_id) AS instances, max(recorded_ms) AS last_recorded_ms,
                quantile(0.5)(recorded_ms - at_ms) AS p50, quantile(0.99)(recorded_ms - at_ms) AS p99
           FROM light_events FINAL WHERE ${where} AND to_light = 'red'`,
      )
    )[0]!;
    if (Number(ev.red) >= red) break;
    await sleep(500);
  }
  const all = (await queryRows<{ final: string; raw: string; most: string }>(
    ch,
    `SELECT (SELECT count() FROM light_events FINAL WHERE ${where}) AS final, (SELECT count() FROM light_events WHERE ${where}) AS raw,
            (SELECT max(c) FROM (SELECT instance_id, countIf(to_light = 'red') AS c FROM light_events FINAL WHERE ${where} GROUP BY instance_id)) AS most`,
  ))[0]!;

  const result = {
    bench: 'traffic-light',
    instances: N,
    workers: WORKERS,
    heartbeat_timeout_s: TIMEOUT_S,
    publish_ms: published - t0,
    all_green_after_heartbeat_ms: applied - t0,
    // --waiting: how many instances' second heartbeat waited in Redis when they fell silent.
    waiting_heartbeats: waiting,
    red_instances: red,
    last_red_after_timeout_ms: Number(ev.last_recorded_ms) - deadline,
    red_latency_ms: { p50: Math.round(Number(ev.p50)), p99: Math.round(Number(ev.p99)) },
    last_red_seen_stored_after_timeout_ms: allRedSeen - deadline,
    events_recorded: Number(all.final),
    red_events: Number(ev.red),
    red_events_by_cause: { expiry: Number(ev.red_by_expiry), sweep: Number(ev.red_by_sweep), report: Number(ev.red_by_report) },
    max_red_events_per_instance: Number(all.most),
    duplicate_rows_before_merge: Number(all.raw) - Number(all.final),
    // Two views: MEMORY USAGE per heartbeat key (sampled), and Redis' used_memory growth / N.
    redis_heartbeat_keys: keys,
    redis_bytes_per_instance: keyBytes,
    redis_used_memory_growth_per_instance: Math.round((memAfter - memBefore) / N),
    red_seen_on_live_stream: reds.size,
    // CPU per change of colour (µs, user + system) of each process from the timeout until the last
    // red was seen, and how many cores were busy meanwhile: on two cores, 100,000 changes within
    // 2 s leave at most 40 µs of CPU per change in all.
    light_cpu: lightCpu(cpu0, cpu1, red),
    // With PG_STAT_STATEMENTS=1 (its Postgres started so): the statements that took Postgres's
    // time in the same window, by total execution time (ms), with their calls and rows.
    light_pg_statements: topStatements,
    // Redis's own account of the same window (INFO commandstats: µs of Redis per 100,000 changes,
    // and calls; keys expired), as the cost scenarios record it.
    light_redis: redisDelta(redis0, redis1, red),
    // Postgres's maintenance in the same window: checkpoints begun, and the autovacuum workers'
    // statements with the 100-ms samples that saw each (a run whose Postgres took twice its usual
    // CPU per change had every statement slower alike: bench/README.md "One outbox row per recording")
    light_pg_maintenance: { checkpoints: checkpointsDuring, autovacuum_samples: autovacuum },
  };
  process.stdout.write(JSON.stringify(result) + '\n');
}

let failed = false;
try {
  await main();
} catch (e) {
  failed = true;
  log(`failed: ${(e as Error).stack ?? e}`);
} finally {
  await cleanup().catch((e) => log(`cleanup: ${(e as Error).message}`));
  await Promise.allSettled([pool.end(), ch.close(), redis.quit(), nc.close()]);
}
process.exit(failed ? 1 : 0);
