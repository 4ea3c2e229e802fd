// Benchmark: heartbeat throughput through the gateway with 10,000 instances of which none, then
// 1 %, have pending agent commands (issue: with 1 % pending it must stay within 10 % of none).
//
//   node dist/bench/commands.js            (servers from the usual environment: NATS_URL,
//                                           DATABASE_URL, REDIS_URL, CLICKHOUSE_URL or the *_PORT
//                                           variables; see lib/infra/config.ts)
//
// It works on the given servers in names of its own (a Postgres and a ClickHouse database, a
// stream, subjects, a Redis prefix), removed at the end (BENCH_KEEP=1 keeps them), and starts its
// own gateway and worker processes from dist/. Steps:
//   1. 10,000 instances: a first status report for each through the gateway (its snapshot
//      advertises a command), applied by the worker;
//   2. the worker is stopped (BENCH_WITH_WORKER=1 keeps it running), so that on this small machine
//      the runs measure the gateway, not the gateway competing with the worker for the CPU;
//   3. runs of BENCH_DURATION_S seconds each in BENCH_ROUNDS rounds of the order none, 1 %, 1 %,
//      none (ABBA, so that a drift of the machine's speed during the bench weighs on both sides
//      alike); "1 %": a command queued for every 100th instance and never acked, so each heartbeat
//      of those instances is answered with its command (and its id rides in the report); "none":
//      those commands finished. Before each run the stream is purged (with the worker stopped it
//      only grows), so every run starts from the same state;
//      the load generator is wrk (Debian package) with a Lua script that cycles through the 10,000
//      heartbeat URLs: a separate process, so it does not share the gateway's event loop;
//   4. prints ONE JSON object on stdout: both rates, their ratio, and whether it is within 10 %.
// Progress goes to stderr.
import { LIFTED_CUSTOMER_RATES, serverAdmin } from './fixtures.js';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../lib/infra/config.js';
import { migrate } from '../lib/store/migrate.js';
import { createPool, type Pool } from '../lib/infra/postgres.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { createRedis } from '../lib/infra/redis.js';
import { connectNats, ensureStreams } from '../lib/infra/nats.js';
import { subjects, deadLetterStream, heartbeatStream, ingestStreams } from '../lib/contract/messages.js';
import { createCustomer, createToken } from '../lib/store/customers.js';
import { CommandHints, queueCommand, type InstanceRef } from '../lib/store/commands.js';
import { Proc } from '../deploy/service-process.js';

const INSTANCES = Number(process.env.BENCH_INSTANCES ?? 10_000);
const PENDING_EVERY = 100; // 1 %
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 8);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const WITH_WORKER = process.env.BENCH_WITH_WORKER === '1';
const KEEP = process.env.BENCH_KEEP === '1';

