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
      // /healthz, /readyz and /metrics (workers/health.ts); 0 = off. `npm start` gives worker i the
      // port WORKER_HTTP_PORT + i.
      httpPort: num('WORKER_HTTP_PORT', 0),
      httpHost: str('WORKER_HTTP_HOST', '127.0.0.1'),
      // Messages pending while this worker has waited this long for one: a stall (logged, counted,
      // not ready, the pull restarted: workers/ingest-consumer.ts).
      stallTimeoutMs: num('WORKER_STALL_TIMEOUT_MS', 30_000),
      // How often /readyz asks Postgres, ClickHouse and Redis whether they answer.
      healthIntervalMs: num('WORKER_HEALTH_INTERVAL_MS', 2000),
      consumerName: str('CONSUMER_NAME', 'workers'),
      batchMaxMessages: num('WORKER_BATCH_MESSAGES', 256),
      // A gateway message holds up to 512 reports: a batch is also capped by bytes (16 MiB, about
      // 80k heartbeats). Larger batches share one upsert per instance among more reports.
      batchMaxBytes: num('WORKER_BATCH_BYTES', 16 * 1024 * 1024),
      batchWaitMs: num('WORKER_BATCH_WAIT_MS', 50),
      // Batches one worker applies at once (overlaps one batch's database waits with the next).
      concurrency: num('WORKER_CONCURRENCY', 2),
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
      // Base URLs the OpenAPI document (/openapi.json) names as servers. PUBLIC_API_URL `/` means
      // "where the document came from"; set both to what clients use behind the proxy.
      publicApiUrl: str('PUBLIC_API_URL', '/'),
      publicGatewayUrl: str('PUBLIC_GATEWAY_URL', `http://${str('GATEWAY_HOST', '127.0.0.1')}:${num('GATEWAY_PORT', 8080)}`),
      // Whitelist rules per customer (each diagnostic is checked against its customer's rules).
      whitelistMaxRules: num('WHITELIST_MAX_RULES', 1000),
      // Live stream of traffic-light changes (Server-Sent Events): a comment line this often keeps
      // proxies from closing an idle stream; at most this many open streams per api process.
      sseKeepaliveS: num('SSE_KEEPALIVE_S', 15),
      sseMaxClients: num('SSE_MAX_CLIENTS', 10_000),
      // Slow clients (api/server.ts): a request's headers and body must arrive within
      // requestTimeoutMs (408 otherwise); a connection with a request in progress may be silent for
      // idleTimeoutMs; an idle keep-alive connection stays open keepAliveTimeoutMs (longer than a
      // proxy's idle timeout in front, or the proxy may reuse a connection the api just closed).
      requestTimeoutMs: num('API_REQUEST_TIMEOUT_MS', 30_000),
      idleTimeoutMs: num('API_IDLE_TIMEOUT_MS', 60_000),
      keepAliveTimeoutMs: num('API_KEEPALIVE_TIMEOUT_MS', 72_000),
    },
    // Traffic light (issue 4; docs/architecture.md "Traffic light").
    light: {
      // Listen for Redis expired-key events (the fast path to red). Off: only the sweep makes red.
      expiryListener: bool('LIGHT_EXPIRY_LISTENER', true),
      // The sweep (a BullMQ repeatable job, one worker at a time) repairs missed expiry events.
      sweepIntervalMs: num('LIGHT_SWEEP_INTERVAL_MS', 5000),
      // Instances per sweep transaction; a sweep loops until nothing is left.
      sweepBatch: num('LIGHT_SWEEP_BATCH', 5000),
    },
    webhooks: {
      // Deliveries of one event to one webhook before it is marked failed; the wait before retry n
      // is WEBHOOK_BACKOFF_MS * 2^(n-1).
      attempts: num('WEBHOOK_ATTEMPTS', 10),
      backoffMs: num('WEBHOOK_BACKOFF_MS', 1000),
      timeoutMs: num('WEBHOOK_TIMEOUT_MS', 10_000),
      concurrency: num('WEBHOOK_CONCURRENCY', 16),
      maxPerCustomer: num('WEBHOOKS_PER_CUSTOMER', 10),
      // Internal addresses webhooks may reach after all (on-premises receivers), as comma-separated
      // CIDRs; empty: public addresses only (lib/egress.ts).
      allowCidrs: str('WEBHOOK_ALLOW_CIDRS', ''),
    },
    // How often the gateways re-read tokens and other control data from Postgres: a revocation is
    // effective on every replica within this interval (plus one query).
    cacheRefreshMs: num('CACHE_REFRESH_MS', 1000),
    licence: {
      // How often one worker re-checks every customer's device count against its limit (starts and
      // ends grace periods when machines age out of the 30-day window or come back).
      sweepMs: num('LICENCE_SWEEP_MS', 60_000),
    },
    // Support contacts by licence tier (GET /api/support-info): free = community and e-mail; paid
    // also phone and a named contact.
    support: {
      communityUrl: str('SUPPORT_COMMUNITY_URL', 'https://community.example.com/fleet'),
      email: str('SUPPORT_EMAIL', 'support@example.com'),
      phone: str('SUPPORT_PHONE', '+49 30 1234567'),
      phoneHours: str('SUPPORT_PHONE_HOURS', 'Mon-Fri 08:00-18:00 CET'),
      contactName: str('SUPPORT_CONTACT_NAME', 'Customer Success Team'),
      contactEmail: str('SUPPORT_CONTACT_EMAIL', 'success@example.com'),
      contactPhone: str('SUPPORT_CONTACT_PHONE', ''),
    },
    heartbeatTimeoutS: num('HEARTBEAT_TIMEOUT_S', 300),
    warningWindowS: num('WARNING_WINDOW_S', 900),
    idempotencyTtlS: num('IDEMPOTENCY_TTL_S', 86_400),
    // An agent's `ts` is stored where it lies within this window around the receive time; outside
    // it the report is still kept (receive time) and flagged as clock skew (docs/api.md "Agent clocks").
    tsPlausiblePastS: num('TS_PLAUSIBLE_PAST_S', 30 * 86_400),
    tsPlausibleFutureS: num('TS_PLAUSIBLE_FUTURE_S', 86_400),
    // Host metrics: how long the gateway remembers a client_metric_id for exact duplicate counts
    // (storage is idempotent forever; see docs/api.md).
    metricDedupTtlS: num('METRIC_DEDUP_TTL_S', 86_400),
    // Chunked artifact uploads (lib/artifacts.ts): chunks live in the JetStream object store
    // `${STREAM_NAME}_ARTIFACTS`, upload records in the KV bucket `${STREAM_NAME}_UPLOADS`.
    artifacts: {
      chunkSize: num('ARTIFACT_CHUNK_BYTES', 1024 * 1024),
      maxSize: num('ARTIFACT_MAX_BYTES', 2 * 1024 ** 3),
      // An upload not completed this long after its init expires; its chunks are deleted.
      uploadTtlS: num('ARTIFACT_UPLOAD_TTL_S', 86_400),
      // How often the expiry job (BullMQ, in the workers) looks for expired uploads.
      sweepMs: num('ARTIFACT_SWEEP_MS', 60_000),
      // Chunks are deleted this long after the upload expired (a complete that started just
      // before the expiry has this long to finish).
      expiryGraceS: num('ARTIFACT_EXPIRY_GRACE_S', 600),
      // Object-store size limit (0: bounded only by the NATS server's storage).
      storeMaxBytes: num('ARTIFACT_STORE_MAX_BYTES', 0),
      // Chunk bodies one gateway holds in memory at once; past that a chunk gets 503 Retry-After.
      maxInflightBytes: num('ARTIFACT_INFLIGHT_BYTES', 64 * 1024 * 1024),
    },
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
