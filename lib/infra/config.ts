// The one module that reads the environment. Every setting is declared once, in `Settings` (a
// TypeBox schema: type, bounds, default, meaning), validated when a process starts: a bad value
// stops it with one line per variable, naming the variable, its value and what is allowed
// (`GATEWAY_PORT="99999": must be an integer from 0 to 65535`). The README's configuration table
// lists the same variables with the same defaults (test/unit/config.test.ts keeps them in step).
import { resolve } from 'node:path';
import { Type, type TSchema, type Static } from '@sinclair/typebox';
import { Ajv } from 'ajv';
import { compileTrust, type TrustProxy } from './client-address.js';

const MAX = Number.MAX_SAFE_INTEGER;
const Int = (dflt: number, min: number, max: number, description: string) => Type.Integer({ default: dflt, minimum: min, maximum: max, description });
const Port = (dflt: number, description: string) => Int(dflt, 0, 65535, description);
/** A count or a duration that must be at least 1. */
const Pos = (dflt: number, description: string, max = MAX) => Int(dflt, 1, max, description);
/** 0 has a meaning (off, no limit). */
const Nat = (dflt: number, description: string, max = MAX) => Int(dflt, 0, max, description);
const Bool = (dflt: boolean, description: string) => Type.Boolean({ default: dflt, description });
const Str = (dflt: string, description: string, opts: { pattern?: string; minLength?: number; allowed?: string } = {}) =>
  Type.String({ default: dflt, description, ...opts });
/** Derived from other settings when unset (the default says how). */
const Derived = (description: string, opts: { pattern?: string; allowed?: string } = {}) => Type.Optional(Type.String({ description, minLength: 1, ...opts }));
const Enum = <T extends string>(values: readonly T[], dflt: T, description: string) => Type.Union(values.map((v) => Type.Literal(v)), { default: dflt, description });

const HOST = { minLength: 1, allowed: 'a host name or address' };
const NAME = { pattern: '^[A-Za-z0-9_-]{1,64}$', allowed: 'letters, digits, _ and -, 1 to 64 characters' };
const URL_LIST = (schemes: string) => ({ pattern: `^(${schemes})://[^\\s,]+(,(${schemes})://[^\\s,]+)*$`, allowed: `${schemes.replace(/\|/g, ' or ')} URLs` });

