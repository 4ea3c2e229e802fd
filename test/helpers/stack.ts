// An isolated slice of the test servers for one test file: its own Postgres database, ClickHouse
// database, JetStream stream and subjects, and Redis key prefix; plus the service processes it
// asks for, and a customer with a token. Everything is removed again at teardown.
import { randomBytes } from 'node:crypto';
import type { Test } from 'tap';
import pg from 'pg';
import { createClickHouse, type ClickHouseClient } from '../../lib/infra/clickhouse.js';
import { createPool, type Pool } from '../../lib/infra/postgres.js';
import { createRedis, type Redis } from '../../lib/infra/redis.js';
import { connectNats, ensureStreams, type NatsConnection } from '../../lib/infra/nats.js';
import { deadLetterStream, ingestStreams } from '../../lib/contract/messages.js';
import { migrate } from '../../lib/store/migrate.js';
import { createCustomer, createToken, type Customer } from '../../lib/store/customers.js';
import { createUser, addMembership, type Role } from '../../lib/store/accounts.js';
import { post, type Answer } from './http.js';
import { Proc } from '../../deploy/service-process.js';

export interface StackOptions {
  gateway?: boolean;
  worker?: boolean;
  api?: boolean;
  /** Extra environment for every process (HEARTBEAT_TIMEOUT_S, ...). */
  env?: Record<string, string>;
  /** A NATS server of the test's own (outage tests), instead of the shared one. */
  natsUrl?: string;
  /** A Postgres server of the test's own (crash tests): its URL, any database. */
  pgUrl?: string;
  /** A Redis server of the test's own (outage tests), instead of the shared one. */
  redisUrl?: string;
}

export interface TestStack {
  id: string;
  env: Record<string, string>;
  pool: Pool;
  ch: ClickHouseClient;
  redis: Redis;
  nc: NatsConnection;
  customer: Customer;
  token: string;
  procs: Proc[];
  gatewayUrl: string;
  apiUrl: string;
  startGateway(env?: Record<string, string>): Promise<{ proc: Proc; url: string }>;
  startWorker(env?: Record<string, string>): Promise<Proc>;
  startApi(env?: Record<string, string>): Promise<{ proc: Proc; url: string }>;
  newCustomer(slug: string): Promise<{ customer: Customer; token: string }>;
  /** The ingest URL of one report kind for a machine of this stack's customer (or another's, through another gateway). */
  ingestUrl(machine: string, kind: string, o?: IngestOptions): string;
  /** One report with the stack's token (or `o.token`): the heartbeat, diagnostics, … of an agent. */
  report(machine: string, kind: string, body?: unknown, o?: IngestOptions & { token?: string }): Promise<Answer>;
  /** A dashboard user with `role` in `customer` (default: the stack's), logged in through the api. */
  newUser(role: Role | null, opts?: { customer?: Customer; systemAdmin?: boolean; username?: string }): Promise<TestUser>;
}

export interface IngestOptions {
  software?: string;
  /** Customer slug (default: the stack's customer). */
  customer?: string;
  /** Gateway base URL (default: the stack's gateway). */
  gateway?: string;
}

export interface TestUser {
  id: string;
  email: string;
  password: string;
  /** The session JWT, for `Authorization: Bearer`. */
  jwt: string;
}

const base = {
  nats: process.env.NATS_URL ?? 'nats://127.0.0.1:24222',
  pg: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:25432/fleet',
  redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:26379/0',
  ch: process.env.CLICKHOUSE_URL ?? 'http://127.0.0.1:28123',
};

export function dbUrl(name: string, server = base.pg): string {
  const u = new URL(server);
  u.pathname = `/${name}`;
  return u.toString();
}

