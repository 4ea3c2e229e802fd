// Worker process: applies what the gateways queued. Reads top-down: config -> Postgres, ClickHouse,
// Redis, NATS -> stream and durable consumer -> consume -> graceful shutdown (finish the batch in
// hand, ack it, stop). Any number of replicas may run; they share the durable consumer.
import { createServer } from 'node:http';
import { loadConfig } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { createMetrics } from '../lib/metrics.js';
import { createPool } from '../lib/db/postgres.js';
import { createClickHouse } from '../lib/db/clickhouse.js';
import { createRedis } from '../lib/db/redis.js';
import { connectNats, ensureStreams, ensureConsumer } from '../lib/db/nats.js';
import { subjects } from '../lib/messages.js';
import { IngestConsumer } from './ingest-consumer.js';
import { CommandExpiry } from './command-expiry.js';
import { CommandHints } from '../lib/commands.js';

const cfg = loadConfig();
const log = createLogger('worker', cfg.logLevel);
const metrics = createMetrics('worker');

const pool = createPool(cfg.databaseUrl, 6, 'fleet-worker');
const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });
const redis = createRedis(cfg.redisUrl);
redis.on('error', (e) => log.warn({ err: e }, 'redis error'));
const nc = await connectNats(cfg.natsUrl, `worker-${process.pid}`);
const jsm = await nc.jetstreamManager();
await ensureStreams(jsm, cfg);
await ensureConsumer(jsm, cfg.streamName, cfg.worker.consumerName, cfg.worker.ackWaitS);
const js = nc.jetstream();
const subj = subjects(cfg.subjectPrefix);
const hints = new CommandHints(subj.control('commands'), (e) => log.warn({ err: e }, 'command hint not published'));
hints.attach(nc);

const consumer = new IngestConsumer(
  await js.consumers.get(cfg.streamName, cfg.worker.consumerName),
  js,
  {
    pool,
    ch,
    redis,
    redisPrefix: cfg.redisPrefix,
    heartbeatTimeoutMs: cfg.heartbeatTimeoutS * 1000,
    idempotencyTtlS: cfg.idempotencyTtlS,
    ackTimeoutS: cfg.commands.ackTimeoutS,
    commandsChanged: (refs) => hints.publish(refs),
  },
  {
    reportsSubject: subj.reports,
    rejectionsSubject: subj.rejections,
    deadLetterSubject: subj.deadLetter,
    batchMaxMessages: cfg.worker.batchMaxMessages,
    batchWaitMs: cfg.worker.batchWaitMs,
    maxDeliver: cfg.worker.maxDeliver,
  },
  log,
  metrics,
);
consumer.start();

// Agent commands that waited too long: expired (queued) or timed_out (delivered, no ack).
const expiry = new CommandExpiry({
  pool,
  redisUrl: cfg.redisUrl,
  redisPrefix: cfg.redisPrefix,
  everyMs: cfg.commands.sweepMs,
  log,
  commandsChanged: (refs) => hints.publish(refs),
});
// In the background: with Redis unreachable, BullMQ waits for it, and the ingest consumer must not.
expiry.start().catch((e) => log.error({ err: e }, 'command expiry sweep not scheduled'));

let server: ReturnType<typeof createServer> | null = null;
if (cfg.worker.httpPort > 0) {
  server = createServer((req, res) => {
    if (req.url === '/metrics') {
      void metrics.text().then((t) => res.writeHead(200, { 'Content-Type': metrics.contentType }).end(t));
    } else if (req.url === '/healthz') {
      res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"ok":true}');
    } else res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"detail":"not found"}');
  }).listen(cfg.worker.httpPort, '127.0.0.1');
}
log.info({ stream: cfg.streamName, consumer: cfg.worker.consumerName }, 'consuming');

let closing = false;
async function shutdown(why: string): Promise<void> {
  if (closing) return;
  closing = true;
  log.info({ why }, 'shutting down: finishing the batch in hand');
  await consumer.stop();
  await expiry.stop();
  server?.close();
  await nc.drain().catch(() => {});
  await Promise.allSettled([pool.end(), ch.close(), redis.quit()]);
  log.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
if (process.env.FLEET_SUPERVISED === '1') process.stdin.on('end', () => void shutdown('supervisor gone')).resume();