/** Every setting: environment variable -> type, bounds, default, meaning. */
export const Settings = Type.Object({
  DATA_DIR: Str('.data', 'data of the project-local servers, demo-token', HOST),
  NATS_PORT: Port(14222, 'project-local nats-server'),
  REDIS_PORT: Port(16379, 'project-local redis-server'),
  PG_PORT: Port(15432, 'project-local PostgreSQL'),
  CLICKHOUSE_HTTP_PORT: Port(18123, 'project-local ClickHouse, HTTP'),
  CLICKHOUSE_TCP_PORT: Port(19000, 'project-local ClickHouse, native protocol'),
  NATS_URL: Derived('NATS (comma-separated for a cluster); default nats://127.0.0.1:$NATS_PORT', URL_LIST('nats|tls')),
  DATABASE_URL: Derived('PostgreSQL; default postgres://postgres@127.0.0.1:$PG_PORT/fleet', { pattern: '^postgres(ql)?://\\S+$', allowed: 'a postgres:// URL' }),
  REDIS_URL: Derived('Redis; default redis://127.0.0.1:$REDIS_PORT/0; a Redis Cluster: redis-cluster://host:port[,host:port...] (docs/operations.md "Redis Cluster")', { pattern: '^(rediss?|redis-cluster)://\\S+$', allowed: 'a redis://, rediss:// or redis-cluster:// URL' }),
  CLICKHOUSE_URL: Derived('ClickHouse HTTP interface; default http://127.0.0.1:$CLICKHOUSE_HTTP_PORT', { pattern: '^https?://\\S+$', allowed: 'an http:// or https:// URL' }),
  CLICKHOUSE_DB: Str('fleet', 'ClickHouse database', { pattern: '^[A-Za-z_][A-Za-z0-9_]{0,63}$', allowed: 'a ClickHouse identifier' }),
  CLICKHOUSE_USER: Str('default', 'ClickHouse login', { minLength: 1 }),
  CLICKHOUSE_PASSWORD: Str('', 'ClickHouse password'),
  CLICKHOUSE_CLUSTER: Str('', 'ClickHouse cluster (remote_servers name): replicated tables, Distributed tables for reads, DDL ON CLUSTER; empty: one server', {
    pattern: '^([A-Za-z_][A-Za-z0-9_]{0,63})?$',
    allowed: 'empty or a ClickHouse identifier',
  }),
  STREAM_NAME: Str('INGEST', 'JetStream stream (names on shared servers)', NAME),
  SUBJECT_PREFIX: Str('ingest', 'NATS subject prefix', { pattern: '^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$', allowed: 'NATS subject tokens (letters, digits, _ and -) joined by dots' }),
  REDIS_PREFIX: Str('fleet:', 'Redis key prefix', { minLength: 1 }),
  REDIS_WAIT_REPLICAS: Nat(0, "replicas that must hold a heartbeat a worker kept only in Redis before its report is acknowledged (Redis WAIT; 0: none; a Redis with replicas or a Redis Cluster: 1, so a failover loses none)", 5),
  STREAM_MAX_BYTES: Pos(8 * 1024 ** 3, 'stream size; when full, ingest answers 503'),
  STREAM_HEARTBEAT_MAX_BYTES: Pos(2 * 1024 ** 3, "the heartbeat lane's stream size; when full, heartbeats are answered 503"),
  STREAM_REPLICAS: Int(1, 1, 5, 'JetStream replicas (3 on a NATS cluster)'),
  STREAM_PARTITIONS: Int(1, 1, 64, "ingest partitions: each its own pair of streams (main and heartbeat lane) and so its own stream leader; a machine's reports go to one partition by a hash of customer and machine (docs/architecture.md \"Partitions\"); STREAM_MAX_BYTES and STREAM_HEARTBEAT_MAX_BYTES are shared out between them"),

  GATEWAY_HOST: Str('127.0.0.1', 'gateway listen address', HOST),
  GATEWAY_FAULT_INJECTION: Bool(false, 'tests only: a request with X-Fleet-Fault: handler|body|publish throws at that step (the error boundary answers 500)'),
  GATEWAY_PORT: Port(8080, 'gateway listen port (0 = any free port)'),
  UWS_ALLOW_FALLBACK: Bool(false, "let the gateway run on uWS's slow pure-JS fallback"),
  UWS_MODULE: Str('uWebSockets.js', 'the uWebSockets.js build the gateway loads: a package name, or a path to its folder or file', { minLength: 1 }),
  TRUST_PROXY: Str('', 'the proxies in front (docs/operations.md "Security"): a number of hops, or their addresses (CIDRs, loopback, linklocal, uniquelocal); empty: none', {
    allowed: 'empty, a number of proxy hops (e.g. 1), or comma-separated proxy addresses or CIDRs',
  }),
  BODY_TIMEOUT_MS: Pos(30_000, 'a body not complete this long after the headers: 408'),
  BODY_LIMIT_BYTES: Int(1024 * 1024, 1024, 64 * 1024 * 1024, 'request body limit (413 above)'),
  // Diagnostic items are numbered in a UInt16 column.
  MAX_ITEMS: Int(1000, 1, 65535, 'diagnostics items, or host-metric records, per request; entries per batch'),
  // A batch carries what many single requests would (status snapshots of many instances); each
  // entry's body is still held to BODY_LIMIT_BYTES, so no queued report is larger than a single one.
  BATCH_BODY_LIMIT_BYTES: Int(4 * 1024 * 1024, 1024, 64 * 1024 * 1024, 'batch ingest request body limit (413 above); each entry body is held to BODY_LIMIT_BYTES'),
  // What one request may cost before anything walks it (gateway/json-scan.ts): JSON.parse takes any
  // depth, every recursive step after it does not. A status body with a snapshot at its limit
  // (depth 32) is 33 deep; a batch request as a whole may nest twice as deep (each entry body is held to this).
  JSON_MAX_DEPTH: Int(64, 8, 1000, 'nesting of a request body or batch entry body (422 above); a batch request as a whole: twice this'),
  JSON_MAX_NODES: Int(100_000, 100, 10_000_000, 'values in a request body or batch entry body (422 above); a batch request as a whole: this times BATCH_BODY_LIMIT_BYTES / BODY_LIMIT_BYTES'),
  RATE_LIMIT_PER_S: Pos(1000, 'per token and gateway replica (429 above)'),
  RATE_LIMIT_BURST: Pos(2000, 'burst of the per-token rate'),
  REJECTION_LOG_RATE_PER_S: Pos(20, 'rejection-log rows per source address and second; the rest is counted'),
  REJECTION_LOG_BURST: Pos(100, 'burst of the rejection-log rate'),
  PUBLISH_TIMEOUT_MS: Pos(5000, 'wait for a PubAck before answering 503'),
  PUBLISH_MAX_REPORTS: Int(512, 1, 100_000, 'reports per JetStream publish'),
  PUBLISH_MAX_BYTES: Int(512 * 1024, 1024, 64 * 1024 * 1024, 'bytes per JetStream publish'),
  PUBLISH_MAX_INFLIGHT: Int(8, 1, 1024, 'publishes a gateway waits on at once'),
  QUEUE_SHARE_FROM_PERCENT: Int(50, 1, 100, "an ingest stream at least this full (the workers are behind) limits each customer's share of it (100: never; docs/architecture.md \"A customer's share of a queue\")"),
  QUEUE_SHARE_PERCENT: Int(50, 1, 100, "the most of what a gateway queued to such a stream in the last 30 s one customer's reports may be; above it, 429 with Retry-After"),
  SHUTDOWN_GRACE_MS: Nat(10_000, 'on SIGTERM, how long the gateway waits for reports in flight'),

  WORKERS: Int(1, 1, 64, 'worker processes `npm start` runs'),
  WORKER_HTTP_PORT: Port(0, 'worker /healthz, /readyz and /metrics (0 = off; under npm start 8082, worker i on 8082 + i)'),
  WORKER_HTTP_HOST: Str('127.0.0.1', 'address of the worker endpoints', HOST),
  WORKER_STALL_TIMEOUT_MS: Pos(30_000, 'messages pending while a worker waited this long for one: a stall'),
  WORKER_HEALTH_INTERVAL_MS: Pos(2000, "how often a worker's /readyz asks Postgres, ClickHouse and Redis"),
  CONSUMER_NAME: Str('workers', 'the durable consumer all workers share', NAME),
  WORKER_BATCH_MESSAGES: Int(256, 1, 100_000, 'messages per worker batch'),
  WORKER_BATCH_BYTES: Int(16 * 1024 * 1024, 1024, 1024 ** 3, 'bytes per worker batch'),
  WORKER_BATCH_WAIT_MS: Nat(50, 'how long a worker gathers a batch'),
  WORKER_CONCURRENCY: Int(2, 1, 64, 'batches one worker applies at once'),
  WORKER_LANES: Str('reports,heartbeats', 'the lanes this worker pulls: reports (the main stream), heartbeats (the heartbeat lane), or both', {
    pattern: '^(reports|heartbeats)(,(reports|heartbeats))?$',
    allowed: 'reports, heartbeats, or both joined by a comma',
  }),
  WORKER_PARTITIONS: Str('', "the ingest partitions this worker pulls (docs/architecture.md \"Partitions\"): numbers joined by commas; empty: every partition that exists, and the unpartitioned streams", {
    pattern: '^([0-9]{1,2}(,[0-9]{1,2})*)?$',
    allowed: 'empty, or partition numbers (0-63) joined by commas',
  }),
  ACK_WAIT_S: Pos(30, 'unacked messages are redelivered after this'),
  WORKER_RETRY_MAX_MS: Int(30_000, 100, 3_600_000, 'the longest wait before a report waiting for an outage is tried again (the wait doubles from 0.5 s)'),

  API_HOST: Str('127.0.0.1', 'read API listen address', HOST),
  API_PORT: Port(8081, 'read API listen port (0 = any free port)'),
  JWT_SECRET: Str('', 'HS256 key of dashboard sessions; the same on every api replica (npm start generates one)', {
    pattern: '^$|^.{32,}$',
    allowed: 'empty (a random key per process) or at least 32 characters',
  }),
  JWT_TTL_S: Pos(12 * 3600, 'session lifetime'),
  COOKIE_SECURE: Bool(false, 'mark the session cookie Secure (set it behind TLS)'),
  // Login against brute force (api/login-guard.ts; docs/operations.md "Login limits").
  LOGIN_MAX_FAILURES_PER_ACCOUNT: Pos(5, 'failed logins per account from one client address (an IPv6 /64) before 429 for that pair; also per device cookie'),
  LOGIN_MAX_FAILURES_PER_ADDRESS: Pos(20, 'failed logins per client address (an IPv6 /64), all accounts, before 429'),
  LOGIN_WINDOW_S: Pos(900, 'window of the failed-login counts'),
  LOGIN_ACCOUNT_SLOWDOWN_AFTER: Pos(10, 'failed logins per account, all addresses, after which clients without its device cookie are slowed down'),
  LOGIN_ACCOUNT_DELAY_S: Pos(1, 'first wait between attempts on a slowed-down account; doubles with each failure'),
  LOGIN_ACCOUNT_DELAY_MAX_S: Pos(60, 'longest wait between attempts on a slowed-down account'),
  LOGIN_HASH_CONCURRENCY: Int(2, 1, 64, 'password checks (scrypt, 128 MiB each) one api process runs at once'),
  LOGIN_HASH_QUEUE: Nat(8, 'password checks waiting for one of those; more: 503 with Retry-After', 10_000),
  // The account life cycle (docs/operations.md "Accounts, sessions and e-mail").
  SESSION_STREAM_RECHECK_MS: Int(2000, 100, 60_000, 'how often each api replica re-checks the session (or API token) of every open live stream; a revoked one is closed'),
  INVITATION_TTL_S: Int(7 * 86_400, 60, 90 * 86_400, 'an invitation link is valid this long'),
  PASSWORD_RESET_TTL_S: Int(3600, 60, 7 * 86_400, 'a password-reset link is valid this long'),
  PASSWORD_RESET_MAX_PER_HOUR: Int(5, 1, 1000, 'reset e-mails per address and hour; more requests get the same answer and no e-mail'),
  PASSWORD_MIN_LENGTH: Int(10, 8, 128, 'shortest password a user may choose'),
  PUBLIC_DASHBOARD_URL: Derived('the dashboard address the links in e-mails point to; default http://$API_HOST:$API_PORT', { pattern: '^https?://\\S+$', allowed: 'an http(s) URL' }),
  SMTP_HOST: Str('', 'SMTP server for invitations, password resets and notifications; empty: no e-mail (links go to the log)'),
  SMTP_PORT: Port(587, 'SMTP port (465 with SMTP_SECURE)'),
  SMTP_SECURE: Bool(false, 'TLS from the first byte (port 465); off: plain connection upgraded per SMTP_STARTTLS'),
  SMTP_STARTTLS: Enum(['required', 'opportunistic', 'off'] as const, 'required', 'STARTTLS on a plain connection: required (refuse to send without it), opportunistic (when offered), off'),
  SMTP_USER: Str('', 'SMTP login (empty: none)'),
  SMTP_PASSWORD: Str('', 'SMTP password'),
  SMTP_TIMEOUT_MS: Pos(15_000, 'connecting to and talking with the SMTP server'),
  MAIL_FROM: Str('Fleet <fleet@localhost>', 'sender of every e-mail', { minLength: 3 }),
  // E-mail notifications of traffic-light changes (docs/operations.md "E-mail notifications").
  MAIL_DIGEST_INTERVAL_S: Int(60, 1, 86_400, 'changes are collected per subscription and mailed as one digest at most once per this many seconds; the first change waits this long'),
  MAIL_RATE_PER_S: Int(10, 1, 10_000, 'notification e-mails per second, all workers together (one worker sends at a time)'),
  MAIL_DIGEST_MAX_LINES: Int(100, 1, 10_000, 'changes a digest lists; more: "and N more" with a link to the dashboard'),
  MAIL_DIGEST_TICK_MS: Int(1000, 100, 60_000, 'how often a worker looks for digests that are due'),
  PUBLIC_API_URL: Str('/', 'the api server /openapi.json names (/ = where the document came from)', { pattern: '^(/|https?://\\S+)$', allowed: '/ or an http(s) URL' }),
  PUBLIC_GATEWAY_URL: Derived('the gateway server /openapi.json names; default http://$GATEWAY_HOST:$GATEWAY_PORT', { pattern: '^https?://\\S+$', allowed: 'an http(s) URL' }),
  WHITELIST_MAX_RULES: Pos(1000, 'whitelist rules per customer, the default of the quota whitelist_rules (409 above)'),
  SSE_KEEPALIVE_S: Pos(15, 'live stream keep-alive comment'),
  SSE_MAX_CLIENTS: Pos(10_000, 'open live streams per api replica, all customers together (503 above)'),
  QUOTA_STREAM_CONNECTIONS: Nat(50, 'open live streams per customer and api replica, the default of the quota stream_connections (429 above)'),
  API_COUNT_CACHE_MS: Int(1000, 0, 60_000, 'the fleet summary and the `total` of instance lists are cached this long per customer and filter (0 = off)'),
  API_PRINCIPAL_CACHE_MS: Int(60_000, 0, 3_600_000, "a request's API token or session row is kept in memory at most this long; every change to tokens, sessions, users, memberships or customers empties the copy at once (Postgres LISTEN) (0 = off: every request reads Postgres)"),
  API_REQUEST_TIMEOUT_MS: Pos(30_000, "a request's headers and body must arrive within this (408)"),
  API_IDLE_TIMEOUT_MS: Pos(60_000, 'a connection with a request in progress may be silent this long'),
  API_KEEPALIVE_TIMEOUT_MS: Pos(72_000, 'an idle keep-alive connection stays open this long'),

  LIGHT_EXPIRY_LISTENER: Bool(true, 'workers listen for Redis expired-key events (off: only the sweep makes red)'),
  LIGHT_SWEEP_INTERVAL_MS: Pos(1000, 'how often the sweep repairs missed expiry events'),
  LIGHT_SWEEP_BATCH: Pos(5000, 'instances per traffic-light transaction'),
  LIGHT_CENSUS_INTERVAL_MS: Pos(30_000, 'how often one worker counts the instances of each traffic-light colour (the metric fleet_worker_instances)'),
  WEBHOOK_ATTEMPTS: Int(10, 1, 100, 'deliveries of one event before it is failed'),
  WEBHOOK_BACKOFF_MS: Pos(1000, 'first retry delay, doubled each time'),
  WEBHOOK_TIMEOUT_MS: Pos(10_000, 'per delivery attempt'),
  WEBHOOK_CONCURRENCY: Int(16, 1, 1000, 'deliveries in flight per worker'),
  WEBHOOKS_PER_CUSTOMER: Nat(10, 'webhooks a customer may register, the default of the quota webhooks (409 above)'),
  WEBHOOK_ALLOW_CIDRS: Str('', 'internal addresses webhooks may reach after all (comma-separated CIDRs)'),
  CACHE_REFRESH_MS: Pos(1000, 'how often gateways re-read tokens and help-text coverage, workers the whitelist'),
  TOKEN_USAGE_FLUSH_MS: Pos(10_000, "how often gateways and apis write the tokens' last_used_at (each token at most once a minute)"),
  LICENCE_SWEEP_MS: Pos(60_000, 'how often one worker re-checks device counts against licence limits'),
  SUPPORT_COMMUNITY_URL: Str('https://community.example.com/fleet', 'support contact of every tier'),
  SUPPORT_EMAIL: Str('support@example.com', 'support contact of every tier'),
  SUPPORT_PHONE: Str('+49 30 1234567', 'phone support, paid tier'),
  SUPPORT_PHONE_HOURS: Str('Mon-Fri 08:00-18:00 CET', 'phone support hours'),
  SUPPORT_CONTACT_NAME: Str('Customer Success Team', 'named contact, paid tier'),
  SUPPORT_CONTACT_EMAIL: Str('success@example.com', 'named contact, paid tier'),
  SUPPORT_CONTACT_PHONE: Str('', 'named contact phone (default: the support phone)'),
  HEARTBEAT_TIMEOUT_S: Pos(300, 'heartbeat silence before red, where no timeout rule says otherwise'),
  HEARTBEAT_LATE_PERCENT: Int(0, 0, 99, 'share of the timeout after which a silent instance turns late, where no timeout rule says otherwise (0: no late colour)'),
  TIMEOUT_RULE_MIN_S: Int(30, 1, 2_592_000, 'shortest timeout a timeout rule may set (a shorter one makes the workers judge its instances\' silences more often)'),
  TIMEOUT_RULES_PER_CUSTOMER: Nat(1000, 'timeout rules a customer may hold, the default of the quota timeout_rules (409 above)'),
  PG_HEARTBEAT_INTERVAL_S: Nat(7200, 'a heartbeat that changes nothing reaches Postgres at most this much later (0: every heartbeat at once); silence is judged from Redis, so it may be longer than any timeout'),
  WORKER_ID_CACHE: Pos(500_000, 'instances whose ids each worker keeps in memory (the ids of others are read from Postgres, one query per batch)'),
  WARNING_WINDOW_S: Pos(900, 'a warning keeps the light yellow this long'),
  IDEMPOTENCY_TTL_S: Pos(86_400, 'how long an Idempotency-Key is remembered'),
  TS_PLAUSIBLE_PAST_S: Nat(30 * 86_400, "an agent's ts older than this before the receive time is not believed"),
  TS_PLAUSIBLE_FUTURE_S: Nat(86_400, "an agent's ts later than this after the receive time is not believed"),
  METRIC_DEDUP_TTL_S: Pos(86_400, 'how long gateways remember a client_metric_id for exact duplicate counts'),
  // Chunk sizes and counts are Postgres `integer` columns.
  ARTIFACT_CHUNK_BYTES: Int(1024 * 1024, 1024, 64 * 1024 * 1024, 'chunk size of artifact uploads (413 above)'),
  ARTIFACT_MAX_BYTES: Pos(2 * 1024 ** 3, 'largest artifact, the default of the quota artifact_max_bytes (413 at init above)'),
  QUOTA_ARTIFACT_BYTES: Nat(10 * 1024 ** 3, 'artifact bytes a customer may hold: stored artifacts plus the declared sizes of its uploads in progress; the default of the quota artifact_bytes (507 at init above)'),
  ARTIFACT_UPLOAD_TTL_S: Pos(86_400, 'an upload not completed this long after its init expires'),
  ARTIFACT_SWEEP_MS: Pos(60_000, 'how often the expiry job looks for expired uploads'),
  ARTIFACT_EXPIRY_GRACE_S: Nat(600, 'chunks of an expired upload are deleted this long after its expiry'),
  ARTIFACT_STORE_MAX_BYTES: Nat(0, 'size limit of the artifact object store (0: none of its own)'),
  ARTIFACT_INFLIGHT_BYTES: Pos(64 * 1024 * 1024, 'chunk bodies one gateway holds in memory at once'),
  // What one customer may cost the pipeline the others share, whatever it sends (docs/operations.md
  // "Quotas per customer"). Per gateway replica; bursts: twice the request rate, four times the byte
  // rate (at least BATCH_BODY_LIMIT_BYTES, so that the largest request always fits).
  QUOTA_INGEST_REQUESTS_PER_S: Pos(2000, 'ingest requests per second per customer (all its tokens) and gateway replica, batch entries counted one each; the default of the quota ingest_requests_per_s (429 above)'),
  QUOTA_INGEST_BYTES_PER_S: Pos(1024 * 1024, 'ingest body bytes per second per customer (all its tokens) and gateway replica, artifact chunks not counted; the default of the quota ingest_bytes_per_s (429 above)'),
  COMMAND_QUEUE_TTL_S: Pos(86_400, 'an agent command not delivered within this time expires'),
  COMMAND_ACK_TIMEOUT_S: Pos(3600, 'a delivered agent command not acked within this time times out'),
  COMMAND_SWEEP_MS: Pos(30_000, 'how often the workers end overdue commands'),
  COMMAND_RESYNC_MS: Pos(10_000, 'how often each gateway re-reads all open commands'),
  COMMAND_MAX_OPEN: Pos(100, 'open commands per instance (409 above)'),
  COMMAND_ARGS_MAX_BYTES: Pos(64 * 1024, "size of a command's args"),
  // Data retention (docs/operations.md "Data retention"): one worker deletes what is older than
  // this many days, every RETENTION_SWEEP_MS; 0 keeps a table's rows forever. ClickHouse drops whole
  // partitions: a day of heartbeats and rejections, a month of the others, once its last day is past it.
  RETENTION_SWEEP_MS: Pos(3_600_000, 'how often one worker deletes data past its retention (Postgres rows in chunks, ClickHouse partitions)'),
  RETENTION_HEARTBEATS_DAYS: Nat(90, 'ClickHouse heartbeats: days older than this are dropped (0: keep forever)', 36_500),
  RETENTION_DIAGNOSTICS_DAYS: Nat(365, 'ClickHouse diagnostics: months whose last day is older than this are dropped (0: keep forever)', 36_500),
  RETENTION_STATUS_HISTORY_DAYS: Nat(365, 'ClickHouse status_history, the same (0: keep forever)', 36_500),
  RETENTION_LIGHT_EVENTS_DAYS: Nat(730, 'ClickHouse light_events (the history of colours), the same (0: keep forever)', 36_500),
  RETENTION_HOST_METRICS_DAYS: Nat(365, 'ClickHouse host_metrics, by the month of the metric ts, the same (0: keep forever)', 36_500),
  RETENTION_INGEST_REJECTIONS_DAYS: Nat(30, 'ClickHouse ingest_rejections (the rejection log): days older than this are dropped (0: keep forever)', 36_500),
  RETENTION_WEBHOOK_DELIVERIES_DAYS: Nat(30, 'Postgres webhook_deliveries: delivered or failed, last attempt older than this (0: keep forever)', 36_500),
  RETENTION_COMMANDS_DAYS: Nat(90, 'Postgres commands (with their command_events): ended (succeeded, failed, expired, timed_out, cancelled) longer ago than this (0: keep forever)', 36_500),
  RETENTION_INVITATIONS_DAYS: Nat(30, "Postgres invitations: accepted, revoked or expired longer ago than this; each customer's first stays (0: keep forever)", 36_500),
  RETENTION_SESSIONS_DAYS: Nat(7, 'Postgres sessions: revoked or expired longer ago than this (0: keep forever)', 36_500),
  RETENTION_PASSWORD_RESETS_DAYS: Nat(7, 'Postgres password_resets: used or expired longer ago than this (0: keep forever)', 36_500),
  RETENTION_ARTIFACTS_DAYS: Nat(0, "artifacts (bytes in NATS, row in Postgres, size off the quota artifact_bytes) uploaded longer ago than this are deleted (0: keep forever, the default: a customer's files are its own, and its quota already bounds them)", 36_500),
  // Offboarding (docs/operations.md "Offboarding a customer"): a customer marked for deletion is
  // purged from every store this long after the mark (reports being applied at that moment land
  // first), by a job that looks every OFFBOARD_SWEEP_MS.
  OFFBOARD_GRACE_S: Nat(60, 'a customer marked for deletion is purged from every store this long after the mark (reports already being applied land first)', 86_400),
  OFFBOARD_SWEEP_MS: Pos(30_000, 'how often one worker finishes the deletion of customers marked for it (and of deletions that stopped half-way)'),
  // Maintenance windows (docs/operations.md "Maintenance windows").
  MAINTENANCE_WINDOWS_PER_CUSTOMER: Nat(100, 'maintenance windows a customer may define, the default of the quota maintenance_windows (409 above)'),
  MAINTENANCE_SWEEP_MS: Pos(3_600_000, "how often one worker extends every window's occurrences to 8 days ahead and drops those that ended more than 8 days ago"),
  LOG_LEVEL: Enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info', 'pino level'),
});
export type Settings = Static<typeof Settings>;