const say = (msg: string) => process.stderr.write(`[bench:commands] ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---- service processes -----------------------------------------------------------------------

/**
 * Starts a gateway or worker from dist/ (deploy/service-process.ts), kept in `services` from the
 * start so that one that fails to start is stopped too, and waits up to 60 s for its log line
 * `ready` (whose `port` is the one it listens on). On Node's own flags, not `nodeFlags()`: this
 * bench has always run its services so, and its figures stay comparable.
 */
async function startService(services: Proc[], name: string, script: string, env: Record<string, string>, ready: string): Promise<{ proc: Proc; port?: number }> {
  const proc = new Proc(name, script, env, { flags: [] });
  services.push(proc);
  const line = await proc.waitFor((l) => l.msg === ready, 60_000);
  return { proc, port: typeof line.port === 'number' ? line.port : undefined };
}

/**
 * CPU seconds a process has used (user + system, from /proc). On a machine shared with other work,
 * heartbeats per gateway CPU-second is a steadier measure of the gateway's cost per request than
 * heartbeats per wall-clock second, which moves with whatever else runs.
 */
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // utime, stime (fields 14 and 15)
}

// ---- HTTP helpers (setup and checks only; the measured load is wrk's) -------------------------

async function postJson(url: string, token: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  const text = await r.text();
  try {
    return { status: r.status, body: JSON.parse(text) };
  } catch {
    return { status: r.status, body: text };
  }
}

async function inParallel<T>(items: T[], concurrency: number, fn: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

async function until(what: string, ms: number, fn: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await fn()) return;
    await sleep(200);
  }
  throw new Error(`${what}: not reached within ${ms} ms`);
}

// ---- wrk -------------------------------------------------------------------------------------

const LUA = `
local reqs = {}
local i = 0
function init(args)
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. args[2] }
  for line in io.lines(args[1]) do reqs[#reqs + 1] = wrk.format("POST", line, headers, "{}") end
  math.randomseed(os.time() + #reqs * (tonumber(args[3]) or 1))
  i = math.random(#reqs)
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
function done(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
end
`;

interface WrkResult {
  requests: number;
  duration_us: number;
  connect_errors: number;
  read_errors: number;
  write_errors: number;
  status_errors: number;
  timeouts: number;
  p50_us: number;
  p99_us: number;
}

function runWrk(url: string, seconds: number, script: string, pathsFile: string, token: string): Promise<WrkResult> {
  return new Promise((resolve, reject) => {
    const args = [`-t${THREADS}`, `-c${CONNECTIONS}`, `-d${seconds}s`, '--timeout', '10s', '-s', script, url, '--', pathsFile, token, String(process.pid)];
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const m = /WRKJSON (\{.*\})/.exec(out);
      if (code !== 0 || !m) return reject(new Error(`wrk failed (exit ${code}):\n${out}`));
      resolve(JSON.parse(m[1]!) as WrkResult);
    });
  });
}

// ---- the run ---------------------------------------------------------------------------------

async function main(): Promise<void> {
  if (spawnSync('sh', ['-c', 'command -v wrk'], { stdio: 'ignore' }).status !== 0) {
    throw new Error('wrk is not installed: `npm run bench` installs it (deploy/bootstrap.mjs), or apt-get install -y wrk');
  }
  const cfg = loadConfig();
  const id = `bcmd${randomBytes(3).toString('hex')}`;
  const dbUrl = new URL(cfg.databaseUrl);
  dbUrl.pathname = `/${id}`;
  const env: Record<string, string> = {
    NATS_URL: cfg.natsUrl,
    DATABASE_URL: dbUrl.toString(),
    REDIS_URL: cfg.redisUrl,
    CLICKHOUSE_URL: cfg.clickhouseUrl,
    CLICKHOUSE_DB: id,
    CLICKHOUSE_USER: cfg.clickhouseUser,
    CLICKHOUSE_PASSWORD: cfg.clickhousePassword,
    STREAM_NAME: id.toUpperCase(),
    SUBJECT_PREFIX: id,
    REDIS_PREFIX: `${id}:`,
    STREAM_MAX_BYTES: String(4 * 1024 ** 3),
    GATEWAY_PORT: '0',
    // One token sends everything here: lift the per-token and per-customer limits out of the way.
    RATE_LIMIT_PER_S: '100000000',
    RATE_LIMIT_BURST: '100000000',
    ...LIFTED_CUSTOMER_RATES,
    LOG_LEVEL: 'info',
  };
  const tmp = mkdtempSync(join(tmpdir(), 'bench-commands-'));
  const services: Proc[] = [];
  let pool: Pool | null = null;
  const admin = serverAdmin(cfg.databaseUrl);
  const nc = await connectNats(cfg.natsUrl, `bench-${id}`);
  try {
    say(`setting up ${id} on the given servers`);
    await admin(`CREATE DATABASE "${id}"`);
    await migrate({ databaseUrl: env.DATABASE_URL!, clickhouseUrl: cfg.clickhouseUrl, clickhouseDatabase: id, clickhouseUser: cfg.clickhouseUser, clickhousePassword: cfg.clickhousePassword });
    await ensureStreams(await nc.jetstreamManager({ timeout: 30_000 }), { streamName: env.STREAM_NAME!, subjectPrefix: id, streamMaxBytes: Number(env.STREAM_MAX_BYTES), streamReplicas: cfg.streamReplicas });
    pool = createPool(env.DATABASE_URL!, 4, 'fleet-bench');
    const customer = await createCustomer(pool, `bench-${id}`);
    const { token } = await createToken(pool, customer.id, 'bench', ['ingest', 'read']);
    const hints = new CommandHints(subjects(id).control('commands'));
    hints.attach(nc);

    const gateway = await startService(services, 'gateway', 'gateway/main.js', env, 'listening');
    const worker = await startService(services, 'worker', 'workers/main.js', env, 'consuming');
    const base = `http://127.0.0.1:${gateway.port}`;
    const machines = Array.from({ length: INSTANCES }, (_, i) => `m${String(i).padStart(5, '0')}`);
    const path = (m: string, kind: string) => `/api/ingest/${customer.slug}/${m}/agent/${kind}`;
    const snapshot = { modules: { agent: { commands: [{ name: 'ping', label: 'Ping' }] } } };

    say(`creating ${INSTANCES} instances (a first status report each, through the gateway)`);
    const t0 = Date.now();
    await inParallel(machines, 64, async (m) => {
      const r = await postJson(base + path(m, 'status'), token, { status: 'running', snapshot });
      if (r.status !== 200) throw new Error(`status report for ${m}: ${r.status} ${JSON.stringify(r.body)}`);
    });
    await until('instances applied by the worker', 120_000, async () => {
      const r = await pool!.query<{ n: number }>('SELECT count(*)::int AS n FROM instances WHERE customer_id = $1', [customer.id]);
      return r.rows[0]!.n >= INSTANCES;
    });
    say(`instances ready in ${Date.now() - t0} ms`);
    const ids = new Map(
      (await pool.query<{ id: string; machine: string }>('SELECT i.id, m.slug AS machine FROM instances i JOIN machines m ON m.id = i.machine_id WHERE i.customer_id = $1', [customer.id])).rows.map((r) => [r.machine, r.id]),
    );
    const pendingMachines = machines.filter((_, i) => i % PENDING_EVERY === 0);
    const quietSample = machines.filter((_, i) => i % PENDING_EVERY === 1).slice(0, 100);
    const refs: InstanceRef[] = pendingMachines.map((m) => ({ customerId: customer.id, machine: m, software: 'agent' }));

    if (!WITH_WORKER) {
      await worker.proc.stop();
      say('worker stopped for the measured runs (BENCH_WITH_WORKER=1 keeps it running)');
    }

    const pathsFile = join(tmp, 'paths.txt');
    writeFileSync(pathsFile, machines.map((m) => path(m, 'heartbeat')).join('\n') + '\n');
    const script = join(tmp, 'heartbeat.lua');
    writeFileSync(script, LUA);

    const offeredCount = async (list: string[]) => {
      let n = 0;
      await inParallel(list, 16, async (m) => {
        const r = await postJson(base + path(m, 'heartbeat'), token, {});
        if (r.status !== 200) throw new Error(`heartbeat ${m}: ${r.status}`);
        if (r.body.commands?.length) n++;
      });
      return n;
    };

    const queueAll = async () => {
      for (const m of pendingMachines) {
        await queueCommand(pool!, {
          customerId: customer.id,
          instanceId: ids.get(m)!,
          module: 'agent',
          command: 'ping',
          args: { reason: 'bench' },
          userId: null,
          queueTtlS: 3600,
          maxOpen: 100,
          argsMaxBytes: 65536,
        });
      }
      hints.publish(refs);
      await until('every pending instance offered its command', 10_000, async () => (await offeredCount(pendingMachines)) === pendingMachines.length);
      if ((await offeredCount(quietSample)) !== 0) throw new Error('an instance without commands was offered one');
    };
    // Between runs only: the bench ends its commands directly (the agents here never ack).
    const finishAll = async () => {
      await pool!.query(`UPDATE commands SET state = 'succeeded', finished_at = clock_timestamp() WHERE customer_id = $1 AND state IN ('queued', 'delivered')`, [customer.id]);
      hints.publish(refs);
      await until('no instance offered anything', 10_000, async () => (await offeredCount(pendingMachines)) === 0);
    };

    const url = base;
    const jsm = await nc.jetstreamManager({ timeout: 30_000 });
    const purge = async () => {
      if (!WITH_WORKER) for (const n of ingestStreams(env.STREAM_NAME!)) await jsm.streams.purge(n);
    };
    say(`warm-up ${WARMUP_S} s`);
    await runWrk(url, WARMUP_S, script, pathsFile, token);
    const runs: { pending: boolean; result: WrkResult; rate: number; perCpu: number }[] = [];
    const measure = async (pending: boolean) => {
      await purge();
      await sleep(500);
      const cpu0 = cpuSeconds(gateway.proc.child.pid!);
      const result = await runWrk(url, DURATION_S, script, pathsFile, token);
      const cpu = cpuSeconds(gateway.proc.child.pid!) - cpu0;
      const rate = result.requests / (result.duration_us / 1e6);
      const perCpu = result.requests / cpu;
      runs.push({ pending, result, rate, perCpu });
      say(
        `${pending ? '1 % pending' : 'none pending'}: ${Math.round(rate)} heartbeats/s, ${Math.round(perCpu)} per gateway CPU-second ` +
          `(gateway CPU ${(cpu / DURATION_S * 100).toFixed(0)} %, p50 ${(result.p50_us / 1000).toFixed(2)} ms, p99 ${(result.p99_us / 1000).toFixed(2)} ms, non-2xx ${result.status_errors})`,
      );
    };
    for (let round = 0; round < ROUNDS; round++) {
      await measure(false);
      await queueAll();
      await measure(true);
      await measure(true);
      await finishAll();
      await measure(false);
    }

    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const median = (xs: number[]) => {
      const a = [...xs].sort((x, y) => x - y);
      return a.length % 2 ? a[(a.length - 1) / 2]! : (a[a.length / 2 - 1]! + a[a.length / 2]!) / 2;
    };
    const none = runs.filter((r) => !r.pending);
    const pend = runs.filter((r) => r.pending);
    const rateNone = median(none.map((r) => r.rate));
    const ratePending = median(pend.map((r) => r.rate));
    const cpuNone = median(none.map((r) => r.perCpu));
    const cpuPending = median(pend.map((r) => r.perCpu));
    const errors = runs.reduce((a, r) => a + r.result.status_errors + r.result.connect_errors + r.result.read_errors + r.result.write_errors + r.result.timeouts, 0);
    const ratio = ratePending / rateNone;
    process.stdout.write(
      JSON.stringify({
        bench: 'commands',
        instances: INSTANCES,
        pending_instances: pendingMachines.length,
        duration_s: DURATION_S,
        connections: CONNECTIONS,
        load_generator: `wrk -t${THREADS} -c${CONNECTIONS} (separate process)`,
        worker_during_runs: WITH_WORKER,
        // Medians of the runs (a shared machine gives outliers; means below for comparison).
        heartbeats_per_s_none: Math.round(rateNone),
        heartbeats_per_s_pending: Math.round(ratePending),
        ratio: Number(ratio.toFixed(4)),
        within_10_percent: ratio >= 0.9,
        ratio_of_means: Number((mean(pend.map((r) => r.rate)) / mean(none.map((r) => r.rate))).toFixed(4)),
        heartbeats_per_gateway_cpu_s_none: Math.round(cpuNone),
        heartbeats_per_gateway_cpu_s_pending: Math.round(cpuPending),
        cpu_ratio: Number((cpuPending / cpuNone).toFixed(4)),
        cpu_within_10_percent: cpuPending / cpuNone >= 0.9,
        order: runs.map((r) => (r.pending ? 'pending' : 'none')).join(','),
        runs_per_s: { none: none.map((r) => Math.round(r.rate)), pending: pend.map((r) => Math.round(r.rate)) },
        runs_per_gateway_cpu_s: { none: none.map((r) => Math.round(r.perCpu)), pending: pend.map((r) => Math.round(r.perCpu)) },
        load_average_1m: Number(loadavg()[0]!.toFixed(2)),
        cpus: cpus().length,
        p99_ms: { none: none.map((r) => r.result.p99_us / 1000), pending: pend.map((r) => r.result.p99_us / 1000) },
        errors,
      }) + '\n',
    );
  } catch (e) {
    say(`failed: ${(e as Error).stack ?? e}`);
    for (const s of services) say(`last output of a service:\n${s.output.slice(-3000)}`);
    process.exitCode = 1;
  } finally {
    await Promise.allSettled(services.map((s) => s.stop()));
    rmSync(tmp, { recursive: true, force: true });
    if (!KEEP) {
      const jsm = await nc.jetstreamManager({ timeout: 30_000 }).catch(() => null);
      await jsm?.streams.delete(id.toUpperCase()).catch(() => {});
      await jsm?.streams.delete(deadLetterStream(id.toUpperCase())).catch(() => {});
      await jsm?.streams.delete(heartbeatStream(id.toUpperCase())).catch(() => {});
      await pool?.end().catch(() => {});
      pool = null;
      await admin(`DROP DATABASE IF EXISTS "${id}" WITH (FORCE)`).catch((e) => say(`could not drop database ${id}: ${e}`));
      const ch = createClickHouse({ url: cfg.clickhouseUrl, user: cfg.clickhouseUser, password: cfg.clickhousePassword });
      await ch.command({ query: `DROP DATABASE IF EXISTS ${id}` }).catch(() => {});
      await ch.close();
      const redis = createRedis(cfg.redisUrl);
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${id}:*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length) await redis.del(...keys);
      } while (cursor !== '0');
      await redis.quit();
    } else say(`kept: database ${id}, stream ${id.toUpperCase()}, Redis prefix ${id}:`);
    await pool?.end().catch(() => {});
    await nc.close();
  }
}

main().catch((e) => {
  say(`failed: ${(e as Error).stack ?? e}`);
  process.exit(1);
});
