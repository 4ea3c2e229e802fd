// Worker process: applies what the gateways queued. Reads top-down: config -> Postgres, ClickHouse,
// Redis, NATS -> stream and durable consumer -> consume -> graceful shutdown (finish the batch in
// hand, ack it, stop). Any number of replicas may run; they share the durable consumer.
import { configOrExit } from '../lib/infra/config.js';
import { Lifecycle, drainNats } from '../lib/infra/shutdown.js';
import { createLogger } from '../lib/infra/log.js';
import { createMetrics } from '../lib/infra/metrics.js';
import { createPool } from '../lib/infra/postgres.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { createRedis } from '../lib/infra/redis.js';
import { connectNats, ensureStreams, ensureConsumer, existingIngestStreams, warnDurability } from '../lib/infra/nats.js';
import { subjects, ingestStreams, partitionOfStream, type Lane } from '../lib/contract/messages.js';
import { IngestConsumer } from './ingest-consumer.js';
import { Readiness, probeDependencies, serveHealth } from './health.js';
import { reportChecker } from '../lib/domain/report-check.js';
import { WhitelistCache } from './whitelist-cache.js';
import { ArtifactStore } from '../lib/store/artifacts.js';
import { sweepUploads } from './artifact-expiry.js';
import { ArtifactUsage } from '../lib/store/artifact-usage.js';
import { Horizon, LightEventSink, ReportLights, type LightParams } from './traffic-light.js';
import { ExpiryListener, ensureExpiryEvents } from './light-expiry.js';
import { LightSweep, type SilenceTimes } from './light-sweep.js';
import { HeartbeatState, HeartbeatFlusher, lookupIdsIn } from './heartbeat-state.js';
import { Webhooks } from './webhooks.js';
import { MailDigests } from './mail-digest.js';
import { Mailer } from '../lib/infra/mail.js';
import { queueMailNotifications } from '../lib/store/mail-notifications.js';
import { applyLightDefaults, TimeoutRuleHints } from '../lib/store/timeout-rules.js';
import type { LightEvent } from '../lib/domain/traffic-light.js';
import { sweepCommands } from './command-expiry.js';
import { CommandHints, type InstanceRef } from '../lib/store/commands.js';
import { QUEUES, scheduledJob, removeLegacyJobs } from './jobs.js';
import { reconcileLicences } from '../lib/store/licences.js';
import { LightCensus } from './light-census.js';
import { DeadLetters } from '../lib/store/dead-letters.js';
import { DEPENDENCIES } from '../lib/infra/storage-errors.js';
import { isNotFound } from '../lib/infra/jetstream-errors.js';
import { runRetention } from './retention.js';
import { LiveCustomers } from './live-customers.js';
import { TableGrowth } from '../lib/store/table-growth.js';
import { runOffboarding } from './offboarding.js';
import { refreshOccurrences } from '../lib/store/maintenance.js';
import { JETSTREAM_ATTEMPT_MS, startupStep } from '../lib/infra/startup.js';

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

/**
 * Start-up steps wait for their server: retried with a growing pause until it answers; a JetStream
 * step's attempt that hangs is abandoned after `attemptMs` (lib/infra/startup.ts).
 */
function retrying<T>(what: string, fn: () => Promise<T>, attemptMs?: number): Promise<T> {
  return startupStep(what, fn, {
    attemptMs,
    stop: () => life.closing,
    onRetry: (e, attempt) => {
      readiness.set('startup', `waiting for ${what}`);
      log.warn({ err: e, attempt }, `start-up: ${what} failed; retrying`);
    },
  });
}