/** Every variable the services read (deploy manifests may set only these). */
export const SETTING_NAMES = Object.keys(Settings.properties) as (keyof Settings)[];

/** One or more settings are invalid; `problems` has one line per variable. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`);
    this.name = 'ConfigError';
  }
}

const BOOLS: Record<string, boolean> = { true: true, false: false, '1': true, '0': false, yes: true, no: false, on: true, off: false };

type Prop = TSchema & { type?: string; minimum?: number; maximum?: number; allowed?: string; anyOf?: { const: string }[]; pattern?: string; minLength?: number };

/** What a setting may be, in words. */
function allowed(s: Prop): string {
  if (s.type === 'integer') {
    if (s.maximum !== undefined && s.maximum < MAX) return `an integer from ${s.minimum} to ${s.maximum}`;
    return s.minimum === 0 ? 'a whole number (0 or more)' : `an integer of at least ${s.minimum}`;
  }
  if (s.type === 'boolean') return 'true or false (also 1/0, yes/no, on/off)';
  if (s.anyOf) return `one of ${s.anyOf.map((x) => x.const).join(', ')}`;
  return s.allowed ?? (s.minLength ? 'a non-empty string' : 'a string');
}

let validate: ReturnType<Ajv['compile']> | null = null;

/** Reads and checks every setting from `env`; throws a ConfigError naming each bad one. */
export function parseSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const out: Record<string, unknown> = {};
  const problems: string[] = [];
  const bad = (name: string, s: Prop) => problems.push(`${name}=${JSON.stringify(env[name])}: must be ${allowed(s)}`);
  for (const [name, schema] of Object.entries(Settings.properties) as [string, Prop][]) {
    const raw = env[name];
    if (raw === undefined || raw === '') {
      if (schema.default !== undefined) out[name] = schema.default;
      continue;
    }
    const v = raw.trim();
    if (schema.type === 'integer') {
      if (!/^[+-]?[0-9]+$/.test(v)) bad(name, schema);
      else out[name] = Number(v);
    } else if (schema.type === 'boolean') {
      const b = BOOLS[v.toLowerCase()];
      if (b === undefined) bad(name, schema);
      else out[name] = b;
    } else out[name] = v;
  }
  validate ??= new Ajv({ allErrors: true, strict: false, strictNumbers: true }).compile(Settings);
  if (!validate(out)) {
    const seen = new Set(problems.map((p) => p.slice(0, p.indexOf('='))));
    for (const e of validate.errors ?? []) {
      const name = e.instancePath.slice(1);
      if (!name || seen.has(name)) continue;
      seen.add(name);
      bad(name, Settings.properties[name as keyof Settings] as Prop);
    }
  }
  if (out.TRUST_PROXY !== undefined) {
    try {
      compileTrust(out.TRUST_PROXY as string);
    } catch (e) {
      problems.push(`TRUST_PROXY=${JSON.stringify(env.TRUST_PROXY)}: ${(e as Error).message}`);
    }
  }
  if (problems.length > 0) {
    // In the order the settings are declared (and the README lists them).
    const order = (p: string) => SETTING_NAMES.indexOf(p.slice(0, p.indexOf('=')) as keyof Settings);
    throw new ConfigError(problems.sort((a, b) => order(a) - order(b)));
  }
  return out as Settings;
}

