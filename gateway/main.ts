// Gateway process: token + payload validation in front of NATS JetStream. Reads top-down:
// config -> uWS (native or refuse) -> Postgres (tokens) -> NATS (stream) -> routes -> listen ->
// graceful shutdown (stop accepting, settle every report in flight, drain NATS, exit).
import { Events } from 'nats';
import { configOrExit } from '../lib/infra/config.js';
import { Lifecycle, drainNats } from '../lib/infra/shutdown.js';
import { createLogger } from '../lib/infra/log.js';
import { createMetrics } from '../lib/infra/metrics.js';
import { createPool } from '../lib/infra/postgres.js';
import { connectNats, ensureStreams, warnDurability } from '../lib/infra/nats.js';
import { subjects, ingestPartitions, partitionOf } from '../lib/contract/messages.js';
import { loadUws, UwsFallbackError, type us_listen_socket } from './http/uws.js';
import { TokenCache } from './token-cache.js';
import { TokenUsage } from '../lib/store/token-usage.js';
import { LicenceGate } from './licence-gate.js';
import { BatchPublisher, IngestPublisher } from './publisher.js';
import { QueueShares } from './queue-share.js';
import { RejectionLog } from './rejection-log.js';
import { registerRoutes } from './http/routes.js';
import { HelpCoverage } from './help-coverage.js';
import { createRedis } from '../lib/infra/redis.js';
import { ArtifactStore } from '../lib/store/artifacts.js';
import { PendingCommands } from './pending-commands.js';
import { IdempotencyRegister } from './idempotency.js';
import { QuotaCache } from '../lib/store/quotas.js';
import { ArtifactUsage } from '../lib/store/artifact-usage.js';
import { JETSTREAM_ATTEMPT_MS, startupStep } from '../lib/infra/startup.js';

const cfg = configOrExit('gateway');
const log = createLogger('gateway', cfg.logLevel);

let uwsLoaded;
try {
  uwsLoaded = loadUws(cfg.gateway.allowUwsFallback, cfg.gateway.uwsModule);
} catch (e) {
  if (e instanceof UwsFallbackError) {
    log.fatal(e.message);
    process.exit(78); // EX_CONFIG
  }
  throw e;
}
const { uws, native } = uwsLoaded;
if (!native) log.warn('running on the pure-JS uWS fallback (UWS_ALLOW_FALLBACK=1): expect a fraction of the native throughput');

const metrics = createMetrics('gateway');
// The last net under the routes' error boundaries (gateway/http/request.ts `guarded`): an error no
// route caught is logged and counted, and the gateway keeps serving every other request rather
// than ending them all. Each one is a bug (fleet_gateway_internal_errors_total{route="process"}).
const internalErrors = metrics.counter('fleet_gateway_internal_errors_total');
function internalError(route: string, e: unknown): void {
  internalErrors.labels(route).inc();
  log.error({ err: e, route }, 'internal error outside any request: the gateway goes on serving');
}
process.on('uncaughtException', (e) => internalError('process', e));
process.on('unhandledRejection', (e) => internalError('process', e));
const pool = createPool(cfg.databaseUrl, 4, 'fleet-gateway');
// Token uses (last_used_at): noted in memory by the hot path, written in the background.
const tokenUsageWrites = metrics.counter('fleet_token_last_used_updates_total');
const tokenUsage = new TokenUsage({
  pool,
  flushMs: cfg.tokenUsageFlushMs,
  onFlush: (written, skipped) => {
    tokenUsageWrites.labels('written').inc(written);
    tokenUsageWrites.labels('skipped').inc(skipped);
  },
  onError: (e) => log.warn({ err: e }, 'writing token last_used_at failed; retried at the next flush'),
});
tokenUsage.start();
const tokens = new TokenCache(pool, cfg.cacheRefreshMs, (e) => log.warn({ err: e }, 'token refresh failed'), tokenUsage);
await tokens.start();
const help = new HelpCoverage(pool, cfg.cacheRefreshMs, (e) => log.warn({ err: e }, 'help-text coverage refresh failed'));
await help.start();
const licences = new LicenceGate(pool, cfg.cacheRefreshMs, (e) => log.warn({ err: e }, 'licence refresh failed'));
await licences.start();
// Quotas per customer (overrides and stored artifact bytes), polled like the tokens.
const quotas = new QuotaCache(pool, cfg, cfg.cacheRefreshMs, (e) => log.warn({ err: e }, 'quota refresh failed'));
await quotas.start();