const pool = createPool(cfg.databaseUrl, 6, 'fleet-worker');
const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });
const redis = createRedis(cfg.redisUrl);
redis.on('error', (e) => log.warn({ err: e }, 'redis error'));
const stopProbes = probeDependencies(readiness, { pool, ch, redis }, cfg.worker.healthIntervalMs, log);
const nc = await connectNats(cfg.natsUrl, `worker-${process.pid}`);
const jsm = await nc.jetstreamManager();
// The ingest streams (lib/contract/messages.ts): every partition's main stream and heartbeat lane.
// A worker consumes every one that exists, not only the STREAM_PARTITIONS it was given (below).
const ingestNames: string[] = [];
await retrying('the JetStream stream and consumer', async () => {
  await ensureStreams(jsm, cfg);
  for (const stream of ingestStreams(cfg.streamName, cfg.streamPartitions)) await ensureConsumer(jsm, stream, cfg.worker.consumerName, cfg.worker.ackWaitS);
  for (const stream of await existingIngestStreams(jsm, cfg.streamName)) if (!ingestNames.includes(stream)) ingestNames.push(stream);
}, JETSTREAM_ATTEMPT_MS);
await startupStep('the NATS durability check', () => warnDurability(nc, jsm, cfg, log), { attemptMs: JETSTREAM_ATTEMPT_MS, stop: () => true }).catch((e) =>
  log.warn({ err: e }, 'NATS durability check failed'),
);
const js = nc.jetstream();
const subj = subjects(cfg.subjectPrefix);
const whitelist = new WhitelistCache(pool, cfg.cacheRefreshMs, (e) => log.warn({ err: e }, 'whitelist refresh failed'), log);
await retrying('the whitelist (Postgres)', () => whitelist.start());

// Traffic light (docs/architecture.md "Traffic light"): changes recorded by reports, by Redis
// expiry events and by the sweep; delivered to ClickHouse, NATS (live stream) and webhooks.
const lightParams: LightParams = { warningWindowS: cfg.warningWindowS };
// The defaults of instances without a timeout rule (lib/store/timeout-rules.ts): a changed
// HEARTBEAT_TIMEOUT_S or HEARTBEAT_LATE_PERCENT moves their deadlines before anything is judged.
await retrying('the traffic-light defaults (Postgres)', async () => {
  if (await applyLightDefaults(pool, cfg.heartbeatTimeoutS, cfg.heartbeatLatePercent)) {
    log.info({ timeoutS: cfg.heartbeatTimeoutS, latePercent: cfg.heartbeatLatePercent }, 'traffic-light defaults applied: deadlines of instances without a timeout rule recomputed');
  }
});
const lightChanges = metrics.counter('fleet_worker_light_changes_total');
const countLights = (events: LightEvent[]) => events.forEach((e) => lightChanges.labels(e.cause, e.to).inc());
const bull = createRedis(cfg.redisUrl, { bullmq: true });
bull.on('error', (e) => log.warn({ err: e }, 'redis (jobs) error'));
const webhookDeliveries = metrics.counter('fleet_worker_webhook_deliveries_total');
const webhooks = new Webhooks(bull, cfg.redisPrefix, pool, cfg.webhooks, log, (outcome) => webhookDeliveries.labels(outcome).inc());
await retrying('the webhook queue (Redis)', () => webhooks.start());
// E-mail notifications (workers/mail-digest.ts): changes wait in Postgres for their digests.
const sink = new LightEventSink(pool, ch, nc, cfg.subjectPrefix, webhooks, log, undefined, (events, db) => queueMailNotifications(db, events));
const mailer = new Mailer(cfg.mail, log);
if (!mailer.configured) log.info('SMTP_HOST not set: notification e-mails are written to this log instead of being sent');
const mailDigestOutcomes = metrics.counter('fleet_worker_mail_digests_total');
const digests = new MailDigests(pool, mailer, { intervalS: cfg.notifications.digestIntervalS, ratePerS: cfg.notifications.ratePerS, maxLines: cfg.notifications.maxLines, dashboardUrl: cfg.api.publicDashboardUrl }, log.child({ job: QUEUES.mailDigest }), (o) => mailDigestOutcomes.labels(o).inc());
const horizonLag = metrics.gauge('fleet_worker_light_horizon_lag_seconds');
// Every ingest stream, whichever lanes this worker pulls: the list grows when a partition appears.
const horizon = new Horizon(jsm, ingestNames, log, (ms) => horizonLag.set(ms / 1000));
const reportLights = new ReportLights(sink, lightParams, horizon, countLights);
// Heartbeats that change nothing reach Postgres later, by the flusher (workers/heartbeat-state.ts);
// the expiry listener and the sweep write an instance's pending heartbeat before judging it.
const unreplicated = metrics.counter('fleet_worker_redis_unreplicated_total');
const heartbeats = new HeartbeatState(redis, cfg.redisPrefix, {
  heartbeatTimeoutMs: cfg.heartbeatTimeoutS * 1000,
  latePercent: cfg.heartbeatLatePercent,
  pgIntervalMs: cfg.worker.pgHeartbeatIntervalS * 1000,
  idCacheSize: cfg.worker.idCacheSize,
  lookupIds: lookupIdsIn(pool),
  waitReplicas: cfg.redisWaitReplicas,
  onUnreplicated: (node, got) => {
    unreplicated.inc();
    log.warn({ node, replicas: got, wanted: cfg.redisWaitReplicas }, 'Redis: fewer replicas than REDIS_WAIT_REPLICAS hold the skipped heartbeats; the batch goes on');
  },
});
// A time a heartbeat moves is stored for the sweep only after Postgres's possible lag (lib/domain/traffic-light.ts recheckSql).
lightParams.recheckSlackS = heartbeats.postgresLagMs / 1000;
// Redis's silence times, the sweep's and the listener's candidates (workers/light-sweep.ts).
const silences: SilenceTimes = heartbeats;
const hbUpdates = metrics.counter('fleet_worker_heartbeat_updates_total');
metrics.onScrape(() => {
  hbUpdates.labels('postgres').inc(heartbeats.counts.written);
  hbUpdates.labels('skipped').inc(heartbeats.counts.skipped);
  heartbeats.counts.written = heartbeats.counts.skipped = 0;
});
const flushedTotal = metrics.counter('fleet_worker_heartbeats_flushed_total');
const flusher = new HeartbeatFlusher(pool, heartbeats, reportLights, log, (n) => flushedTotal.inc(n));
// Before silence is judged: the heartbeat keys dropped, the times of heartbeats waiting in Redis read.
const waitingHeartbeats = (ids: string[]) => heartbeats.waiting(ids);
const ruleHints = new TimeoutRuleHints(subj.control('timeout-rules'), (e) => log.warn({ err: e }, 'timeout-rule hint not published'));
ruleHints.attach(nc);
const sweep = new LightSweep(pool, sink, lightParams, horizon, { batch: cfg.light.sweepBatch }, countLights, waitingHeartbeats, (customerId) => ruleHints.publish(customerId), silences);
let expiry: ExpiryListener | null = null;
if (cfg.light.expiryListener) {
  await retrying('Redis expiry events', () => ensureExpiryEvents(redis, log));
  expiry = new ExpiryListener(cfg.redisUrl, cfg.redisPrefix, pool, sink, lightParams, horizon, cfg.light.sweepBatch, log, countLights, waitingHeartbeats, silences);
  await retrying('the expiry listener (Redis)', () => expiry!.start());
} else {
  log.info('expiry listener off (LIGHT_EXPIRY_LISTENER=0): the sweep alone turns silent instances red');
}
/** Half the NATS server's default per-client buffer (max_pending, 64 MiB). */
const PULL_BUFFER_BYTES = 32 * 1024 * 1024;
const hints = new CommandHints(subj.control('commands'), (e) => log.warn({ err: e }, 'command hint not published'));
// A customer's timeout rules changed (the api says so): this worker's copies of them are stale.
TimeoutRuleHints.listen(nc, subj.control('timeout-rules'), (customerId) => heartbeats.rulesChanged(customerId));
hints.attach(nc);