/**
 * The token buckets of a customer's ingest quotas (per gateway replica): bursts of twice the
 * request rate and four times the byte rate, the latter at least the largest request.
 */
export function ingestRates(requestsPerS: number, bytesPerS: number, largestBody: number) {
  return {
    requests: { perS: requestsPerS, burst: 2 * requestsPerS },
    bytes: { perS: bytesPerS, burst: Math.max(4 * bytesPerS, largestBody) },
  };
}

/** The settings, shaped by what reads them. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env) {
  const s = parseSettings(env);
  const ports = {
    nats: s.NATS_PORT,
    redis: s.REDIS_PORT,
    postgres: s.PG_PORT,
    clickhouseHttp: s.CLICKHOUSE_HTTP_PORT,
    clickhouseTcp: s.CLICKHOUSE_TCP_PORT,
  };
  const trustProxy: TrustProxy = compileTrust(s.TRUST_PROXY);
  return {
    dataDir: resolve(s.DATA_DIR),
    ports,
    // Where the servers are. Unset: the project-local servers started by `npm start` on loopback.
    natsUrl: s.NATS_URL ?? `nats://127.0.0.1:${ports.nats}`,
    databaseUrl: s.DATABASE_URL ?? `postgres://postgres@127.0.0.1:${ports.postgres}/fleet`,
    redisUrl: s.REDIS_URL ?? `redis://127.0.0.1:${ports.redis}/0`,
    clickhouseUrl: s.CLICKHOUSE_URL ?? `http://127.0.0.1:${ports.clickhouseHttp}`,
    clickhouseDatabase: s.CLICKHOUSE_DB,
    clickhouseUser: s.CLICKHOUSE_USER,
    clickhousePassword: s.CLICKHOUSE_PASSWORD,
    // Replicated servers (lib/store/schema.ts renders the DDL ON CLUSTER); '' = one server.
    clickhouseCluster: s.CLICKHOUSE_CLUSTER,
    // Names that keep two deployments (or two test files) apart on shared servers.
    streamName: s.STREAM_NAME,
    subjectPrefix: s.SUBJECT_PREFIX,
    redisPrefix: s.REDIS_PREFIX,
    redisWaitReplicas: s.REDIS_WAIT_REPLICAS,
    streamMaxBytes: s.STREAM_MAX_BYTES,
    // The heartbeat lane (docs/architecture.md "Lanes"): heartbeats are small; JetStream reserves
    // a stream's max_bytes on its servers' disks, so the lane does not ask for the main stream's.
    heartbeatStreamMaxBytes: s.STREAM_HEARTBEAT_MAX_BYTES,
    streamReplicas: s.STREAM_REPLICAS,
    // Ingest partitions (lib/contract/messages.ts ingestPartitions): 1 keeps the unpartitioned names.
    streamPartitions: s.STREAM_PARTITIONS,
    // Behind proxies: which hops to trust for the client address (lib/infra/client-address.ts); the
    // same rule in the gateway and the api.
    trustProxy,

    gateway: {
      host: s.GATEWAY_HOST,
      port: s.GATEWAY_PORT,
      allowUwsFallback: s.UWS_ALLOW_FALLBACK,
      faultInjection: s.GATEWAY_FAULT_INJECTION,
      uwsModule: s.UWS_MODULE,
      bodyTimeoutMs: s.BODY_TIMEOUT_MS,
      bodyLimit: s.BODY_LIMIT_BYTES,
      maxItems: s.MAX_ITEMS,
      batchBodyLimit: s.BATCH_BODY_LIMIT_BYTES,
      json: { maxDepth: s.JSON_MAX_DEPTH, maxNodes: s.JSON_MAX_NODES },
      rateLimit: s.RATE_LIMIT_PER_S,
      rateBurst: s.RATE_LIMIT_BURST,
      customerRate: ingestRates(s.QUOTA_INGEST_REQUESTS_PER_S, s.QUOTA_INGEST_BYTES_PER_S, s.BATCH_BODY_LIMIT_BYTES).requests,
      customerBytes: ingestRates(s.QUOTA_INGEST_REQUESTS_PER_S, s.QUOTA_INGEST_BYTES_PER_S, s.BATCH_BODY_LIMIT_BYTES).bytes,
      // Rejection log: per source (remote address) this many rows per second, then counted only.
      rejectionLogRate: s.REJECTION_LOG_RATE_PER_S,
      rejectionLogBurst: s.REJECTION_LOG_BURST,
      publishTimeoutMs: s.PUBLISH_TIMEOUT_MS,
      publishMaxReports: s.PUBLISH_MAX_REPORTS,
      publishMaxBytes: s.PUBLISH_MAX_BYTES,
      publishMaxInflight: s.PUBLISH_MAX_INFLIGHT,
      queueShare: { fromPercent: s.QUEUE_SHARE_FROM_PERCENT, sharePercent: s.QUEUE_SHARE_PERCENT },
      shutdownGraceMs: s.SHUTDOWN_GRACE_MS,
    },
    worker: {
      processes: s.WORKERS,
      // /healthz, /readyz and /metrics (workers/health.ts); 0 = off.
      httpPort: s.WORKER_HTTP_PORT,
      httpHost: s.WORKER_HTTP_HOST,
      // Messages pending while this worker has waited this long for one: a stall (logged, counted,
      // not ready, the pull restarted: workers/ingest-consumer.ts).
      stallTimeoutMs: s.WORKER_STALL_TIMEOUT_MS,
      healthIntervalMs: s.WORKER_HEALTH_INTERVAL_MS,
      consumerName: s.CONSUMER_NAME,
      batchMaxMessages: s.WORKER_BATCH_MESSAGES,
      // A gateway message holds up to 512 reports: a batch is also capped by bytes (16 MiB, about
      // 80k heartbeats). Larger batches share one upsert per instance among more reports.
      batchMaxBytes: s.WORKER_BATCH_BYTES,
      batchWaitMs: s.WORKER_BATCH_WAIT_MS,
      // Batches one worker applies at once (overlaps one batch's database waits with the next).
      concurrency: s.WORKER_CONCURRENCY,
      // Which streams this worker pulls (docs/architecture.md "Lanes"): a fleet can give heartbeats
      // workers of their own, so that no report of another kind shares their CPU.
      lanes: [...new Set(s.WORKER_LANES.split(','))] as ('reports' | 'heartbeats')[],
      // Which partitions (docs/architecture.md "Partitions"): null, every one; else these numbers.
      partitions: s.WORKER_PARTITIONS === '' ? null : [...new Set(s.WORKER_PARTITIONS.split(',').map(Number))],
      ackWaitS: s.ACK_WAIT_S,
      // A report that waits for an outage is retried after 0.5 s, 1 s, 2 s, … at most this long
      // apart, for as long as the outage lasts (never dead-lettered for it).
      retryMaxMs: s.WORKER_RETRY_MAX_MS,
      // Heartbeats that change nothing skip Postgres (workers/heartbeat-state.ts).
      pgHeartbeatIntervalS: s.PG_HEARTBEAT_INTERVAL_S,
      idCacheSize: s.WORKER_ID_CACHE,
    },
    api: {
      host: s.API_HOST,
      port: s.API_PORT,
      // HS256 key for dashboard sessions. Every api replica needs the same one; `npm start`
      // generates one into $DATA_DIR/jwt-secret. Unset elsewhere: a random key per process.
      jwtSecret: s.JWT_SECRET,
      jwtTtlS: s.JWT_TTL_S,
      cookieSecure: s.COOKIE_SECURE,
      loginMaxFailuresPerAccount: s.LOGIN_MAX_FAILURES_PER_ACCOUNT,
      loginMaxFailuresPerAddress: s.LOGIN_MAX_FAILURES_PER_ADDRESS,
      loginWindowS: s.LOGIN_WINDOW_S,
      loginAccountSlowdownAfter: s.LOGIN_ACCOUNT_SLOWDOWN_AFTER,
      loginAccountDelayS: s.LOGIN_ACCOUNT_DELAY_S,
      loginAccountDelayMaxS: s.LOGIN_ACCOUNT_DELAY_MAX_S,
      loginHashConcurrency: s.LOGIN_HASH_CONCURRENCY,
      loginHashQueue: s.LOGIN_HASH_QUEUE,
      streamRecheckMs: s.SESSION_STREAM_RECHECK_MS,
      invitationTtlS: s.INVITATION_TTL_S,
      passwordResetTtlS: s.PASSWORD_RESET_TTL_S,
      passwordResetMaxPerHour: s.PASSWORD_RESET_MAX_PER_HOUR,
      passwordMinLength: s.PASSWORD_MIN_LENGTH,
      // Links in e-mails (invitations, resets) point here.
      publicDashboardUrl: (s.PUBLIC_DASHBOARD_URL ?? `http://${s.API_HOST}:${s.API_PORT}`).replace(/\/+$/, ''),
      // Base URLs the OpenAPI document (/openapi.json) names as servers. PUBLIC_API_URL `/` means
      // "where the document came from"; set both to what clients use behind the proxy.
      publicApiUrl: s.PUBLIC_API_URL,
      publicGatewayUrl: s.PUBLIC_GATEWAY_URL ?? `http://${s.GATEWAY_HOST}:${s.GATEWAY_PORT}`,
      whitelistMaxRules: s.WHITELIST_MAX_RULES,
      sseKeepaliveS: s.SSE_KEEPALIVE_S,
      sseMaxClients: s.SSE_MAX_CLIENTS,
      // Counts per colour (api/light-counts.ts): cached per customer and filter, single flight.
      countCacheMs: s.API_COUNT_CACHE_MS,
      // Who a credential is (api/principal-cache.ts): rows kept at most this long, emptied by NOTIFY.
      principalCacheMs: s.API_PRINCIPAL_CACHE_MS,
      // Slow clients (api/server.ts): a request's headers and body must arrive within
      // requestTimeoutMs (408 otherwise); a connection with a request in progress may be silent for
      // idleTimeoutMs; an idle keep-alive connection stays open keepAliveTimeoutMs (longer than a
      // proxy's idle timeout in front, or the proxy may reuse a connection the api just closed).
      requestTimeoutMs: s.API_REQUEST_TIMEOUT_MS,
      idleTimeoutMs: s.API_IDLE_TIMEOUT_MS,
      keepAliveTimeoutMs: s.API_KEEPALIVE_TIMEOUT_MS,
    },
    // Traffic light (docs/architecture.md "Traffic light").
    light: {
      expiryListener: s.LIGHT_EXPIRY_LISTENER,
      sweepIntervalMs: s.LIGHT_SWEEP_INTERVAL_MS,
      sweepBatch: s.LIGHT_SWEEP_BATCH,
      // One worker counts instances per colour this often (workers/light-census.ts); every worker exports the counts.
      censusIntervalMs: s.LIGHT_CENSUS_INTERVAL_MS,
    },
    webhooks: {
      // The wait before retry n is WEBHOOK_BACKOFF_MS * 2^(n-1).
      attempts: s.WEBHOOK_ATTEMPTS,
      backoffMs: s.WEBHOOK_BACKOFF_MS,
      timeoutMs: s.WEBHOOK_TIMEOUT_MS,
      concurrency: s.WEBHOOK_CONCURRENCY,
      maxPerCustomer: s.WEBHOOKS_PER_CUSTOMER,
      // Internal addresses webhooks may reach after all (on-premises receivers), as comma-separated
      // CIDRs; empty: public addresses only (lib/infra/egress.ts).
      allowCidrs: s.WEBHOOK_ALLOW_CIDRS,
    },
    // A revocation is effective on every replica within this interval (plus one query).
    cacheRefreshMs: s.CACHE_REFRESH_MS,
    tokenUsageFlushMs: s.TOKEN_USAGE_FLUSH_MS,
    licence: { sweepMs: s.LICENCE_SWEEP_MS },
    // Support contacts by licence tier (GET /api/support-info).
    support: {
      communityUrl: s.SUPPORT_COMMUNITY_URL,
      email: s.SUPPORT_EMAIL,
      phone: s.SUPPORT_PHONE,
      phoneHours: s.SUPPORT_PHONE_HOURS,
      contactName: s.SUPPORT_CONTACT_NAME,
      contactEmail: s.SUPPORT_CONTACT_EMAIL,
      contactPhone: s.SUPPORT_CONTACT_PHONE,
    },
    heartbeatTimeoutS: s.HEARTBEAT_TIMEOUT_S,
    // Per-instance timeouts and the late colour (lib/store/timeout-rules.ts).
    heartbeatLatePercent: s.HEARTBEAT_LATE_PERCENT,
    timeoutRuleMinS: s.TIMEOUT_RULE_MIN_S,
    warningWindowS: s.WARNING_WINDOW_S,
    idempotencyTtlS: s.IDEMPOTENCY_TTL_S,
    // An agent's `ts` is stored where it lies within this window around the receive time; outside
    // it the report is still kept (receive time) and flagged as clock skew (docs/api.md "Agent clocks").
    tsPlausiblePastS: s.TS_PLAUSIBLE_PAST_S,
    tsPlausibleFutureS: s.TS_PLAUSIBLE_FUTURE_S,
    // Host metrics: how long the gateway remembers a client_metric_id for exact duplicate counts
    // (storage is idempotent forever; see docs/api.md).
    metricDedupTtlS: s.METRIC_DEDUP_TTL_S,
    // Chunked artifact uploads (lib/store/artifacts.ts): chunks live in the JetStream object store
    // `${STREAM_NAME}_ARTIFACTS`, upload records in the KV bucket `${STREAM_NAME}_UPLOADS`.
    artifacts: {
      chunkSize: s.ARTIFACT_CHUNK_BYTES,
      maxSize: s.ARTIFACT_MAX_BYTES,
      uploadTtlS: s.ARTIFACT_UPLOAD_TTL_S,
      sweepMs: s.ARTIFACT_SWEEP_MS,
      expiryGraceS: s.ARTIFACT_EXPIRY_GRACE_S,
      storeMaxBytes: s.ARTIFACT_STORE_MAX_BYTES,
      maxInflightBytes: s.ARTIFACT_INFLIGHT_BYTES,
    },
    // Per-customer quotas: these are the defaults; a system administrator overrides them per customer
    // (Postgres customer_quotas, `fleet quota set`). The model is lib/store/quotas.ts.
    quotas: {
      artifactBytes: s.QUOTA_ARTIFACT_BYTES,
      artifactMaxBytes: s.ARTIFACT_MAX_BYTES,
      streamConnections: s.QUOTA_STREAM_CONNECTIONS,
      webhooks: s.WEBHOOKS_PER_CUSTOMER,
      whitelistRules: s.WHITELIST_MAX_RULES,
      timeoutRules: s.TIMEOUT_RULES_PER_CUSTOMER,
      ingestRequestsPerS: s.QUOTA_INGEST_REQUESTS_PER_S,
      ingestBytesPerS: s.QUOTA_INGEST_BYTES_PER_S,
      maintenanceWindows: s.MAINTENANCE_WINDOWS_PER_CUSTOMER,
    },
    commands: {
      // A queued command not delivered within queueTtlS expires; a delivered one not acked within
      // ackTimeoutS times out. Both deadlines are fixed when the state is entered.
      queueTtlS: s.COMMAND_QUEUE_TTL_S,
      ackTimeoutS: s.COMMAND_ACK_TIMEOUT_S,
      sweepMs: s.COMMAND_SWEEP_MS,
      // NATS hints make changes visible at once; this is the safety net for a lost hint.
      resyncMs: s.COMMAND_RESYNC_MS,
      maxOpenPerInstance: s.COMMAND_MAX_OPEN,
      argsMaxBytes: s.COMMAND_ARGS_MAX_BYTES,
    },
    // Data retention (workers/retention.ts, lib/store/retention.ts): days per table, 0 = forever.
    retention: {
      sweepMs: s.RETENTION_SWEEP_MS,
      clickhouse: {
        heartbeats: s.RETENTION_HEARTBEATS_DAYS,
        diagnostics: s.RETENTION_DIAGNOSTICS_DAYS,
        status_history: s.RETENTION_STATUS_HISTORY_DAYS,
        light_events: s.RETENTION_LIGHT_EVENTS_DAYS,
        host_metrics: s.RETENTION_HOST_METRICS_DAYS,
        ingest_rejections: s.RETENTION_INGEST_REJECTIONS_DAYS,
      },
      postgres: {
        webhook_deliveries: s.RETENTION_WEBHOOK_DELIVERIES_DAYS,
        commands: s.RETENTION_COMMANDS_DAYS,
        invitations: s.RETENTION_INVITATIONS_DAYS,
        sessions: s.RETENTION_SESSIONS_DAYS,
        password_resets: s.RETENTION_PASSWORD_RESETS_DAYS,
      },
      // Artifacts uploaded longer ago than this (days; 0 = forever): deleted by the same job.
      artifacts: s.RETENTION_ARTIFACTS_DAYS,
    },
    // Offboarding (lib/store/offboarding.ts, workers/offboarding.ts).
    offboarding: {
      graceS: s.OFFBOARD_GRACE_S,
      sweepMs: s.OFFBOARD_SWEEP_MS,
    },
    // Maintenance windows (lib/store/maintenance.ts; the job maintenance-occurrences of workers/main.ts).
    maintenance: {
      sweepMs: s.MAINTENANCE_SWEEP_MS,
    },
    // E-mail notifications of traffic-light changes (workers/mail-digest.ts).
    notifications: {
      digestIntervalS: s.MAIL_DIGEST_INTERVAL_S,
      ratePerS: s.MAIL_RATE_PER_S,
      maxLines: s.MAIL_DIGEST_MAX_LINES,
      tickMs: s.MAIL_DIGEST_TICK_MS,
    },
    // E-mail (lib/infra/mail.ts); host '' = not configured.
    mail: {
      host: s.SMTP_HOST,
      port: s.SMTP_PORT,
      secure: s.SMTP_SECURE,
      starttls: s.SMTP_STARTTLS,
      user: s.SMTP_USER,
      password: s.SMTP_PASSWORD,
      timeoutMs: s.SMTP_TIMEOUT_MS,
      from: s.MAIL_FROM,
    },
    logLevel: s.LOG_LEVEL,
  };
}

export type Config = ReturnType<typeof loadConfig>;

/**
 * For entry points: the configuration, or one line per bad setting on stderr and exit code 2
 * (no stack trace: the operator needs the variable, not the code path).
 */
export function configOrExit(program: string, env: NodeJS.ProcessEnv = process.env): Config {
  try {
    return loadConfig(env);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const p of e.problems) process.stderr.write(`${program}: invalid configuration: ${p}\n`);
    process.exit(2);
  }
}
