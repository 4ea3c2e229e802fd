// The one module that reads the environment. Every process takes its settings from here; the
// README's configuration table lists the same variables with the same defaults.
import { resolve } from 'node:path';

function str(name: string, fallback: string): string {
  const v = process.env[name];
  return v === undefined || v === '' ? fallback : v;
}

function num(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`environment variable ${name} must be a number, got ${JSON.stringify(v)}`);
  return n;
}

function bool(name: string, fallback: boolean): boolean {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  return v === '1' || v.toLowerCase() === 'true' || v.toLowerCase() === 'yes';
}

export function loadConfig() {
  const dataDir = resolve(str('DATA_DIR', '.data'));
  const ports = {
    nats: num('NATS_PORT', 14222),
    redis: num('REDIS_PORT', 16379),
    postgres: num('PG_PORT', 15432),
    clickhouseHttp: num('CLICKHOUSE_HTTP_PORT', 18123),
    clickhouseTcp: num('CLICKHOUSE_TCP_PORT', 19000),
  };
  return {
    dataDir,
    ports,
    // Where the servers are. Unset: the project-local servers started by `npm start` on loopback.
    natsUrl: str('NATS_URL', `nats://127.0.0.1:${ports.nats}`),
    databaseUrl: str('DATABASE_URL', `postgres://postgres@127.0.0.1:${ports.postgres}/fleet`),
    redisUrl: str('REDIS_URL', `redis://127.0.0.1:${ports.redis}/0`),
    clickhouseUrl: str('CLICKHOUSE_URL', `http://127.0.0.1:${ports.clickhouseHttp}`),
    clickhouseDatabase: str('CLICKHOUSE_DB', 'fleet'),
    clickhouseUser: str('CLICKHOUSE_USER', 'default'),
    clickhousePassword: str('CLICKHOUSE_PASSWORD', ''),
    // Names that keep two deployments (or two test files) apart on shared servers.
    streamName: str('STREAM_NAME', 'INGEST'),
    subjectPrefix: str('SUBJECT_PREFIX', 'ingest'),
    redisPrefix: str('REDIS_PREFIX', 'fleet:'),
    streamMaxBytes: num('STREAM_MAX_BYTES', 8 * 1024 ** 3),
    streamReplicas: num('STREAM_REPLICAS', 1),

    gateway: {
      host: str('GATEWAY_HOST', '127.0.0.1'),
      port: num('GATEWAY_PORT', 8080),
      allowUwsFallback: bool('UWS_ALLOW_FALLBACK', false),
      // Behind a proxy: take the client address for the rejection log from X-Forwarded-For.
      trustProxy: bool('TRUST_PROXY', false),
      bodyTimeoutMs: num('BODY_TIMEOUT_MS', 30_000),
      bodyLimit: num('BODY_LIMIT_BYTES', 1024 * 1024),
      maxItems: num('MAX_ITEMS', 1000),
      rateLimit: num('RATE_LIMIT_PER_S', 1000),
      rateBurst: num('RATE_LIMIT_BURST', 2000),
      // Rejection log: per source (remote address) this many rows per second, then counted only.
      rejectionLogRate: num('REJECTION_LOG_RATE_PER_S', 20),
      rejectionLogBurst: num('REJECTION_LOG_BURST', 100),
      publishTimeoutMs: num('PUBLISH_TIMEOUT_MS', 5000),
      publishMaxReports: num('PUBLISH_MAX_REPORTS', 512),
      publishMaxBytes: num('PUBLISH_MAX_BYTES', 512 * 1024),
      publishMaxInflight: num('PUBLISH_MAX_INFLIGHT', 8),
      shutdownGraceMs: num('SHUTDOWN_GRACE_MS', 10_000),
    },
    worker: {
      httpPort: num('WORKER_HTTP_PORT', 0),
      consumerName: str('CONSUMER_NAME', 'workers'),
      batchMaxMessages: num('WORKER_BATCH_MESSAGES', 256),
      batchWaitMs: num('WORKER_BATCH_WAIT_MS', 50),
      ackWaitS: num('ACK_WAIT_S', 30),
      // Deliveries of one message that failed for a reason in the data before it is dead-lettered.
      maxDeliver: num('WORKER_MAX_DELIVER', 5),
    },
    api: {
      host: str('API_HOST', '127.0.0.1'),
      port: num('API_PORT', 8081),
      // HS256 key for dashboard sessions. Every api replica needs the same one; `npm start`
      // generates one into $DATA_DIR/jwt-secret. Unset elsewhere: a random key per process.
      jwtSecret: str('JWT_SECRET', ''),
      jwtTtlS: num('JWT_TTL_S', 12 * 3600),
      // Mark the session cookie Secure (set it when TLS terminates in front of the api).
      cookieSecure: bool('COOKIE_SECURE', false),
      trustProxy: bool('TRUST_PROXY', false),
      // Failed logins before 429: per account, and per client address, within the window.
      loginMaxFailuresPerAccount: num('LOGIN_MAX_FAILURES_PER_ACCOUNT', 5),
      loginMaxFailuresPerAddress: num('LOGIN_MAX_FAILURES_PER_ADDRESS', 20),
      loginWindowS: num('LOGIN_WINDOW_S', 900),
    },
    // How often the gateways re-read tokens and other control data from Postgres: a revocation is
    // effective on every replica within this interval (plus one query).
    cacheRefreshMs: num('CACHE_REFRESH_MS', 1000),
    heartbeatTimeoutS: num('HEARTBEAT_TIMEOUT_S', 300),
    warningWindowS: num('WARNING_WINDOW_S', 900),
    idempotencyTtlS: num('IDEMPOTENCY_TTL_S', 86_400),
    commands: {
      // A queued command not delivered within this time expires; a delivered one not acked within
      // ackTimeoutS times out. Both deadlines are fixed when the state is entered.
      queueTtlS: num('COMMAND_QUEUE_TTL_S', 86_400),
      ackTimeoutS: num('COMMAND_ACK_TIMEOUT_S', 3600),
      // How often the expiry job (BullMQ, run by the workers) looks for overdue commands.
      sweepMs: num('COMMAND_SWEEP_MS', 30_000),
      // Gateways re-read every open command this often (NATS hints make changes visible at once;
      // this is the safety net for a lost hint).
      resyncMs: num('COMMAND_RESYNC_MS', 10_000),
      // Open (queued or delivered) commands per instance; more is refused with 409.
      maxOpenPerInstance: num('COMMAND_MAX_OPEN', 100),
      argsMaxBytes: num('COMMAND_ARGS_MAX_BYTES', 64 * 1024),
    },
    logLevel: str('LOG_LEVEL', 'info'),
  };
}

export type Config = ReturnType<typeof loadConfig>;