// Opened before consuming starts: its JetStream requests must not queue behind a backlog's first batches.
const artifactStore = await retrying('the artifact store (JetStream)', () => ArtifactStore.open(nc, cfg), JETSTREAM_ATTEMPT_MS);
// Reservations of artifact uploads against the quota artifact_bytes (lib/store/artifact-usage.ts).
const artifactUsage = new ArtifactUsage(redis, cfg.redisPrefix);

// Messages per pull: that many of the largest message a gateway publishes (a full group of
// PUBLISH_MAX_BYTES, or one report of a body at BODY_LIMIT_BYTES) must fit in half the server's
// per-client buffer (64 MiB), or NATS cuts the worker off as a slow consumer (workers/pull.ts).
const largestMessage = Math.min(nc.info?.max_payload ?? Infinity, Math.max(cfg.gateway.publishMaxBytes, cfg.gateway.bodyLimit + 64 * 1024));
const pullMaxMessages = Math.max(1, Math.min(cfg.worker.batchMaxMessages, Math.floor(PULL_BUFFER_BYTES / largestMessage)));

const applyDeps = {
  pool,
  ch,
  redis,
  redisPrefix: cfg.redisPrefix,
  heartbeats,
  idempotencyTtlS: cfg.idempotencyTtlS,
  tsWindow: { pastMs: cfg.tsPlausiblePastS * 1000, futureMs: cfg.tsPlausibleFutureS * 1000 },
  whitelist,
  lights: reportLights,
  artifactUsage,
  // Reports of customers being deleted are dropped (lib/store/offboarding.ts).
  customers: new LiveCustomers(pool),
  // Planner statistics of machines and instances after fast growth (lib/store/table-growth.ts).
  growth: new TableGrowth(pool, log),
  log,
  ackTimeoutS: cfg.commands.ackTimeoutS,
  commandsChanged: (refs: InstanceRef[]) => hints.publish(refs),
};
const checker = reportChecker(cfg.gateway.maxItems);
const consumerOptions = {
  reportsSubject: subj.reports,
  rejectionsSubject: subj.rejections,
  deadLetterSubject: subj.deadLetter,
  batchMaxMessages: cfg.worker.batchMaxMessages,
  batchMaxBytes: cfg.worker.batchMaxBytes,
  batchWaitMs: cfg.worker.batchWaitMs,
  retryMaxMs: cfg.worker.retryMaxMs,
  concurrency: Math.max(1, cfg.worker.concurrency),
  pull: { maxMessages: pullMaxMessages, expiresMs: 5000 },
  stallMs: cfg.worker.stallTimeoutMs,
  watchdogMs: Math.min(5000, Math.max(250, cfg.worker.stallTimeoutMs / 4)),
};
// Two lanes per partition (lib/contract/messages.ts, docs/architecture.md "Lanes", "Partitions"):
// each partition's main stream and its heartbeats' own, pulled side by side, so that no heartbeat
// waits behind a backlog of large reports. WORKER_LANES picks some: a fleet can run workers for
// heartbeats alone; WORKER_PARTITIONS picks partitions. Every ingest stream that exists is
// consumed (ingestNames), unless WORKER_PARTITIONS names some: partitions a
// gateway with a larger STREAM_PARTITIONS made, and the streams of before a change of it, so that
// no accepted report waits for a worker that does not know its stream; the stream watch below
// looks for new ones every 5 s.
interface Pulled {
  lane: Lane;
  partition: string;
  stream: string;
  consumer: IngestConsumer;
}
const pulled: Pulled[] = [];
let consuming = false;
async function pullNewStreams(): Promise<void> {
  for (const stream of ingestNames) {
    const p = partitionOfStream(cfg.streamName, cfg.subjectPrefix, stream);
    if (!p || !cfg.worker.lanes.includes(p.lane) || pulled.some((x) => x.stream === stream)) continue;
    // WORKER_PARTITIONS: a worker of some partitions leaves the others (and the unpartitioned
    // streams) to the workers that pull them.
    if (cfg.worker.partitions && (p.label === 'unpartitioned' || !cfg.worker.partitions.includes(p.partition))) continue;
    const partition = p.label === 'unpartitioned' && cfg.streamPartitions === 1 ? '0' : p.label;
    await ensureConsumer(jsm, stream, cfg.worker.consumerName, cfg.worker.ackWaitS);
    const durable = await js.consumers.get(stream, cfg.worker.consumerName);
    const consumer = new IngestConsumer(
      durable,
      js,
      applyDeps,
      checker,
      { ...consumerOptions, reportsSubject: p.subjects.reports, rejectionsSubject: p.subjects.rejections, lane: p.lane, partition },
      log.child({ lane: p.lane, partition }),
      metrics,
    );
    pulled.push({ lane: p.lane, partition, stream, consumer });
    if (consuming) {
      consumer.start();
      log.info({ stream, lane: p.lane, partition }, 'consuming a new ingest stream');
    }
  }
}
await retrying('the durable consumers', pullNewStreams);
// A dependency is in an outage while a message of either lane waits for it.
const outage = metrics.gauge('fleet_worker_outage');
metrics.onScrape(() => {
  const now = new Set(pulled.flatMap(({ consumer: c }) => c.outages.current().map((o) => o.dependency)));
  for (const d of DEPENDENCIES) outage.labels(d).set(now.has(d) ? 1 : 0);
});
for (const { consumer } of pulled) consumer.start();
consuming = true;
flusher.start();
log.info({ intervalMs: heartbeats.intervalMs, tickMs: heartbeats.tickMs }, 'heartbeats that change nothing reach Postgres within the interval');
// The consumer's own state (stalls, saturation, NATS unreachable) and what its messages wait for
// (an outage: a dependency that refuses them) join the dependency probes in /readyz.
const consumerHealth = setInterval(() => {
  const problems = pulled.map((x) => [x.partition === '0' ? x.lane : `${x.lane} ${x.partition}`, x.consumer.problem()] as const).filter(([, p]) => p !== null);
  readiness.set('consumer', problems.length === 0 ? null : problems.map(([lane, p]) => (pulled.length > 1 ? `${lane}: ${p}` : p)).join('; '));
  const waits = pulled.map(({ consumer: c }) => c.outageProblem()).filter((p) => p !== null);
  readiness.set('outage', waits.length === 0 ? null : [...new Set(waits)].join('; '));
}, 1000);
consumerHealth.unref();
const ready = metrics.gauge('fleet_worker_ready');
metrics.onScrape(() => ready.set(readiness.problem() === null ? 1 : 0));
// The stream's fill level (ingest answers 503 when it reaches STREAM_MAX_BYTES): read every 5 s.
const stream = { bytes: metrics.gauge('fleet_worker_stream_bytes'), max: metrics.gauge('fleet_worker_stream_max_bytes'), messages: metrics.gauge('fleet_worker_stream_messages') };
const readStream = () =>
  Promise.all(
    pulled.map(({ lane, partition, stream: name }) =>
      jsm.streams.info(name).then(
        (i) => {
          stream.bytes.labels(lane, partition).set(i.state.bytes);
          stream.max.labels(lane, partition).set(i.config.max_bytes);
          stream.messages.labels(lane, partition).set(i.state.messages);
        },
        (e) => log.debug({ err: e, stream: name }, 'stream state unknown (NATS)'),
      ),
    ),
  );
