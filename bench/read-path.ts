// Benchmark of the read path at fleet scale: ONE customer with 100,000 instances; 50 concurrent
// readers on each read the dashboard makes (the instance list filtered, sorted and paged in several
// ways, the fleet summary, one instance and everything its page reads) while heartbeats of that
// customer stream in through the gateway. Target: p99 <= 100 ms per endpoint.
//
//   node dist/bench/read-path.js    (servers from the usual environment: NATS_URL, DATABASE_URL,
//                                    REDIS_URL, CLICKHOUSE_URL or the *_PORT variables; lib/infra/config.ts)
//
// Environment: BENCH_INSTANCES (100000), BENCH_READERS (50), BENCH_DURATION_S (20, per endpoint),
// BENCH_INGEST_RATE (2000 heartbeats/s), BENCH_ONLY (comma list of endpoint names), BENCH_KEEP=1
// (keep the database, stream and keys; prints their names), BENCH_API_PROFILE=<dir> (a CPU profile
// of the api process, written when it stops).
//
// It works on the given servers in names of its own (a Postgres and a ClickHouse database, a
// stream, subjects, a Redis prefix), removed at the end, and starts its own gateway, worker and api
// from dist/. The instances are seeded by multi-row SQL (seconds, not minutes): 4 pieces of software
// on 25,000 machines, in 20 groups and 50 locations, about 1 % red by status, 1 % red by silence,
// 3 % yellow, 1 % grey, the rest green. The ingest (a child process of this script, undici, paced)
// heartbeats the instances that are green or yellow, round robin. Prints ONE JSON object on stdout:
// {instances, readers, duration_s, endpoints: {name: {requests, p50_ms, p99_ms, max_ms, errors}},
// ingest_rate, ...}. Progress goes to stderr.
import { LIFTED_CUSTOMER_RATES, serverAdmin } from './fixtures.js';
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool as HttpPool } from 'undici';
import type { Proc } from '../deploy/service-process.js';

