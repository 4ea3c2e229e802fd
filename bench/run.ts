// `npm run bench [-- --quick] [-- --only a,b]`: measures, in one run on one machine, the ceiling
// (bare uWS), the usual alternative (Fastify + one Postgres INSERT per request), our gateway
// (heartbeat, diagnostics, status, with durable JetStream acks), end-to-end lag at a fixed offered
// rate, worker drain with one and two workers, and peak RSS. Load comes from generators in their
// own processes (wrk; a paced undici client for the fixed rate). Results: bench/results/*.json (one
// file per run, named by bench/results.ts; a partial run never rewrites a full or quick run's file)
// and the table in bench/README.md. Called by deploy/stack.ts, which started fresh servers.
import { fork, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join, relative } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Config } from '../lib/infra/config.js';
import { createPool } from '../lib/infra/postgres.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { connectNats, ensureStreams, ensureConsumer } from '../lib/infra/nats.js';
import { encodeBatch, encodeReport, subjects, ingestStreams } from '../lib/contract/messages.js';
import { migrate } from '../lib/store/migrate.js';
import { Proc } from '../deploy/service-process.js';
import { createFixtures, backlog, LIFTED_CUSTOMER_RATES, type BODIES } from './fixtures.js';
import { wrk, type WrkResult } from './wrk.js';
import { writeReport, renderTable, writeCapacity } from './report.js';
import { snapshot, perHundredThousand, redisStats, redisDelta } from './cpu.js';
import { createRedis, redisKeys } from '../lib/infra/redis.js';
import { whitelistBench } from './whitelist.js';
import { newRun, benchRatios, writeRunFiles, type RunInfo } from './results.js';