const subj = subjects(cfg.subjectPrefix);
const nc = await connectNats(cfg.natsUrl, `gateway-${process.pid}`);
const js = nc.jetstream();
let streamOk = false;
async function checkStream(): Promise<void> {
  try {
    await startupStep('the stream check', async () => ensureStreams(await nc.jetstreamManager(), cfg), { attemptMs: JETSTREAM_ATTEMPT_MS, stop: () => true });
    streamOk = true;
  } catch (e) {
    streamOk = false;
    log.error({ err: e }, 'stream check failed');
  }
}
/** A JetStream start-up step: retried until it succeeds, an attempt that hangs abandoned after JETSTREAM_ATTEMPT_MS (lib/infra/startup.ts). */
const step = <T>(what: string, fn: () => Promise<T>) =>
  startupStep(what, fn, { attemptMs: JETSTREAM_ATTEMPT_MS, onRetry: (e, attempt) => log.warn({ err: e, attempt }, `start-up: ${what} failed; retrying`) });
await checkStream();
await startupStep('the NATS durability check', async () => warnDurability(nc, await nc.jetstreamManager(), cfg, log), { attemptMs: JETSTREAM_ATTEMPT_MS, stop: () => true }).catch((e) =>
  log.warn({ err: e }, 'NATS durability check failed'),
);
// Artifact uploads: upload records (KV) and chunks (object store) in JetStream.
const artifacts = await step('the artifact store (JetStream)', () => ArtifactStore.open(nc, cfg));
// Host metrics: the register of client_metric_ids (one round trip per metrics request); the
// Idempotency-Key register (one round trip per request that carries a key); artifact uploads: the
// reservations against the quota artifact_bytes (one script call per artifact-init).
const redis = createRedis(cfg.redisUrl);
const artifactUsage = new ArtifactUsage(redis, cfg.redisPrefix);
redis.on('error', (e) => log.warn({ err: e }, 'redis error'));

// Open agent commands in memory (answers to heartbeats and status reports carry them).
const commands = new PendingCommands({
  pool,
  nc,
  subject: subj.control('commands'),
  resyncMs: cfg.commands.resyncMs,
  metrics,
  onError: (e) => log.warn({ err: e }, 'agent command refresh failed'),
});
await commands.start();

const publishHist = metrics.histogram('fleet_gateway_publish_duration_seconds');
const groupHist = metrics.histogram('fleet_gateway_publish_group_reports');
const publishFailed = metrics.counter('fleet_gateway_publish_failed_reports_total');
const publishStats = {
  published: (n: number, _bytes: number, ms: number) => {
    publishHist.observe(ms / 1000);
    groupHist.observe(n);
  },
  failed: (n: number, reason: string) => {
    publishFailed.inc(n);
    log.warn({ reports: n, reason }, 'publish failed');
  },
  settleThrew: (e: unknown) => internalError('publisher', e),
};
const laneOptions = {
  timeoutMs: cfg.gateway.publishTimeoutMs,
  maxReports: cfg.gateway.publishMaxReports,
  maxBytes: cfg.gateway.publishMaxBytes,
  maxInflight: cfg.gateway.publishMaxInflight,
};
// Two lanes per partition (lib/contract/messages.ts): heartbeats never share a message or a queue
// with other reports, and a machine's reports go to its partition's streams.
const partitions = ingestPartitions(cfg.streamName, cfg.subjectPrefix, cfg.streamPartitions);
// While a stream fills up, no customer takes more than its share of it (gateway/queue-share.ts).
const shareRefusals = metrics.counter('fleet_gateway_queue_share_refusals_total');
const shares = new QueueShares(cfg.gateway.queueShare, (stream) => shareRefusals.labels(stream).inc());
const publisher = new IngestPublisher(
  partitions.map((p) => ({
    reports: new BatchPublisher(nc, js, { ...laneOptions, subject: p.subjects.reports, streamName: p.streams.reports }, publishStats),
    heartbeats: new BatchPublisher(nc, js, { ...laneOptions, subject: p.subjects.heartbeats, streamName: p.streams.heartbeats }, publishStats),
  })),
  shares,
);
shares.start(await step('the JetStream manager', () => nc.jetstreamManager()), publisher.streamNames);
publisher.connected = !nc.isClosed();