/** A statement on the server's `postgres` database (CREATE or DROP DATABASE). */
export async function adminQuery(sql: string, server = base.pg): Promise<void> {
  const c = new pg.Client({ connectionString: dbUrl('postgres', server) });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

export async function testStack(t: Test, name: string, opts: StackOptions = {}): Promise<TestStack> {
  const id = `${name.replace(/[^a-z0-9]/g, '')}${randomBytes(3).toString('hex')}`;
  const natsUrl = opts.natsUrl ?? base.nats;
  const pgServer = opts.pgUrl ?? base.pg;
  const redisUrl = opts.redisUrl ?? base.redis;
  const env: Record<string, string> = {
    NATS_URL: natsUrl,
    DATABASE_URL: dbUrl(`t_${id}`, pgServer),
    REDIS_URL: redisUrl,
    CLICKHOUSE_URL: base.ch,
    CLICKHOUSE_DB: `t_${id}`,
    STREAM_NAME: `T_${id.toUpperCase()}`,
    SUBJECT_PREFIX: `t.${id}`,
    REDIS_PREFIX: `t:${id}:`,
    GATEWAY_PORT: '0',
    API_PORT: '0',
    CACHE_REFRESH_MS: '500',
    JWT_SECRET: randomBytes(32).toString('hex'),
    WORKER_BATCH_WAIT_MS: '20',
    LOG_LEVEL: 'info',
    // The per-customer rates are lifted for files that send much at once (property tests, batches):
    // the files that test them set their own (hostile-requests, noisy-neighbour).
    QUOTA_INGEST_REQUESTS_PER_S: '1000000',
    QUOTA_INGEST_BYTES_PER_S: String(1024 ** 3),
    // JetStream reserves each stream's max_bytes on the test nats-server's disk (64 GB for all the
    // stacks alive at once): the processes' own ensureStreams must not raise them to the shipped
    // 8 GiB + 2 GiB. Files that fill a stream set their own.
    STREAM_MAX_BYTES: String(1024 ** 3),
    STREAM_HEARTBEAT_MAX_BYTES: String(256 * 1024 ** 2),
    ...opts.env,
  };
  await adminQuery(`CREATE DATABASE "t_${id}"`, pgServer);
  await migrate({ databaseUrl: env.DATABASE_URL!, clickhouseUrl: base.ch, clickhouseDatabase: env.CLICKHOUSE_DB! });
  const pool = createPool(env.DATABASE_URL!, 5, 'fleet-test');
  const ch = createClickHouse({ url: base.ch, database: env.CLICKHOUSE_DB });
  const redis = createRedis(redisUrl);
  const nc = await connectNats(natsUrl, `test-${id}`);
  // A patient first request: a nats-server of the test's own, on a busy machine, may take a while.
  await ensureStreams(await nc.jetstreamManager({ timeout: 20_000 }), {
    streamName: env.STREAM_NAME!,
    subjectPrefix: env.SUBJECT_PREFIX!,
    streamMaxBytes: Number(env.STREAM_MAX_BYTES),
    heartbeatStreamMaxBytes: Number(env.STREAM_HEARTBEAT_MAX_BYTES),
    streamReplicas: 1,
    streamPartitions: Number(env.STREAM_PARTITIONS || 1),
  });
  const customer = await createCustomer(pool, `c-${id}`);
  const { token } = await createToken(pool, customer.id, 'test');

  const procs: Proc[] = [];
  const stack: TestStack = {
    id,
    env,
    pool,
    ch,
    redis,
    nc,
    customer,
    token,
    procs,
    gatewayUrl: '',
    apiUrl: '',
    async startGateway(extra = {}) {
      const proc = new Proc('gateway', 'gateway/main.js', { ...env, ...extra });
      procs.push(proc);
      const l = await proc.waitFor((l) => l.msg === 'listening');
      return { proc, url: `http://127.0.0.1:${l.port}` };
    },
    async startWorker(extra = {}) {
      const proc = new Proc('worker', 'workers/main.js', { ...env, ...extra });
      procs.push(proc);
      await proc.waitFor((l) => l.msg === 'consuming');
      return proc;
    },
    async startApi(extra = {}) {
      const proc = new Proc('api', 'api/main.js', { ...env, ...extra });
      procs.push(proc);
      const l = await proc.waitFor((l) => l.msg === 'listening' && typeof l.port === 'number');
      return { proc, url: `http://127.0.0.1:${l.port}` };
    },
    ingestUrl(machine, kind, o = {}) {
      return `${o.gateway ?? stack.gatewayUrl}/api/ingest/${o.customer ?? customer.slug}/${machine}/${o.software ?? 'agent'}/${kind}`;
    },
    report(machine, kind, body = {}, o = {}) {
      return post(stack.ingestUrl(machine, kind, o), o.token ?? token, body);
    },
    async newCustomer(slug: string) {
      const c = await createCustomer(pool, `${slug}-${id}`);
      const { token } = await createToken(pool, c.id, 'test');
      return { customer: c, token };
    },
    async newUser(role, o = {}) {
      const n = ++users;
      const email = `user${n}-${id}@example.com`;
      const password = `pw-${randomBytes(6).toString('hex')}`;
      const u = await createUser(pool, { email, username: o.username, password, isSystemAdmin: o.systemAdmin });
      if (role) await addMembership(pool, u.id, (o.customer ?? customer).id, role);
      const r = await post(`${stack.apiUrl}/auth/login`, null, { email, password });
      if (r.status !== 200) throw new Error(`login failed: ${r.status} ${JSON.stringify(r.body)}`);
      return { id: u.id, email, password, jwt: r.body.token };
    },
  };
  let users = 0;

  t.teardown(async () => {
    // A file that failed: what its services logged (warnings and errors at the tests' LOG_LEVEL) goes
    // to stderr, so a CI log says what the gateway, worker or api saw at the time.
    if (!t.passing()) {
      for (const p of procs) {
        const tail = p.lines.slice(-40).map((l) => JSON.stringify(l)).join('\n');
        if (tail) process.stderr.write(`# ${id} ${p.name}, last ${Math.min(40, p.lines.length)} log lines:\n${tail}\n`);
      }
    }
    await Promise.all(procs.map((p) => p.stop('SIGKILL')));
    // A test with a NATS server of its own may have stopped it already: then there is nothing to delete.
    if (!opts.natsUrl) {
      const jsm = await nc.jetstreamManager();
      await jsm.streams.delete(env.STREAM_NAME!).catch(() => {});
      await jsm.streams.delete(deadLetterStream(env.STREAM_NAME!)).catch(() => {});
      // Streams named after this one: KV buckets and object stores (`KV_<stream>_…`, `OBJ_<stream>_…`).
      for await (const name of jsm.streams.names()) {
        if (name.includes(env.STREAM_NAME!)) await jsm.streams.delete(name).catch(() => {});
      }
    }
    await nc.close();
    // A Redis of the test's own is thrown away with its test (it may be stopped already).
    if (!opts.redisUrl) {
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${env.REDIS_PREFIX}*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length) await redis.del(...keys);
      } while (cursor !== '0');
      await redis.quit();
    } else redis.disconnect();
    await pool.end();
    await ch.command({ query: `DROP DATABASE IF EXISTS t_${id}` }).catch(() => {});
    await ch.close();
    await adminQuery(`DROP DATABASE IF EXISTS "t_${id}" WITH (FORCE)`, pgServer).catch(() => {});
  });

  const [g, a] = await Promise.all([
    opts.gateway === false ? null : stack.startGateway(),
    opts.api === false ? null : stack.startApi(),
    opts.worker === false ? null : stack.startWorker(),
  ]);
  if (g) stack.gatewayUrl = g.url;
  if (a) stack.apiUrl = a.url;
  return stack;
}