/** Reports per message in the drain's stream, as the gateway groups them at most. */
const DRAIN_PER_MSG = 500;
const log = (m: string) => process.stderr.write(`[bench] ${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function peakRssMb(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const kb = /VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Math.round(Number(kb) / 1024) : 0;
  } catch {
    return 0;
  }
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Scenarios that measure code in this process only: `--only` with just these needs no servers. */
export const CPU_ONLY = new Set(['whitelist']);

/** Whether `npm run bench` with these arguments needs the servers (deploy/stack.ts starts them). */
export function needsServers(args: string[]): boolean {
  const i = args.indexOf('--only');
  return i < 0 || !args[i + 1]!.split(',').every((s) => CPU_ONLY.has(s));
}

export interface BenchOptions {
  quick: boolean;
  only: Set<string> | null;
  /** Offered rates of the end-to-end scenario, reports/s. */
  e2eRates: number[];
  /** The gateway scenario's kinds (`--gateway-kinds batch`: one kind alone, e.g. under FLEET_PROFILE_DIR). */
  gatewayKinds: GatewayKind[];
}

const GATEWAY_KINDS = ['heartbeat', 'diagnostics', 'status', 'metrics', 'batch'] as const;
type GatewayKind = (typeof GATEWAY_KINDS)[number];

function gatewayKinds(args: string[]): GatewayKind[] {
  const i = args.indexOf('--gateway-kinds');
  if (i < 0) return [...GATEWAY_KINDS];
  const kinds = args[i + 1]!.split(',');
  const unknown = kinds.filter((k) => !(GATEWAY_KINDS as readonly string[]).includes(k));
  if (unknown.length) throw new Error(`--gateway-kinds: unknown ${unknown.join(', ')} (known: ${GATEWAY_KINDS.join(', ')})`);
  return kinds as GatewayKind[];
}

export async function runBench(cfg: Config, root: string, args: string[]): Promise<void> {
  const opt: BenchOptions = {
    quick: args.includes('--quick'),
    only: args.includes('--only') ? new Set(args[args.indexOf('--only') + 1]!.split(',')) : null,
    e2eRates: (args.includes('--rate') ? args[args.indexOf('--rate') + 1]! : '10000,20000').split(',').map(Number),
    gatewayKinds: gatewayKinds(args),
  };
  const want = (s: string) => !opt.only || opt.only.has(s);
  const D = opt.quick
    ? { wrkS: 4, warmS: 1, e2eS: 8, drain: 100_000, customers: 100, machines: 20, costS: 5 }
    : { wrkS: 15, warmS: 3, e2eS: 30, drain: 1_000_000, customers: 100, machines: 100, costS: 20 };

  const results: BenchResults = {
    ...newRun(root, opt),
    args,
    machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? '', memory_gib: Math.round(totalmem() / 1024 ** 3), node: process.version },
    load: { customers: D.customers, machines: D.customers * D.machines, wrk: { threads: 1, connections: 64, seconds: D.wrkS } },
  };
  const throughput: Record<string, WrkResult> = {};
  const rss: Record<string, number> = {};

  // Whitelist matching: pure CPU in this process, no servers needed (bench/whitelist.ts).
  if (want('whitelist')) {
    log('whitelist matching (in process)');
    results.whitelist = whitelistBench(opt.quick, log);
  }
  if (!needsServers(args)) return finishBench(cfg, root, results, throughput, rss);

  await migrate(cfg);
  const pool = createPool(cfg.databaseUrl, 4, 'bench');
  const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase });
  const nc = await connectNats(cfg.natsUrl, 'bench');
  const jsm = await nc.jetstreamManager();
  await ensureStreams(jsm, cfg);
  for (const stream of ingestStreams(cfg.streamName)) await ensureConsumer(jsm, stream, cfg.worker.consumerName, cfg.worker.ackWaitS);
  const purge = () => Promise.all(ingestStreams(cfg.streamName).map((n) => jsm.streams.purge(n)));
  const fx = await createFixtures(pool, join(cfg.dataDir, 'fixtures'), D.customers, D.machines);
  const env: Record<string, string> = { LOG_LEVEL: 'warn', GATEWAY_PORT: '0', API_PORT: '0' };
  const started: Proc[] = [];
  const startProc = async (name: string, script: string, extra: Record<string, string> = {}, ready = 'listening') => {
    const p = new Proc(name, script, { ...env, ...extra, LOG_LEVEL: 'info' });
    started.push(p);
    const l = await p.waitFor((x) => x.msg === ready, 60_000);
    return { p, port: Number(l.port ?? 0) };
  };

  const load = async (name: string, port: number, kind: keyof typeof BODIES) => {
    const url = `http://127.0.0.1:${port}`;
    // Host metrics have their own path: …/{machine}/logcollector/metrics.
    const targets = kind === 'metrics' ? fx.targets(kind, 'logcollector') : fx.targets(kind);
    await wrk({ url, targetsFile: targets, bodyFile: fx.body(kind), seconds: D.warmS, root }); // warm-up (JIT, caches)
    const r = await wrk({ url, targetsFile: targets, bodyFile: fx.body(kind), seconds: D.wrkS, root });
    throughput[name] = r;
    log(`${name}: ${Math.round(r.requestsPerS)} req/s, p50 ${r.latencyP50Ms} ms, p99 ${r.latencyP99Ms} ms, non-2xx ${r.non2xx}, socket errors ${r.socketErrors}`);
    return r;
  };

  try {
    if (want('ceiling')) {
      const s = await startProc('bare-uws', 'bench/baselines/bare-uws.js');
      await load('ceiling_bare_uws', s.port, 'heartbeat');
      await s.p.stop();
    }
    if (want('alternative')) {
      const s = await startProc('fastify-pg', 'bench/baselines/fastify-pg.js', { DATABASE_URL: cfg.databaseUrl });
      await load('alternative_fastify_pg', s.port, 'heartbeat');
      await s.p.stop();
    }
    if (want('gateway')) {
      // Workers stopped: this measures the gateway with durable JetStream acks; the stream absorbs.
      // The per-token rate limit (1,000 reports/s per token by default, counting batch entries)
      // would cap the batch run at 100 tokens × 1,000: raised, since the gateway is measured here.
      const g = await startProc('gateway', 'gateway/main.js', { RATE_LIMIT_PER_S: '10000000', RATE_LIMIT_BURST: '10000000', ...LIFTED_CUSTOMER_RATES });
      for (const kind of opt.gatewayKinds) {
        await load(`gateway_${kind}`, g.port, kind);
        await purge();
      }
      rss.gateway_mb = peakRssMb(g.p.child.pid);
      await g.p.stop();
    }
    if (want('e2e')) {
      const runs = [];
      for (const rate of opt.e2eRates) runs.push(await e2e(rate));
      results.e2e = runs;
    }
    if (want('drain')) results.drain = await drain();
    if (want('cost')) results.cost = await cost();
    if (want('drain') || want('cost')) results.footprint = await footprint();
    // Scenarios that live in scripts of their own (each prints one JSON object).
    if (want('traffic-light')) {
      results.traffic_light = runScript('traffic-light', opt.quick ? ['--instances', '10000', '--timeout-s', '10'] : [], {});
    }
    // The same silence in a fleet's steady state: each instance's last heartbeat waits in Redis
    // (it skipped Postgres), so each is judged from that heartbeat's time in Redis. A longer timeout: the
    // second round must be applied before the first one's deadline.
    if (want('traffic-light-waiting')) {
      results.traffic_light_waiting = runScript('traffic-light', opt.quick ? ['--instances', '10000', '--timeout-s', '20', '--waiting'] : ['--timeout-s', '180', '--waiting'], {});
    }
    if (want('read-path')) {
      // One customer with 100,000 instances, 50 readers per endpoint while heartbeats stream in.
      results.read_path = runScript('read-path', [], opt.quick ? { BENCH_INSTANCES: '20000', BENCH_DURATION_S: '3', BENCH_READERS: '20' } : {});
    }
    if (want('soak')) {
      // Mixed valid, boundary and invalid reports from several customers; every 200 stored exactly once.
      results.soak = runScript('soak', ['--seconds', opt.quick ? '10' : '60'], {});
    }
    if (want('hostile-soak')) {
      // One hostile customer sends everything it may (and much it may not) for ten minutes beside five
      // ordinary ones: theirs stored exactly once, their heartbeats applied within 1 s (p99), no restarts.
      results.hostile_soak = runScript('hostile-soak', ['--seconds', opt.quick ? '60' : '600'], {});
    }
    if (want('nats-partitions')) {
      // NATS CPU per message and report at R1 and R3, on a three-server cluster of its own (the
      // capacity model's partitions and nodes).
      results.nats_partitions = runScript('nats-partitions', opt.quick ? ['--messages', '2000'] : [], {});
    }
    if (want('commands')) {
      results.commands = runScript('commands', [], opt.quick ? { BENCH_INSTANCES: '2000', BENCH_DURATION_S: '3', BENCH_ROUNDS: '1', BENCH_WARMUP_S: '1' } : {});
    }
  } finally {
    await Promise.all(started.map((p) => p.stop()));
    await nc.close();
    await pool.end();
    await ch.close();
  }

  finishBench(cfg, root, results, throughput, rss);

  /**
   * Starts `n` paced generators (bench/load/paced.ts) sharing `rate` for `seconds`; each reports
   * its acknowledgements over IPC. One Node process cannot offer much more than 5,000 requests/s
   * on this machine, so the rate is split: a generator per 5,000/s.
   */
  function generators(port: number, targets: string, rate: number, seconds: number, onAck: (seq: number, sent: number, ack: number, status: number) => void, bodyFile?: string) {
    const n = Math.max(1, Math.ceil(rate / 5000));
    const done: Promise<{ sent: number; ok: number; failed: number; seconds: number }>[] = [];
    for (let g = 0; g < n; g++) {
      const args = [`http://127.0.0.1:${port}`, targets, String(rate / n), String(seconds), '64', String(1 + g), String(n), ...(bodyFile ? [bodyFile] : [])];
      const gen = fork(join(root, 'dist', 'bench', 'load', 'paced.js'), args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      done.push(
        new Promise((resolve, reject) => {
          gen.on('message', (m: { type: string; acks?: [number, number, number, number][]; sent: number; ok: number; failed: number; seconds: number }) => {
            if (m.type === 'acks') for (const [seq, sent, ack, status] of m.acks!) onAck(seq, sent, ack, status);
            if (m.type === 'done') resolve(m);
          });
          gen.on('exit', (code) => (code ? reject(new Error(`generator exited with ${code}`)) : undefined));
        }),
      );
    }
    return Promise.all(done).then((ds) => ({
      generators: n,
      sent: ds.reduce((a, d) => a + d.sent, 0),
      ok: ds.reduce((a, d) => a + d.ok, 0),
      failed: ds.reduce((a, d) => a + d.failed, 0),
      seconds: Math.max(...ds.map((d) => d.seconds)),
    }));
  }

  /** Fixed offered rate through the gateway with one worker; lag from each 200 to its row in ClickHouse. */
  async function e2e(rate: number) {
    await purge();
    const w = await startProc('worker', 'workers/main.js', {}, 'consuming');
    const g = await startProc('gateway', 'gateway/main.js');
    const targets = fx.targets('heartbeat', 'e2e');
    // Instances exist, with the version the generators send, before the clock starts (first reports
    // create rows; that is not steady state).
    const warmBody = join(fx.dir, 'e2e-warm.json');
    writeFileSync(warmBody, '{"version":"e2e","uptime_seconds":0}');
    await wrk({ url: `http://127.0.0.1:${g.port}`, targetsFile: targets, bodyFile: warmBody, seconds: 2, root });
    await sleep(2000);
    const acked = new Map<number, number>(); // seq -> ack time
    const visible = new Map<number, number>(); // seq -> first poll that saw it
    const sentAt = new Map<number, number>();
    let done: Awaited<ReturnType<typeof generators>> | null = null;
    void generators(g.port, targets, rate, D.e2eS, (seq, sent, ack, status) => {
      if (status === 200) (acked.set(seq, ack), sentAt.set(seq, sent));
    }).then((d) => (done = d));
    const t0 = Date.now();
    // Poll ClickHouse for newly visible reports: every row whose receive time is at or after the
    // earliest send time of a report not seen yet.
    while (!done || visible.size < acked.size) {
      const pollAt = Date.now();
      let unseenMinSent = Infinity;
      for (const [seq, s] of sentAt) if (!visible.has(seq) && s < unseenMinSent) unseenMinSent = s;
      const from = Number.isFinite(unseenMinSent) ? unseenMinSent - 1000 : pollAt - 1000;
      const rs = await ch.query({ query: `SELECT uptime_seconds AS seq FROM heartbeats WHERE received_ms >= ${from} AND software = 'e2e' AND version = 'e2e' AND uptime_seconds > 0`, format: 'JSONEachRow' });
      for (const { seq: v } of (await rs.json()) as { seq: string | number }[]) {
        const seq = Number(v);
        if (!visible.has(seq)) visible.set(seq, pollAt);
      }
      if (done && Date.now() - t0 > (D.e2eS + 60) * 1000) break; // give up on stragglers after a minute
      await sleep(50);
    }
    const lags = [...acked].filter(([s]) => visible.has(s)).map(([s, ack]) => Math.max(0, visible.get(s)! - ack)).sort((a, b) => a - b);
    const d = done as unknown as Awaited<ReturnType<typeof generators>>;
    // A report acknowledged but not seen within the window is either late (stored after it) or not
    // stored: wait until the worker has consumed everything, then look each one up by its number.
    const unseen = [...acked.keys()].filter((seq) => !visible.has(seq));
    let late = 0;
    if (unseen.length > 0) {
      const until = Date.now() + 180_000;
      for (;;) {
        const infos = await Promise.all(ingestStreams(cfg.streamName).map((st) => jsm.consumers.info(st, cfg.worker.consumerName)));
        const left = infos.reduce((a, i) => a + i.num_pending + i.num_ack_pending, 0);
        if (left === 0 || Date.now() > until) break;
        await sleep(500);
      }
      for (let i = 0; i < unseen.length; i += 5000) {
        const part = unseen.slice(i, i + 5000);
        const rs = await ch.query({ query: `SELECT count(DISTINCT uptime_seconds) AS n FROM heartbeats WHERE software = 'e2e' AND version = 'e2e' AND uptime_seconds IN (${part.join(',')})`, format: 'JSONEachRow' });
        late += Number(((await rs.json()) as { n: string | number }[])[0]?.n ?? 0);
      }
    }
    const out = {
      offered_rate: rate,
      achieved_rate: Math.round(d.ok / d.seconds),
      generators: d.generators,
      seconds: D.e2eS,
      sent: d.sent,
      ok: d.ok,
      failed: d.failed,
      visible: lags.length,
      /** Acknowledged, not seen within the window (a minute after the load), stored later. */
      late,
      /** Acknowledged and not stored even once the worker had consumed everything: a lost report. */
      missing: unseen.length - late,
      lag_ms: { p50: quantile(lags, 0.5), p99: quantile(lags, 0.99), max: lags[lags.length - 1] ?? NaN },
      poll_interval_ms: 50,
    };
    log(`e2e at ${rate}/s (${d.generators} generators): achieved ${out.achieved_rate}/s, lag p50 ${out.lag_ms.p50} ms, p99 ${out.lag_ms.p99} ms, max ${out.lag_ms.max} ms, late ${out.late}, missing ${out.missing}`);
    rss[`worker_e2e_${rate}_mb`] = peakRssMb(w.p.child.pid);
    rss[`gateway_e2e_${rate}_mb`] = peakRssMb(g.p.child.pid);
    await g.p.stop();
    await w.p.stop();
    return out;
  }

  /**
   * What 100,000 reports of each kind cost every process, at a paced rate the machine sustains (not
   * at saturation): CPU-seconds from /proc (gateway, worker, nats-server, Postgres with its
   * backends, clickhouse-server, redis-server) between the first report and the moment the worker
   * has committed the last one, and the rows Postgres wrote. Heartbeats are measured twice: as
   * shipped, and with PG_HEARTBEAT_INTERVAL_S=0 (every heartbeat written at once: the design before
   * issue 16), the baseline of the Postgres-rows target.
   */
  async function cost() {
    const plans: { name: string; kind: 'heartbeat' | 'diagnostics' | 'status'; rate: number; env: Record<string, string> }[] = [
      { name: 'heartbeat', kind: 'heartbeat', rate: 5000, env: {} },
      { name: 'heartbeat_pg_every_report', kind: 'heartbeat', rate: 5000, env: { PG_HEARTBEAT_INTERVAL_S: '0' } },
      { name: 'diagnostics', kind: 'diagnostics', rate: 3000, env: {} },
      { name: 'status', kind: 'status', rate: 1500, env: {} },
    ];
    const out: Record<string, unknown> = {};
    const statsRedis = createRedis(cfg.redisUrl);
    for (const p of plans) {
      await purge();
      const w = await startProc('worker', 'workers/main.js', p.env, 'consuming');
      const g = await startProc('gateway', 'gateway/main.js');
      const targets = fx.targets(p.kind, `cost-${p.name.replace(/_/g, '-')}`);
      // Every instance known first (its first report is an insert, not the steady state measured),
      // and the light settled: the deliveries of its first colour done (3,604 of the 4,004 rows
      // per 100,000 paced heartbeats were that, in a run that did not wait for them), and the
      // silences of an earlier run judged (settled()).
      const warm = await warmEvery(`http://127.0.0.1:${g.port}`, targets, fx.body(p.kind), 2);
      await settled();
      await sleep(1500);
      const procs = { gateway: g.p.child.pid, worker: w.p.child.pid };
      const a = await snapshot(cfg.dataDir, procs, pool);
      const ra = await redisStats(statsRedis);
      const d = await generators(g.port, targets, p.rate, D.costS, () => {}, fx.body(p.kind));
      while (!(await drained())) await sleep(100);
      // Postgres publishes a backend's row counts once it is idle for a moment.
      await sleep(1500);
      const b = await snapshot(cfg.dataDir, procs, pool);
      const r = { offered_rate: p.rate, achieved_rate: Math.round(d.ok / d.seconds), failed: d.failed, warm_up: warm, ...perHundredThousand(a, b, d.ok), redis: redisDelta(ra, await redisStats(statsRedis), d.ok) };
      log(`cost of ${p.name}: ${JSON.stringify(r)}`);
      out[p.name] = r;
      await g.p.stop();
      await w.p.stop();
    }
    statsRedis.disconnect();
    out.heartbeat_saturation = await saturation();
    // The steady state at one heartbeat a minute: an instance that changes nothing is written once
    // per PG_HEARTBEAT_INTERVAL_S, whatever its timeout (issue 26; the rows above are a few
    // minutes' worth, in which no flush comes due).
    out.pg_heartbeat_interval_s = cfg.worker.pgHeartbeatIntervalS;
    return out;
  }

  /**
   * The whole pipeline's CPU per heartbeat at saturation (issue 26): wrk, 1 thread × 64
   * connections over 1,000 machines, for `D.wrkS × 2` s, against one gateway and one worker
   * with the rate limits lifted; CPU from /proc of every process, from before the load until the
   * last report is applied. Beside the paced figure (`heartbeat`): at saturation the gateway's
   * groups are large, which flatters the per-report cost.
   */
  async function saturation() {
    await purge();
    const w = await startProc('worker', 'workers/main.js', {}, 'consuming');
    const g = await startProc('gateway', 'gateway/main.js', { RATE_LIMIT_PER_S: '10000000', RATE_LIMIT_BURST: '10000000', ...LIFTED_CUSTOMER_RATES });
    // 1,000 machines (the first of the fixtures' interleaved targets: ten of each customer), as
    // the measurement had them.
    const all = readFileSync(fx.targets('heartbeat', 'cost-saturation'), 'utf8').trim().split('\n');
    const targets = join(cfg.dataDir, 'fixtures', 'targets-heartbeat-saturation-1000.tsv');
    writeFileSync(targets, all.slice(0, 1000).join('\n') + '\n');
    const url = `http://127.0.0.1:${g.port}`;
    // Every instance known first, and the processes warm.
    const warm = await warmEvery(url, targets, fx.body('heartbeat'), D.warmS);
    await settled();
    await sleep(1500);
    const procs = { gateway: g.p.child.pid, worker: w.p.child.pid };
    const a = await snapshot(cfg.dataDir, procs, pool);
    const load = await wrk({ url, targetsFile: targets, bodyFile: fx.body('heartbeat'), seconds: D.wrkS * 2, root });
    while (!(await drained())) await sleep(100);
    await sleep(1500);
    const b = await snapshot(cfg.dataDir, procs, pool);
    const ok = load.requests - load.non2xx;
    const r = perHundredThousand(a, b, ok);
    const out = {
      offered_rate: 'wrk 1×64',
      achieved_rate: Math.round(load.requestsPerS),
      failed: load.non2xx + load.socketErrors,
      warm_up: warm,
      latency_p50_ms: load.latencyP50Ms,
      latency_p99_ms: load.latencyP99Ms,
      ...r,
      machines: Math.min(1000, all.length),
      cpu_us_per_heartbeat: Math.round(r.cpu_s_per_100k.total * 10 * 10) / 10,
    };
    log(`cost at saturation: ${JSON.stringify(out)}`);
    await g.p.stop();
    await w.p.stop();
    return out;
  }

  /**
   * Storage per instance and per row after the scenarios: Redis memory per instance (everything in
   * this Redis, so an upper bound), Postgres bytes per instance (machines and instances with their
   * indexes), ClickHouse compressed bytes per row of each table.
   */
  async function footprint() {
    const redis = createRedis(cfg.redisUrl);
    try {
      const instances = Number((await pool.query<{ n: string }>('SELECT count(*)::text AS n FROM instances')).rows[0]!.n);
      const usedMemory = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1] ?? 0);
      const pgBytes = Number(
        (await pool.query<{ b: string }>(`SELECT (pg_total_relation_size('instances') + pg_total_relation_size('machines'))::text AS b`)).rows[0]!.b,
      );
      const rs = await ch.query({
        query: `SELECT table, sum(rows) AS rows, sum(data_compressed_bytes) AS bytes FROM system.parts WHERE active AND database = currentDatabase() GROUP BY table HAVING rows > 0 ORDER BY table`,
        format: 'JSONEachRow',
      });
      const tables = Object.fromEntries(
        ((await rs.json()) as { table: string; rows: string; bytes: string }[]).map((r) => [r.table, { rows: Number(r.rows), compressed_bytes_per_row: Math.round((Number(r.bytes) / Number(r.rows)) * 10) / 10 }]),
      );
      const out = { instances, redis_bytes_per_instance: Math.round(usedMemory / Math.max(1, instances)), postgres_bytes_per_instance: Math.round(pgBytes / Math.max(1, instances)), clickhouse: tables };
      log(`footprint: ${JSON.stringify(out)}`);
      return out;
    } finally {
      redis.disconnect();
    }
  }

  /** Drain: reports not yet committed (messages pending or unacknowledged × reports per message). */
  async function pending() {
    return (await backlog(jsm, cfg)) * DRAIN_PER_MSG;
  }
  /**
   * The warm-up of a measured window: wrk over `targetsFile` for `seconds`, again until every
   * target's instance exists (at most 10 rounds), then drained. One wrk thread walks the targets in
   * order from a random place, so a warm-up slower than the targets are many leaves some
   * instances to be created in the window: [F10]'s paced heartbeats wrote 3,645 of 10,000 (an
   * insert each in `instances`, `instance_lights` and a machine's update), where the same code
   * alone ([R10]) wrote none (bench/README.md).
   */
  async function warmEvery(url: string, targetsFile: string, bodyFile: string, seconds: number): Promise<{ rounds: number; instances: number; targets: number }> {
    const lines = readFileSync(targetsFile, 'utf8').trim().split('\n');
    // `/api/ingest/<customer>/<machine>/<software>/<kind>`: every target of a file has the same software.
    const software = lines[0]!.split('\t')[0]!.split('/')[5]!;
    const ids = fx.customers.map((c) => c.id);
    for (let rounds = 1; ; rounds++) {
      await wrk({ url, targetsFile, bodyFile, seconds, root });
      while (!(await drained())) await sleep(100);
      const instances = (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instances WHERE software = $1 AND customer_id = ANY($2::uuid[])`, [software, ids])).rows[0]!.n;
      if (instances >= lines.length || rounds >= 10) {
        if (instances < lines.length) log(`warm-up: ${instances} of ${lines.length} instances after ${rounds} rounds: measuring anyway`);
        return { rounds, instances, targets: lines.length };
      }
    }
  }

  async function drained() {
    return (await pending()) === 0;
  }

  /**
   * Nothing of the light left to do before a cost is measured: the changes of colour recorded so
   * far delivered (outbox empty), no instance due for the sweep in Postgres (`recheck_at` passed)
   * or in Redis (`hbdl`), three reads in a row, or 60 s passed (logged). A fixture's instances
   * that went silent since an earlier run (their heartbeat keys expired while no worker ran) are
   * judged red when the worker starts and green again by the warm-up; without this wait those
   * judgements landed in the measured window (997-14,040 Postgres rows per 100,000 paced
   * heartbeats instead of 100: bench/README.md).
   */
  async function settled() {
    const redis = createRedis(cfg.redisUrl);
    const silences = redisKeys(cfg.redisPrefix, redis).heartbeatSilences;
    const started = Date.now();
    try {
      let quiet = 0;
      for (const until = Date.now() + 60_000; Date.now() < until; await sleep(250)) {
        const pg = await pool.query<{ outbox: number; due: number }>(
          `SELECT (SELECT count(*)::int FROM light_outbox) AS outbox,
                  (SELECT count(*)::int FROM instance_lights l JOIN instances i ON i.id = l.instance_id WHERE l.recheck_at < now() AND i.retired_at IS NULL) AS due`,
        );
        const now = Date.now();
        const inRedis = (await Promise.all(silences.map((k) => redis.zcount(k, '-inf', now)))).reduce((a, b) => a + b, 0);
        const left = pg.rows[0]!.outbox + pg.rows[0]!.due + inRedis;
        quiet = left === 0 ? quiet + 1 : 0;
        if (quiet >= 3) {
          log(`settled after ${Date.now() - started} ms`);
          return;
        }
      }
      log(`not settled after 60 s (outbox, instances due or silences in Redis left): measuring anyway`);
    } finally {
      redis.disconnect();
    }
  }

  /** With the workers stopped, fill the stream; then one worker, then two, drain it. */
  async function drain() {
    const js = nc.jetstream();
    const subj = subjects(cfg.subjectPrefix);
    const perMsg = DRAIN_PER_MSG;
    const instances = fx.customers.flatMap((c) => Array.from({ length: D.machines }, (_, m) => ({ c, m: `d-${m}` })));
    const fill = async (n: number) => {
      await purge();
      let pending: Promise<unknown>[] = [];
      for (let i = 0; i < n; i += perMsg) {
        const reports: Buffer[] = [];
        for (let j = i; j < Math.min(n, i + perMsg); j++) {
          const inst = instances[j % instances.length]!;
          const at = Date.now();
          // Steady state: the same version every time, only the uptime moves (a heartbeat that
          // changes nothing Postgres keeps).
          reports.push(encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: inst.c.id, customer: inst.c.slug, machine: inst.m, software: 'agent', tokenId: randomUUID(), receivedAt: at }, Buffer.from(`{"version":"5.10.2","uptime_seconds":${j}}`)));
        }
        pending.push(js.publish(subj.reports, encodeBatch(reports)));
        if (pending.length >= 64) {
          await Promise.all(pending);
          pending = [];
        }
      }
      await Promise.all(pending);
    };
    const run = async (workers: number) => {
      const t = Date.now();
      await fill(D.drain);
      log(`filled ${D.drain} reports in ${Date.now() - t} ms`);
      const ws = await Promise.all(Array.from({ length: workers }, () => startProc('worker', 'workers/main.js', {}, 'consuming')));
      const a = await snapshot(cfg.dataDir, Object.fromEntries(ws.map((w, i) => [`worker_${i + 1}`, w.p.child.pid])), pool);
      // A worker starts consuming as soon as it is up, and a second one may come up a second later:
      // the clock starts once all are consuming, over what is left then.
      const t0 = Date.now();
      const left = await pending();
      let died: string | null = null;
      for (const w of ws) void w.p.exited.then((code) => (died ??= `a worker exited (${code}) during the drain: ${w.p.output.slice(-2000)}`));
      while ((await pending()) > 0) {
        if (died) throw new Error(died);
        await sleep(50);
      }
      const s = (Date.now() - t0) / 1000;
      await sleep(1500);
      const costs = perHundredThousand(a, await snapshot(cfg.dataDir, Object.fromEntries(ws.map((w, i) => [`worker_${i + 1}`, w.p.child.pid])), pool), D.drain);
      for (const w of ws) rss[`worker_drain_${workers}_mb`] = Math.max(rss[`worker_drain_${workers}_mb`] ?? 0, peakRssMb(w.p.child.pid));
      await Promise.all(ws.map((w) => w.p.stop()));
      const rate = Math.round(left / s);
      log(`drain with ${workers} worker(s): ${left} of ${D.drain} reports left when all were consuming, drained in ${s.toFixed(1)} s = ${rate} reports/s`);
      return { reports: D.drain, timed_reports: left, seconds: s, reports_per_s: rate, pg_rows_per_100k: costs.pg_rows_per_100k, cpu_s_per_100k: costs.cpu_s_per_100k };
    };
    // Create the instances first, so both measured runs update existing rows (steady state).
    const warm = await startProc('worker', 'workers/main.js', {}, 'consuming');
    await fill(instances.length);
    while (!(await drained())) await sleep(100);
    await warm.p.stop();
    const one = await run(1);
    const two = await run(2);
    return { one_worker: one, two_workers: two, two_vs_one: Math.round((two.reports_per_s / one.reports_per_s) * 100) / 100, reports_per_message: perMsg, instances: instances.length };
  }

  /** A scenario living in its own script (bench/<name>.ts) that prints one JSON object. */
  function runScript(name: string, args: string[], extraEnv: Record<string, string>): unknown {
    log(`running bench/${name} ${args.join(' ')}`);
    const r = spawnSync(process.execPath, [join(root, 'dist', 'bench', `${name}.js`), ...args], {
      cwd: root,
      env: { ...process.env, ...extraEnv },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
      timeout: 30 * 60_000,
    });
    const lastLine = r.stdout.trim().split('\n').pop() ?? '{}';
    try {
      const out = JSON.parse(lastLine) as Record<string, unknown>;
      return r.status === 0 ? out : { ...out, exit: r.status };
    } catch {
      return { error: r.status === 0 ? 'no JSON result' : `exit ${r.status}`, output: r.stdout.slice(-2000) };
    }
  }
}

/** What a run writes: its RunInfo (id, start, commit, mode) first, then its sections. */
export type BenchResults = RunInfo & Record<string, unknown>;

/**
 * Completes a run's results: its throughput figures, each carrying the run's id; the ratios, from
 * those figures only (a ratio whose figures are not both of this run is null); peak RSS; the end.
 */
export function assembleResults(results: BenchResults, throughput: Record<string, WrkResult>, rss: Record<string, number>, finishedAt = new Date()): BenchResults & { finished_at: string } {
  const figures = Object.fromEntries(
    Object.entries(throughput).map(([k, v]) => [
      k,
      { run_id: results.run_id, requests_per_s: Math.round(v.requestsPerS), p50_ms: v.latencyP50Ms, p99_ms: v.latencyP99Ms, non_2xx: v.non2xx, socket_errors: v.socketErrors },
    ]),
  );
  return { ...results, throughput: figures, ratios: benchRatios(figures), peak_rss_mb: rss, finished_at: finishedAt.toISOString() };
}

/**
 * Writes a finished run's files under root/bench/results/ (bench/results.ts names them: an `only`
 * run gets files of its own); a full run also rewrites the table of bench/README.md and the capacity
 * model of docs/operations.md, each naming the file it came from. Quick and `only` runs touch
 * nothing else. Returns the paths of the result files.
 */
export function publishResults(root: string, results: BenchResults & { finished_at: string }, pgIntervalS?: number): { stamped: string; latest: string } {
  const files = writeRunFiles(join(root, 'bench', 'results'), results);
  if (results.mode === 'full') {
    const source = relative(root, files.stamped);
    writeReport(join(root, 'bench', 'README.md'), results, source);
    writeCapacity(join(root, 'docs', 'operations.md'), results, pgIntervalS, source);
  }
  return files;
}

function finishBench(cfg: Config, root: string, results: BenchResults, throughput: Record<string, WrkResult>, rss: Record<string, number>): void {
  const done = assembleResults(results, throughput, rss);
  const files = publishResults(root, done, cfg.worker.pgHeartbeatIntervalS);
  process.stdout.write(JSON.stringify(done, null, 2) + '\n');
  process.stderr.write(`\n${renderTable(done, relative(root, files.stamped))}\n`);
}