// Ingest streams that appeared since (a gateway with a larger STREAM_PARTITIONS): the horizon
// counts them at once, and this worker pulls them.
const findStreams = async () => {
  try {
    const now = await existingIngestStreams(jsm, cfg.streamName);
    for (const name of now) if (!ingestNames.includes(name)) ingestNames.push(name);
    // A stream deleted (an old partition, drained): its consumer stops, the horizon forgets it.
    // Only when the server says so of that stream: a list cut short (a JetStream election) is not
    // a deletion.
    for (const gone of ingestNames.filter((n) => !now.includes(n))) {
      const deleted = await jsm.streams.info(gone).then(
        () => false,
        (e) => isNotFound(e),
      );
      if (!deleted) continue;
      ingestNames.splice(ingestNames.indexOf(gone), 1);
      const i = pulled.findIndex((x) => x.stream === gone);
      if (i < 0) continue;
      const [x] = pulled.splice(i, 1);
      log.info({ stream: gone }, 'an ingest stream was deleted: its consumer stops');
      await x!.consumer.stop();
    }
    await pullNewStreams();
  } catch (e) {
    log.debug({ err: e }, 'ingest streams unknown (NATS)');
  }
};
// Dead letters waiting, per customer: the dead-letter stream's per-subject counts (one request,
// however many dead letters it holds; lib/store/dead-letters.ts), read with the stream's fill level.
const deadLetters = new DeadLetters(nc, cfg);
const waiting = metrics.gauge('fleet_worker_dead_letter_messages');
const readDeadLetters = () =>
  deadLetters.countByCustomer().then(
    (counts) => {
      waiting.reset();
      for (const [customer, n] of counts) waiting.labels(customer).set(n);
    },
    (e) => log.debug({ err: e }, 'dead-letter counts unknown (NATS)'),
  );