const SELF = fileURLToPath(import.meta.url);
const say = (msg: string) => process.stderr.write(`[bench:read-path] ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const SOFTWARE = ['agent', 'logcollector', 'updater', 'scanner'];

// ---- the ingest child: paced heartbeats through the gateway ---------------------------------

async function ingestChild(origin: string, pathsFile: string, token: string, rate: number): Promise<void> {
  const paths = readFileSync(pathsFile, 'utf8').split('\n').filter(Boolean);
  const pool = new HttpPool(origin, { connections: 32, pipelining: 1, keepAliveTimeout: 30_000 });
  let sent = 0;
  let ok = 0;
  let failed = 0;
  let stop = false;
  const started = Date.now();
  let windowStart = started;
  let windowOk = 0;
  process.on('message', (m: { type: string }) => {
    if (m.type === 'stop') stop = true;
    if (m.type === 'mark') {
      windowStart = Date.now();
      windowOk = 0;
    }
  });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
  // The same body each time: a heartbeat that changes nothing (the usual case), uptime aside.
  const one = async (i: number) => {
    try {
      const r = await pool.request({ method: 'POST', path: paths[i % paths.length]!, headers, body: `{"version":"5.10.2","uptime_seconds":${i}}` });
      await r.body.dump();
      if (r.statusCode === 200) (ok++, windowOk++);
      else failed++;
    } catch {
      failed++;
    }
  };
  let inflight = 0;
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      if (stop) {
        clearInterval(tick);
        return resolve();
      }
      const due = Math.floor(((Date.now() - started) * rate) / 1000);
      while (sent < due && inflight < 512) {
        inflight++;
        void one(sent++).finally(() => inflight--);
      }
    }, 5);
  });
  while (inflight > 0) await sleep(10);
  process.send!({ type: 'done', sent, ok, failed, seconds: (Date.now() - started) / 1000, window_ok: windowOk, window_s: (Date.now() - windowStart) / 1000 });
  await pool.close();
  process.disconnect();
}

// ---- service processes ----------------------------------------------------------------------

/** The api's Node flags: as shipped, or BENCH_API_FLAGS when set (kept for the results). */
let apiNodeFlags: string[] = [];
function apiFlags(shipped: string[]): string[] {
  const ab = process.env.BENCH_API_FLAGS;
  apiNodeFlags = ab === undefined ? shipped : ab.split(/\s+/).filter(Boolean);
  return [...apiNodeFlags];
}

/**
 * Starts a gateway, worker or api from dist/ (deploy/service-process.ts), kept in `services` from
 * the start so that one that fails to start is stopped too, and waits up to 60 s for its log line
 * `ready` (whose `port` is the one it listens on). The api, whose figures these are, runs on the
 * flags it ships with (`nodeFlags()`: its 64 MiB semi-space, [A8]), or on BENCH_API_FLAGS when set
 * (an A/B: `BENCH_API_FLAGS=` for Node's defaults); the gateway and worker, which only feed the
 * ingest, on Node's own flags, as this bench has always run them.
 */
async function startService(services: Proc[], name: string, script: string, env: Record<string, string>, ready: string): Promise<{ proc: Proc; port?: number }> {
  // Loaded here, as main() loads lib/: the ingest child (this same file) needs none of it.
  const { Proc, nodeFlags } = await import('../deploy/service-process.js');
  const flags = name === 'api' ? apiFlags(nodeFlags('api/main.js')) : [];
  // BENCH_API_PROFILE=<dir>: the api writes a CPU profile there when it stops (node --cpu-prof).
  if (name === 'api' && process.env.BENCH_API_PROFILE) flags.push('--cpu-prof', '--cpu-prof-dir', process.env.BENCH_API_PROFILE);
  const proc = new Proc(name, script, env, { flags });
  services.push(proc);
  const line = await proc.waitFor((l) => l.msg === ready, 60_000);
  return { proc, port: typeof line.port === 'number' ? line.port : undefined };
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
function cpuMs(pid: number, only?: 'user' | 'system'): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [user, system] = [Number(f[11]), Number(f[12])]; // utime, stime
  return ((only === 'user' ? user : only === 'system' ? system : user + system) / CLK_TCK) * 1000;
}

// ---- readers --------------------------------------------------------------------------------

interface Stats {
  requests: number;
  /** CPU time of the api process per request (user + system, /proc), its background work included. */
  api_cpu_ms_per_request?: number;
  /** The same less what the api spent with no reader in as long (api_idle_cpu_ms_per_s): the requests' own cost. */
  api_request_cpu_ms?: number;
  /** The share of the api's CPU time spent in the kernel (system time: sockets, epoll). */
  api_system_share?: number;
  /** The answers' JSON text per request, KB (characters / 1024). */
  answer_kb?: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
  errors: number;
  first_error?: string;
}

const quantile = (sorted: number[], q: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : NaN);
const round = (x: number) => Math.round(x * 10) / 10;
/** The api's CPU per request to 0.01 ms: the target (≤ 1 ms) is near the figures, 0.1 ms steps hid changes of 0.05. */
const round2 = (x: number) => Math.round(x * 100) / 100;

/** `readers` loops for `seconds`, each running `op` again and again; the latency of each op. */
async function measure(readers: number, seconds: number, op: (reader: number, n: number) => Promise<void>): Promise<Stats> {
  const lat: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const end = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: readers }, async (_, r) => {
      for (let n = 0; Date.now() < end; n++) {
        const t = performance.now();
        try {
          await op(r, n);
          lat.push(performance.now() - t);
        } catch (e) {
          errors++;
          firstError ??= (e as Error).message.slice(0, 300);
          await sleep(5);
        }
      }
    }),
  );
  lat.sort((a, b) => a - b);
  return { requests: lat.length, p50_ms: round(quantile(lat, 0.5)), p99_ms: round(quantile(lat, 0.99)), max_ms: round(lat[lat.length - 1] ?? NaN), errors, ...(firstError ? { first_error: firstError } : {}) };
}

// ---- the run --------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { loadConfig } = await import('../lib/infra/config.js');
  const { migrate } = await import('../lib/store/migrate.js');
  const { createPool } = await import('../lib/infra/postgres.js');
  const { createClickHouse } = await import('../lib/infra/clickhouse.js');
  const { createRedis } = await import('../lib/infra/redis.js');
  const { connectNats, ensureStreams } = await import('../lib/infra/nats.js');
  const { deadLetterStream, heartbeatStream } = await import('../lib/contract/messages.js');
  const { createCustomer, createToken } = await import('../lib/store/customers.js');

  const N = Number(process.env.BENCH_INSTANCES ?? 100_000);
  const READERS = Number(process.env.BENCH_READERS ?? 50);
  const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 20);
  const INGEST_RATE = Number(process.env.BENCH_INGEST_RATE ?? 2000);
  const ONLY = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',')) : null;
  const KEEP = process.env.BENCH_KEEP === '1';
  const IDLE_S = Number(process.env.BENCH_IDLE_S ?? 10);
  const machines = Math.ceil(N / SOFTWARE.length);

  const cfg = loadConfig();
  const id = `brp${randomBytes(3).toString('hex')}`;
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
    STREAM_MAX_BYTES: String(2 * 1024 ** 3),
    GATEWAY_PORT: '0',
    API_PORT: '0',
    WORKER_HTTP_PORT: '0',
    // One token sends everything here: lift the per-token and per-customer limits out of the way.
    RATE_LIMIT_PER_S: '100000000',
    RATE_LIMIT_BURST: '100000000',
    ...LIFTED_CUSTOMER_RATES,
    LOG_LEVEL: 'info',
  };
  const admin = serverAdmin(cfg.databaseUrl);
  const tmp = mkdtempSync(join(tmpdir(), 'bench-read-path-'));
  const services: Proc[] = [];
  let ingest: ChildProcess | null = null;
  const nc = await connectNats(cfg.natsUrl, `bench-${id}`);
  const pool = createPool(dbUrl.toString(), 4, 'fleet-bench');
  let http: HttpPool | null = null;
  try {
    say(`setting up ${id} on the given servers`);
    await admin(`CREATE DATABASE "${id}"`);
    await migrate({ databaseUrl: env.DATABASE_URL!, clickhouseUrl: cfg.clickhouseUrl, clickhouseDatabase: id, clickhouseUser: cfg.clickhouseUser, clickhousePassword: cfg.clickhousePassword });
    await ensureStreams(await nc.jetstreamManager({ timeout: 30_000 }), { streamName: env.STREAM_NAME!, subjectPrefix: id, streamMaxBytes: Number(env.STREAM_MAX_BYTES), streamReplicas: cfg.streamReplicas });
    const customer = await createCustomer(pool, `bench-${id}`);
    const { token } = await createToken(pool, customer.id, 'bench', ['ingest', 'read']);
    // A second customer with a few instances: the readers must never see them.
    const other = await createCustomer(pool, `bench-${id}-other`);
    await pool.query(`UPDATE licences SET tier = 'paid', device_limit = 1000000 WHERE customer_id = ANY($1)`, [[customer.id, other.id]]);

    // Seed: machines, then instances, in one statement each (generate_series).
    const t0 = Date.now();
    await pool.query(
      `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
       SELECT $1, 'm' || lpad(g::text, 6, '0'), now() - interval '30 days', now() FROM generate_series(0, $2::int - 1) g`,
      [customer.id, machines],
    );
    await pool.query(
      `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
       SELECT $1, 'm' || lpad(g::text, 6, '0'), now() - interval '30 days', now() FROM generate_series(0, 99) g`,
      [other.id],
    );
    // n: the instance's number; its colour follows n % 100 (0 red by status, 1-3 yellow, 4 grey, 5 red by silence).
    await pool.query(
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, version, uptime_seconds, pid,
                              ip_addresses, group_name, location, group_priority, sort_priority, status, status_at)
       SELECT customer_id, id, sw, now() - interval '30 days',
              CASE WHEN k = 4 THEN now() - interval '30 days' WHEN k = 5 THEN now() - interval '1 hour' ELSE now() - (n % 60) * interval '1 s' END,
              CASE WHEN k = 4 THEN NULL WHEN k = 5 THEN now() - interval '1 hour' ELSE now() - (n % 60) * interval '1 s' END,
              '5.10.' || (n % 7), n % 100000, 1000 + n % 30000, ARRAY['10.' || (n / 65536 % 256) || '.' || (n / 256 % 256) || '.' || (n % 256)],
              'group-' || lpad((n % 20)::text, 2, '0'), 'site-' || lpad((n / 7 % 50)::text, 2, '0'), n % 20, n % 1000,
              CASE WHEN k = 0 THEN 'error' WHEN k BETWEEN 1 AND 3 THEN 'degraded' WHEN k = 4 THEN NULL ELSE 'running' END,
              CASE WHEN k = 4 THEN NULL ELSE now() - interval '1 day' END
         FROM (SELECT m.customer_id, m.id, s.sw, substr(m.slug, 2)::int * ${SOFTWARE.length} + z.k0 AS n, (substr(m.slug, 2)::int * ${SOFTWARE.length} + z.k0) % 100 AS k
                 FROM machines m CROSS JOIN unnest($2::text[]) WITH ORDINALITY AS s(sw, k1)
                 CROSS JOIN LATERAL (SELECT (s.k1 - 1)::int AS k0) z
                WHERE m.customer_id = ANY($1)) x
        WHERE n < $3`,
      [[customer.id, other.id], SOFTWARE, N],
    );
    // The colours stored as the workers would have recorded them (their rows made by the insert's trigger).
    await pool.query(
      `UPDATE instance_lights l
          SET light = CASE WHEN i.status = 'error' OR i.last_heartbeat_at < now() - interval '30 minutes' THEN 'red'
                           WHEN i.status = 'degraded' THEN 'yellow' WHEN i.last_heartbeat_at IS NULL THEN 'grey' ELSE 'green' END,
              light_since = now() - interval '1 day', light_judged_at = now()
         FROM instances i WHERE i.id = l.instance_id AND i.customer_id = ANY($1)`,
      [[customer.id, other.id]],
    );
    await pool.query('ANALYZE machines');
    await pool.query('ANALYZE instances');
    await pool.query('ANALYZE instance_lights');
    const count = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM instances WHERE customer_id = $1', [customer.id])).rows[0]!.n;
    say(`seeded ${count} instances on ${machines} machines in ${Date.now() - t0} ms`);

    const gateway = await startService(services, 'gateway', 'gateway/main.js', env, 'listening');
    await startService(services, 'worker', 'workers/main.js', env, 'consuming');
    const api = await startService(services, 'api', 'api/main.js', env, 'listening');

    // The ingest: every green or yellow instance (those a heartbeat keeps as they are), round robin.
    const live = await pool.query<{ machine: string; software: string }>(
      `SELECT m.slug AS machine, i.software FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id
        WHERE i.customer_id = $1 AND il.light IN ('green', 'yellow') ORDER BY i.last_heartbeat_at DESC`,
      [customer.id],
    );
    const pathsFile = join(tmp, 'paths.txt');
    writeFileSync(pathsFile, live.rows.map((r) => `/api/ingest/${customer.slug}/${r.machine}/${r.software}/heartbeat`).join('\n') + '\n');
    ingest = fork(SELF, ['--ingest', `http://127.0.0.1:${gateway.port}`, pathsFile, token, String(INGEST_RATE)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const ingestDone = new Promise<Record<string, number>>((resolve) => ingest!.on('message', (m: Record<string, number> & { type: string }) => m.type === 'done' && resolve(m)));

    // What the readers ask for.
    const ids = (await pool.query<{ id: string; machine_id: string; software: string }>(`SELECT id, machine_id, software FROM instances WHERE customer_id = $1 ORDER BY random() LIMIT 1000`, [customer.id])).rows;
    const otherIds = (await pool.query<{ id: string }>(`SELECT id FROM instances WHERE customer_id = $1 LIMIT 10`, [other.id])).rows;
    http = new HttpPool(`http://127.0.0.1:${api.port}`, { connections: READERS * 2, pipelining: 1, keepAliveTimeout: 30_000 });
    const headers = { authorization: `Bearer ${token}`, accept: 'application/json' };
    // Characters of the answers read (their JSON text, ASCII almost all of it): an endpoint's api CPU beside its answers' size.
    let answerChars = 0;
    const get = async (path: string): Promise<unknown> => {
      const r = await http!.request({ method: 'GET', path, headers });
      const text = await r.body.text();
      answerChars += text.length;
      if (r.statusCode !== 200) throw new Error(`${path}: ${r.statusCode} ${text.slice(0, 200)}`);
      return JSON.parse(text);
    };
    const list = async (query: string, expectTotalAtLeast = 1) => {
      const b = (await get(`/api/instances?${query}`)) as { items: unknown[]; total: number; next?: string | null };
      if (!(b.total >= expectTotalAtLeast)) throw new Error(`/api/instances?${query}: total ${b.total}`);
      return b;
    };
    const page = 50;
    const rnd = (n: number) => Math.floor(Math.random() * n);
    const redTotal = Math.floor(N / 50); // ~2 % red
    // Cursor walks: each reader follows `next` from the first page on, deep into the list.
    const cursors = new Map<number, string | null>();

    const endpoints: Record<string, (r: number, n: number) => Promise<void>> = {
      // The dashboard's colour chips: only red, by name, a random page of the ~2,000.
      list_red_by_name: async () => void (await list(`light=red&sort=machine,software&limit=${page}&offset=${rnd(redTotal / page) * page}`)),
      list_yellow_by_last_seen: async () => void (await list(`light=yellow&sort=-last_seen&limit=${page}&offset=${rnd(10) * page}`)),
      list_software_by_name: async () => void (await list(`software=${SOFTWARE[rnd(SOFTWARE.length)]}&sort=machine&limit=${page}&offset=${rnd(100) * page}`)),
      list_machine_exact: async () => void (await list(`machine=m${String(rnd(machines)).padStart(6, '0')}&limit=${page}`)),
      list_machine_search: async () => void (await list(`q=${String(rnd(machines)).padStart(6, '0').slice(0, 4)}&sort=machine&limit=${page}`)),
      list_first_page_by_name: async () => void (await list(`sort=machine,software&limit=${page}`)),
      list_first_page_by_last_seen: async () => void (await list(`sort=-last_seen&limit=${page}`)),
      list_deep_offset: async () => void (await list(`sort=machine,software&limit=${page}&offset=${N - page - rnd(N / 2)}`)),
      list_deep_cursor: async (r) => {
        const after = cursors.get(r);
        const b = await list(`sort=machine,software&limit=${page}${after ? `&after=${encodeURIComponent(after)}` : ''}`);
        if (!('next' in b)) throw new Error('no `next` cursor in the answer');
        cursors.set(r, b.next ?? null);
      },
      fleet_summary: async () => {
        const b = (await get('/api/fleet/summary')) as { total: number };
        if (b.total !== N) throw new Error(`summary total ${b.total}`);
      },
      instance: async () => void (await get(`/api/instances/${ids[rnd(ids.length)]!.id}`)),
      // Everything the dashboard's instance page reads when it opens (dashboard/src/pages/Instance.tsx and instance/*).
      instance_page: async () => {
        const i = ids[rnd(ids.length)]!;
        const now = Date.now();
        const from = new Date(now - 24 * 3600_000).toISOString();
        const to = new Date(now).toISOString();
        await Promise.all([
          get(`/api/instances/${i.id}`),
          get(`/api/instances/${i.id}/status`),
          get(`/api/instances/${i.id}/diagnostics?limit=200`),
          get(`/api/instances/${i.id}/events?limit=100`),
          get(`/api/machines/${i.machine_id}/metrics?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`),
          get(`/api/machines/${i.machine_id}/artifacts?software=${i.software}&limit=100`),
          get(`/api/instances/${i.id}/commands/available`),
          get(`/api/instances/${i.id}/commands?limit=50`),
        ]);
      },
    };

    // Isolation check before the runs: the other customer's instances are not the bench customer's.
    for (const o of otherIds) {
      const r = await http.request({ method: 'GET', path: `/api/instances/${o.id}`, headers });
      await r.body.dump();
      if (r.statusCode !== 404) throw new Error(`another customer's instance answered ${r.statusCode}`);
    }

    say(`ingest at ${INGEST_RATE}/s over ${live.rows.length} instances; warming up`);
    await measure(8, 3, async (r, n) => {
      const names = Object.keys(endpoints);
      await endpoints[names[(r + n) % names.length]!]!(r, n).catch(() => {});
    });
    ingest.send({ type: 'mark' });
    // What the api spends with no reader (ingest running): its background work (light-count cache
    // refreshes, the live stream's subscription, stream re-checks, metrics), which a request's
    // CPU figure is given without as well.
    const idle0 = cpuMs(api.proc.child.pid!);
    const idleT0 = Date.now();
    await new Promise((r) => setTimeout(r, IDLE_S * 1000));
    const idleMsPerS = (cpuMs(api.proc.child.pid!) - idle0) / ((Date.now() - idleT0) / 1000);
    say(`api with no reader: ${round(idleMsPerS)} ms CPU per second`);
    const results: Record<string, Stats> = {};
    const started = Date.now();
    for (const [name, op] of Object.entries(endpoints)) {
      if (ONLY && !ONLY.has(name)) continue;
      cursors.clear();
      const cpu0 = cpuMs(api.proc.child.pid!);
      const sys0 = cpuMs(api.proc.child.pid!, 'system');
      const t0 = Date.now();
      const chars0 = answerChars;
      results[name] = await measure(READERS, DURATION_S, op);
      const s = results[name];
      s.answer_kb = round((answerChars - chars0) / 1024 / Math.max(1, s.requests));
      const cpu = cpuMs(api.proc.child.pid!) - cpu0;
      s.api_cpu_ms_per_request = round2(cpu / Math.max(1, s.requests));
      s.api_request_cpu_ms = round2(Math.max(0, cpu - idleMsPerS * ((Date.now() - t0) / 1000)) / Math.max(1, s.requests));
      s.api_system_share = Math.round(((cpuMs(api.proc.child.pid!, 'system') - sys0) / Math.max(1, cpu)) * 100) / 100;
      say(
        `${name}: ${s.requests} requests, p50 ${s.p50_ms} ms, p99 ${s.p99_ms} ms, max ${s.max_ms} ms, api CPU ${s.api_cpu_ms_per_request} ms/request (${s.api_request_cpu_ms} above its idle; ${Math.round(s.api_system_share * 100)} % in the kernel), ${s.answer_kb} KB an answer, errors ${s.errors}${s.first_error ? ` (${s.first_error})` : ''}`,
      );
    }
    ingest.send({ type: 'stop' });
    const ing = await ingestDone;
    ingest = null;
    const ingestRate = Math.round(ing.window_ok! / ing.window_s!);
    say(`ingest: ${ing.ok} ok, ${ing.failed} failed; ${ingestRate} heartbeats/s during the reads`);
    const pending = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM instances WHERE customer_id = $1', [customer.id])).rows[0]!.n;
    // The api's largest resident set in the run (VmHWM): what its Node flags cost in memory.
    const apiPeakRssMb = Math.round(Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${api.proc.child.pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024);
    // What the api logged as errors (a 500 is one), so that a run's errors can be told apart
    // afterwards: the first few, with their error's type, code, message and first stack lines.
    const apiErrors = api.proc.lines.filter((l) => typeof l.level === 'number' && l.level >= 50);
    const errorSummary = apiErrors.slice(0, 5).map((l) => {
      const err = (l.err ?? {}) as { type?: string; code?: string; message?: string; stack?: string };
      return { time: l.time, msg: l.msg, type: err.type, code: err.code, message: err.message, stack: err.stack?.split('\n').slice(0, 6).join('\n') };
    });
    if (apiErrors.length) say(`the api logged ${apiErrors.length} errors; the first: ${JSON.stringify(errorSummary[0])}`);
    process.stdout.write(
      JSON.stringify({
        bench: 'read-path',
        instances: N,
        instances_counted: pending,
        readers: READERS,
        duration_s: DURATION_S,
        endpoints: results,
        api_idle_cpu_ms_per_s: round(idleMsPerS),
        api_node_flags: apiNodeFlags.join(' '), // '' for Node's defaults (BENCH_API_FLAGS=)
        api_peak_rss_mb: apiPeakRssMb,
        ingest_rate: ingestRate,
        ingest_offered_rate: INGEST_RATE,
        ingest_failed: ing.failed,
        api_errors_logged: apiErrors.length,
        api_errors: errorSummary,
        seconds: Math.round((Date.now() - started) / 1000),
        load_average_1m: Number(loadavg()[0]!.toFixed(2)),
        cpus: cpus().length,
      }) + '\n',
    );
  } catch (e) {
    say(`failed: ${(e as Error).stack ?? e}`);
    for (const s of services) say(`last output of a service:\n${s.output.slice(-3000)}`);
    process.exitCode = 1;
  } finally {
    if (ingest) {
      ingest.send({ type: 'stop' });
      await new Promise((r) => ingest!.once('exit', r));
    }
    await http?.close().catch(() => {});
    await Promise.allSettled(services.map((s) => s.stop()));
    rmSync(tmp, { recursive: true, force: true });
    await pool.end().catch(() => {});
    if (!KEEP) {
      const jsm = await nc.jetstreamManager({ timeout: 30_000 }).catch(() => null);
      await jsm?.streams.delete(id.toUpperCase()).catch(() => {});
      await jsm?.streams.delete(deadLetterStream(id.toUpperCase())).catch(() => {});
      await jsm?.streams.delete(heartbeatStream(id.toUpperCase())).catch(() => {});
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
    await nc.close();
  }
}

if (process.argv[2] === '--ingest') {
  const [origin, pathsFile, token, rate] = process.argv.slice(3);
  await ingestChild(origin!, pathsFile!, token!, Number(rate));
} else {
  await main().catch((e) => {
    say(`failed: ${(e as Error).stack ?? e}`);
    process.exitCode = 1;
  });
}