void (async () => {
  for await (const s of nc.status()) {
    if (s.type === Events.Disconnect) {
      publisher.connected = false;
      log.warn('NATS disconnected: answering 503 until it is back');
    } else if (s.type === Events.Reconnect) {
      publisher.connected = true;
      log.info('NATS reconnected');
      void checkStream();
    }
  }
})();

// A rejection goes to the partition of its customer and source address: a flood from one source
// fills one partition's share of the log, never every partition.
const rejectionSubject = (r: { customer_id: string; remote: string }) => partitions[partitionOf(r.customer_id, r.remote, partitions.length)]!.subjects.rejections;
const rejections = new RejectionLog(nc, rejectionSubject, cfg.gateway.rejectionLogRate, cfg.gateway.rejectionLogBurst, () => publisher.connected);
const rejectionsDropped = metrics.counter('fleet_gateway_rejection_log_dropped_total');
const readyGauge = metrics.gauge('fleet_gateway_ready');
let droppedReported = 0;
metrics.onScrape(() => {
  // The rejection log keeps a running total; the counter takes what was added since the last scrape.
  rejectionsDropped.inc(rejections.droppedTotal - droppedReported);
  droppedReported = rejections.droppedTotal;
  readyGauge.set(publisher.connected && streamOk ? 1 : 0);
});

const life = new Lifecycle(log, cfg.gateway.shutdownGraceMs + 15_000);
const app = uws.App();
registerRoutes(app, {
  cfg,
  log,
  metrics,
  tokens,
  publisher,
  rejections,
  help,
  licences,
  redis,
  artifacts,
  quotas,
  artifactUsage,
  commands,
  idempotency: new IdempotencyRegister(redis, cfg.redisPrefix, cfg.idempotencyTtlS),
  isReady: () => publisher.connected && streamOk && !life.closing,
  isClosing: () => life.closing,
});

const listenSocket: us_listen_socket = await new Promise((resolve, reject) =>
  app.listen(cfg.gateway.host, cfg.gateway.port, (s) => (s ? resolve(s) : reject(new Error(`cannot listen on ${cfg.gateway.host}:${cfg.gateway.port}`)))),
);
const port = uws.us_socket_local_port(listenSocket as never);
log.info({ host: cfg.gateway.host, port, native }, 'listening');

life.onShutdown(async (why) => {
  log.info({ why, outstanding: publisher.outstanding }, 'shutting down: no new connections, settling reports in flight');
  uws.us_listen_socket_close(listenSocket);
  const grace = new Promise((r) => setTimeout(r, cfg.gateway.shutdownGraceMs).unref());
  await Promise.race([publisher.idle(), grace]);
  rejections.close();
  tokens.stop();
  shares.stop();
  help.stop();
  licences.stop();
  quotas.stop();
  commands.stop();
  await tokenUsage.stop();
  await drainNats(nc);
  await pool.end().catch(() => {});
  await redis.quit().catch(() => {});
});