void readStream();
void readDeadLetters();
const streamWatch = setInterval(() => void findStreams().then(readStream).then(readDeadLetters), 5000);
streamWatch.unref();
// Instances per traffic-light colour: counted by one worker per interval, served by every worker.
const census = new LightCensus(pool, redis, cfg.redisPrefix, cfg.light.censusIntervalMs);
const instances = metrics.gauge('fleet_worker_instances');
metrics.onScrape(async () => {
  const counts = await census.read().catch(() => undefined);
  if (counts === undefined) return; // Redis away: the last numbers stay
  instances.reset();
  if (counts) for (const [light, n] of Object.entries(counts)) instances.labels(light).set(n);
});
// Scheduled jobs (workers/jobs.ts): each runs every interval on one worker replica.
const retentionRows = metrics.counter('fleet_worker_retention_rows_deleted_total');
const retentionPartitions = metrics.counter('fleet_worker_retention_partitions_dropped_total');
const retentionFailures = metrics.counter('fleet_worker_retention_failures_total');
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
    sweepUploads(artifactStore, pool, { now: Date.now(), graceMs: cfg.artifacts.expiryGraceS * 1000, keepCompletedMs: cfg.artifacts.uploadTtlS * 1000, usage: artifactUsage, log }),
  }),
  // Instances per traffic-light colour (fleet_worker_instances).
  scheduledJob(jobCtx, { queue: QUEUES.lightCensus, everyMs: cfg.light.censusIntervalMs, keep: 2, run: async () => {
    await census.run();
    return {};
  } }),
  // Agent commands that waited too long: expired (queued) or timed_out (delivered, no ack).
  scheduledJob(jobCtx, { queue: QUEUES.commandExpiry, everyMs: cfg.commands.sweepMs, run: async () => {
    const r = await sweepCommands(pool);
    if (r.refs.length > 0) hints.publish(r.refs);
    return { expired: r.expired, timed_out: r.timedOut };
  } }),
  // E-mail digests of traffic-light changes, paced to MAIL_RATE_PER_S (workers/mail-digest.ts).
  scheduledJob(jobCtx, { queue: QUEUES.mailDigest, everyMs: cfg.notifications.tickMs, keep: 5, run: () => digests.run() }),
  // Data past its retention: Postgres rows in chunks, ClickHouse months as partitions (workers/retention.ts).
  scheduledJob(jobCtx, { queue: QUEUES.retention, everyMs: cfg.retention.sweepMs, run: () =>
    runRetention({
      pool,
      ch,
      target: { cluster: cfg.clickhouseCluster, database: cfg.clickhouseDatabase },
      days: cfg.retention,
      artifacts: { store: artifactStore, usage: artifactUsage },
      log: log.child({ job: QUEUES.retention }),
      onRows: (table, n) => retentionRows.labels(table).inc(n),
      onPartition: (table) => retentionPartitions.labels(table).inc(),
      onFailure: (store) => retentionFailures.labels(store).inc(),
    }),
  }),
  // Customers being deleted: everything of them, once OFFBOARD_GRACE_S has passed since the mark (workers/offboarding.ts).
  scheduledJob(jobCtx, { queue: QUEUES.offboarding, everyMs: cfg.offboarding.sweepMs, run: () =>
    runOffboarding({
      pool,
      ch,
      target: { cluster: cfg.clickhouseCluster, database: cfg.clickhouseDatabase },
      redis,
      redisPrefix: cfg.redisPrefix,
      artifacts: artifactStore,
      deadLetters,
      removeWebhookJobs: (ids) => webhooks.removeJobsOf(ids),
      graceS: cfg.offboarding.graceS,
      log: log.child({ job: QUEUES.offboarding }),
    }),
  }),
  // Maintenance windows: every window's occurrences up to 8 days ahead, those ended 8 days ago gone
  // (lib/store/maintenance.ts; the api writes a new window's own at once).
  scheduledJob(jobCtx, { queue: QUEUES.maintenance, everyMs: cfg.maintenance.sweepMs, keep: 5, run: () => refreshOccurrences(pool) }),
];
await retrying('the scheduled jobs (Redis)', async () => {
  await removeLegacyJobs(jobCtx);
  for (const j of jobs) await j.start();
});

readiness.set('startup', null);
log.info({ streams: pulled.map((l) => l.stream), consumer: cfg.worker.consumerName, pullMaxMessages }, 'consuming');

life.onShutdown(async (why) => {
  log.info({ why }, 'shutting down: finishing the batch in hand');
  await Promise.all(pulled.map(({ consumer: c }) => c.stop()));
  await flusher.stop();
  clearInterval(consumerHealth);
  clearInterval(streamWatch);
  stopProbes();
  whitelist.stop();
  digests.stop();
  await Promise.allSettled([expiry?.stop(), webhooks.stop(), ...jobs.map((j) => j.stop())]);
  mailer.close();
  server?.close();
  await drainNats(nc);
  await Promise.allSettled([pool.end(), ch.close(), redis.quit(), bull.quit()]);
});

