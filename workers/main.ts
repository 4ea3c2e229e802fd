// Worker process: applies what the gateways queued. Reads top-down: config -> Postgres, ClickHouse,
// Redis, NATS -> stream and durable consumer -> consume -> graceful shutdown (finish the batch in
// hand, ack it, stop). Any number of replicas may run; they share the durable consumer.
import { configOrExit } from '../lib/config.js';
import { Lifecycle, drainNats } from '../lib/shutdown.js';
import { createLogger } from '../lib/log.js';
import { createMetrics } from '../lib/metrics.js';
import { createPool } from '../lib/db/postgres.js';
import { createClickHouse } from '../lib/db/clickhouse.js';
import { createRedis } from '../lib/db/redis.js';
import { connectNats, ensureStreams, ensureConsumer, warnDurability } from '../lib/db/nats.js';
import { subjects } from '../lib/messages.js';
import { IngestConsumer } from './ingest-consumer.js';
import { Readiness, probeDependencies, serveHealth } from './health.js';
import { reportChecker } from '../lib/report-check.js';
import { WhitelistCache } from './whitelist-cache.js';
import { ArtifactStore } from '../lib/artifacts.js';
import { sweepUploads } from './artifact-expiry.js';
import { Horizon, LightEventSink, ReportLights } from './traffic-light.js';
import { ExpiryListener, ensureExpiryEvents } from './light-expiry.js';
import { LightSweep } from './light-sweep.js';
import { Webhooks } from './webhooks.js';
import type { LightEvent } from '../lib/traffic-light.js';
import { sweepCommands } from './command-expiry.js';
import { CommandHints } from '../lib/commands.js';
import { QUEUES, scheduledJob, removeLegacyJobs } from '../lib/jobs.js';
import { reconcileLicences } from '../lib/licences.js';

const cfg = configOrExit('worker');
const log = createLogger('worker', cfg.logLevel);
const metrics = createMetrics('worker');

// A worker rides out any server going away: it waits, retries, says so in /readyz, and never
// exits for it (a stray rejection from a client library during an outage included).
const life = new Lifecycle(log, cfg.gateway.shutdownGraceMs + 15_000);
process.on('unhandledRejection', (e) => log.error({ err: e }, 'unhandled rejection (kept running)'));
const readiness = new Readiness();
readiness.set('startup', 'starting');
// Up before anything else: /readyz says what the start-up is waiting for.
const server = cfg.worker.httpPort > 0 ? serveHealth(cfg.worker.httpHost, cfg.worker.httpPort, readiness, metrics, log) : null;

/** Start-up steps wait for their server: retried with a growing pause until it answers. */
async function retrying<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (life.closing) throw e;
      readiness.set('startup', `waiting for ${what}`);
      log.warn({ err: e, attempt }, `start-up: ${what} failed; retrying`);
      await new Promise((r) => setTimeout(r, Math.min(500 * attempt, 10_000)));
    }
  }
}

const pool = createPool(cfg.databaseUrl, 6, 'fleet-worker');
const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });
const redis = createRedis(cfg.redisUrl);
redis.on('error', (e) => log.warn({ err: e }, 'redis error'));
const stopProbes = probeDependencies(readiness, { pool, ch, redis }, cfg.worker.healthIntervalMs, log);
const nc = await connectNats(cfg.natsUrl, `worker-${process.pid}`);
const jsm = await nc.jetstreamManager();
await retrying('the JetStream stream and consumer', async () => {
  await ensureStreams(jsm, cfg);
  await ensureConsumer(jsm, cfg.streamName, cfg.worker.consumerName, cfg.worker.ackWaitS);
});
await warnDurability(nc, jsm, cfg, log).catch((e) => log.warn({ err: e }, 'NATS durability check failed'));
const js = nc.jetstream();
const subj = subjects(cfg.subjectPrefix);
const whitelist = new WhitelistCache(pool, cfg.cacheRefreshMs, (e) => log.warn({ err: e }, 'whitelist refresh failed'));
await retrying('the whitelist (Postgres)', () => whitelist.start());

// Traffic light (docs/architecture.md "Traffic light"): changes recorded by reports, by Redis
// expiry events and by the sweep; delivered to ClickHouse, NATS (live stream) and webhooks.
const lightParams = { heartbeatTimeoutS: cfg.heartbeatTimeoutS, warningWindowS: cfg.warningWindowS };
const lightChanges = metrics.counter('worker_light_changes_total', 'Traffic-light changes this worker recorded', ['cause', 'to']);
const countLights = (events: LightEvent[]) => events.forEach((e) => lightChanges.labels(e.cause, e.to).inc());
const bull = createRedis(cfg.redisUrl, { bullmq: true });
bull.on('error', (e) => log.warn({ err: e }, 'redis (jobs) error'));
const webhooks = new Webhooks(bull, cfg.redisPrefix, pool, cfg.webhooks, log);
await retrying('the webhook queue (Redis)', () => webhooks.start());
const sink = new LightEventSink(pool, ch, nc, cfg.subjectPrefix, webhooks, log);
const horizonLag = metrics.gauge('worker_light_horizon_lag_ms', 'How far behind the wall clock silence is judged (oldest report still queued)');
const horizon = new Horizon(jsm, cfg.streamName, log, (ms) => horizonLag.set(ms));
const sweep = new LightSweep(pool, sink, lightParams, horizon, { batch: cfg.light.sweepBatch }, countLights);
let expiry: ExpiryListener | null = null;
if (cfg.light.expiryListener) {
  await retrying('Redis expiry events', () => ensureExpiryEvents(redis, log));
  expiry = new ExpiryListener(cfg.redisUrl, cfg.redisPrefix, pool, sink, lightParams, horizon, cfg.light.sweepBatch, log, countLights);
  await retrying('the expiry listener (Redis)', () => expiry!.start());
} else {
  log.info('expiry listener off (LIGHT_EXPIRY_LISTENER=0): the sweep alone turns silent instances red');
}
/** Half the NATS server's default per-client buffer (max_pending, 64 MiB). */
const PULL_BUFFER_BYTES = 32 * 1024 * 1024;
const hints = new CommandHints(subj.control('commands'), (e) => log.warn({ err: e }, 'command hint not published'));
hints.attach(nc);