/** Polls `fn` until it returns a truthy value, or fails after `ms`. */
export async function eventually<T>(fn: () => Promise<T | null | undefined | false | 0 | "">, ms = 10_000, what = "condition"): Promise<T> {
  const until = Date.now() + ms;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const v = await fn();
      if (v) return v as T;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} not reached within ${ms} ms${last ? `: ${(last as Error).message}` : ''}`);
}

/**
 * Waits until the stack's streams hold no message. Each has work-queue retention: a message
 * leaves it only when a worker acks it, and a worker acks only after every effect of the message is
 * committed (Postgres, ClickHouse, Redis, the light events and their webhook jobs, the command
 * hints: workers/apply-batch.ts). So once a report was answered 200 (JetStream had stored it) and
 * the stream is then empty, that report and everything published before it have been applied,
 * whatever order the worker's concurrent batches (WORKER_CONCURRENCY) committed in: a later report
 * being visible alone proves nothing about an earlier one.
 */
export async function drained(s: Pick<TestStack, 'nc' | 'env'>, ms = 30_000): Promise<void> {
  const jsm = await s.nc.jetstreamManager();
  // Both lanes of every partition: the main stream and the heartbeat lane's (lib/contract/messages.ts).
  const streams = ingestStreams(s.env.STREAM_NAME!, Number(s.env.STREAM_PARTITIONS || 1));
  await eventually(
    async () => {
      const infos = await Promise.all(streams.map((n) => jsm.streams.info(n)));
      if (infos.every((i) => i.state.messages === 0)) return true;
      // Named in the failure: what is left, and what the workers' consumer says of it.
      const left = await Promise.all(
        infos.map(async (i) => {
          const c = await jsm.consumers.info(i.config.name, 'workers').catch(() => null);
          return `${i.config.name}: ${i.state.messages} messages (seq ${i.state.first_seq}-${i.state.last_seq}), consumer pending ${c?.num_pending}, ack pending ${c?.num_ack_pending}, redelivered ${c?.num_redelivered}, ack floor ${c?.ack_floor.stream_seq}`;
        }),
      );
      throw new Error(left.join('; '));
    },
    ms,
    'the streams drained (every message applied and acked)',
  );
}

/**
 * Waits until the workers' consumer of each lane has nothing pending and nothing delivered unacked.
 * After a kill -9 of nats-server the stream may keep a message its consumer already counts as
 * acked (the removal was not yet on disk), so a test that kills NATS waits on the consumers.
 */
export async function consumed(s: Pick<TestStack, 'nc' | 'env'>, ms = 30_000): Promise<void> {
  const jsm = await s.nc.jetstreamManager();
  await eventually(
    async () => (await Promise.all(ingestStreams(s.env.STREAM_NAME!, Number(s.env.STREAM_PARTITIONS || 1)).map((n) => jsm.consumers.info(n, 'workers')))).every((i) => i.num_pending + i.num_ack_pending === 0),
    ms,
    "the workers' consumers of both lanes have nothing pending or unacked",
  );
}

/**
 * Proves that whatever one gateway took before now has been applied: sends `machine` a heartbeat
 * (the marker) through that gateway (`o.gateway`, default the stack's), then waits until the stream
 * is drained (`drained`). The gateway publishes what it takes in the order it takes it, on one NATS
 * connection (gateway/publisher.ts), and a rejection-log record at once when it refuses
 * (gateway/rejection-log.ts): the marker's 200 means JetStream stored it after everything that
 * gateway had taken or logged before. Check an absence after this, ideally with the query that also
 * finds the marker (then the query is shown to see such rows).
 */
export async function afterMarker(s: TestStack, machine: string, o: IngestOptions & { token?: string; kind?: string; body?: unknown } = {}): Promise<void> {
  const r = await s.report(machine, o.kind ?? 'heartbeat', o.body ?? {}, o);
  if (r.status !== 200 && r.status !== 202) throw new Error(`the marker report was refused: ${r.status} ${JSON.stringify(r.body)}`);
  await drained(s);
}

// The HTTP helper lives in test/helpers/http.ts; re-exported for the tests that import it from here.
export { post, get, request } from './http.js';

export async function chRows<T = Record<string, unknown>>(ch: ClickHouseClient, query: string): Promise<T[]> {
  const rs = await ch.query({ query, format: 'JSONEachRow' });
  return (await rs.json()) as T[];
}