// Opened before consuming starts: its JetStream requests must not queue behind a backlog's first batches.
const artifactStore = await retrying('the artifact store (JetStream)', () => ArtifactStore.open(nc, cfg));

// Messages per pull: that many of the largest message a gateway publishes (a full group of
// PUBLISH_MAX_BYTES, or one report of a body at BODY_LIMIT_BYTES) must fit in half the server's
// per-client buffer (64 MiB), or NATS cuts the worker off as a slow consumer (workers/pull.ts).
const largestMessage = Math.min(nc.info?.max_payload ?? Infinity, Math.max(cfg.gateway.publishMaxBytes, cfg.gateway.bodyLimit + 64 * 1024));
const pullMaxMessages = Math.max(1, Math.min(cfg.worker.batchMaxMessages, Math.floor(PULL_BUFFER_BYTES / largestMessage)));

const consumer = new IngestConsumer(
  await retrying('the durable consumer', () => js.consumers.get(cfg.streamName, cfg.worker.consumerName)),
  js,
  {
    pool,
    ch,
    redis,
    redisPrefix: cfg.redisPrefix,
    heartbeatTimeoutMs: cfg.heartbeatTimeoutS * 1000,
    idempotencyTtlS: cfg.idempotencyTtlS,
    tsWindow: { pastMs: cfg.tsPlausiblePastS * 1000, futureMs: cfg.tsPlausibleFutureS * 1000 },
    whitelist,
    lights: new ReportLights(sink, lightParams, horizon, countLights),
    ackTimeoutS: cfg.commands.ackTimeoutS,
    commandsChanged: (refs) => hints.publish(refs),
  },
  reportChecker(cfg.gateway.maxItems),
  {
    reportsSubject: subj.reports,
    rejectionsSubject: subj.rejections,
    deadLetterSubject: subj.deadLetter,
    batchMaxMessages: cfg.worker.batchMaxMessages,
    batchMaxBytes: cfg.worker.batchMaxBytes,
    batchWaitMs: cfg.worker.batchWaitMs,
    maxDeliver: cfg.worker.maxDeliver,
    concurrency: Math.max(1, cfg.worker.concurrency),
    pull: { maxMessages: pullMaxMessages, expiresMs: 5000 },
    stallMs: cfg.worker.stallTimeoutMs,
    watchdogMs: Math.min(5000, Math.max(250, cfg.worker.stallTimeoutMs / 4)),
  },
  log,
  metrics,
);
consumer.start();
// The consumer's own state (stalls; NATS unreachable) joins the dependency probes in /readyz.
const consumerHealth = setInterval(() => readiness.set('consumer', consumer.problem()), 1000);
consumerHealth.unref();
// Scheduled jobs (lib/jobs.ts): each runs every interval on one worker replica.
const jobCtx = { connection: bull, redisPrefix: cfg.redisPrefix, log };
const jobs = [
  // The traffic light: what Redis expiry events missed (workers/light-sweep.ts).
  scheduledJob(jobCtx, { queue: QUEUES.lightSweep, everyMs: cfg.light.sweepIntervalMs, run: async () => {
    const r = await sweep.sweep();
    return { changes: r.changes, redelivered: r.redelivered };
  } }),
  // Grace periods start and end as machines age out of the 30-day window or come back.
  scheduledJob(jobCtx, { queue: QUEUES.licenceSweep, everyMs: cfg.licence.sweepMs, run: async () => ({ changed: await reconcileLicences(pool) }) }),
  // Incomplete artifact uploads expire.
  scheduledJob(jobCtx, { queue: QUEUES.artifactExpiry, everyMs: cfg.artifacts.sweepMs, run: () =>
    sweepUploads(artifactStore, pool, { now: Date.now(), graceMs: cfg.artifacts.expiryGraceS * 1000, keepCompletedMs: cfg.artifacts.uploadTtlS * 1000 }),
  }),
  // Agent commands that waited too long: expired (queued) or timed_out (delivered, no ack).
  scheduledJob(jobCtx, { queue: QUEUES.commandExpiry, everyMs: cfg.commands.sweepMs, run: async () => {
    const r = await sweepCommands(pool);
    if (r.refs.length > 0) hints.publish(r.refs);
    return { expired: r.expired, timed_out: r.timedOut };
  } }),
];
await retrying('the scheduled jobs (Redis)', async () => {
  await removeLegacyJobs(jobCtx);
  for (const j of jobs) await j.start();
});

readiness.set('startup', null);
log.info({ stream: cfg.streamName, consumer: cfg.worker.consumerName, pullMaxMessages }, 'consuming');

life.onShutdown(async (why) => {
  log.info({ why }, 'shutting down: finishing the batch in hand');
  await consumer.stop();
  clearInterval(consumerHealth);
  stopProbes();
  whitelist.stop();
  await Promise.allSettled([expiry?.stop(), webhooks.stop(), ...jobs.map((j) => j.stop())]);
  server?.close();
  await drainNats(nc);
  await Promise.allSettled([pool.end(), ch.close(), redis.quit(), bull.quit()]);
});

