// Read-API process: dashboard, auth and queries, apart from the ingest path. Reads top-down:
// config -> Postgres, ClickHouse -> Fastify app from the route table -> listen -> graceful close.
import { loadConfig } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { createMetrics } from '../lib/metrics.js';
import { createPool } from '../lib/db/postgres.js';
import { createClickHouse } from '../lib/db/clickhouse.js';
import { createRedis } from '../lib/db/redis.js';
import { Sessions } from './session.js';
import { buildApi } from './server.js';
import { connectNats, type NatsConnection } from '../lib/db/nats.js';
import { subjects } from '../lib/messages.js';
import { CommandHints } from '../lib/commands.js';

const cfg = loadConfig();
const log = createLogger('api', cfg.logLevel);
const metrics = createMetrics('api');
const pool = createPool(cfg.databaseUrl, 10, 'fleet-api');
const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });

const redis = createRedis(cfg.redisUrl);
redis.on('error', (e) => log.warn({ err: e }, 'redis error'));
const sessions = new Sessions(cfg.api.jwtSecret, cfg.api.jwtTtlS);
if (sessions.ephemeral) log.warn('JWT_SECRET not set: sessions are signed with a random key of this process only (they end with it, and other replicas reject them)');

// NATS carries only hints to the gateways (agent commands queued or cancelled): connected in the
// background, so the read API starts and serves without it; the gateways' periodic re-read covers
// any hint not sent.
const hints = new CommandHints(subjects(cfg.subjectPrefix).control('commands'), (e) => log.warn({ err: e }, 'command hint not published'));
let nc: NatsConnection | null = null;
connectNats(cfg.natsUrl, `api-${process.pid}`).then(
  (c) => {
    nc = c;
    hints.attach(c);
  },
  (e) => log.warn({ err: e }, 'NATS unavailable: agent-command hints are not sent (gateways pick changes up at their next re-read)'),
);

const app = await buildApi({ cfg, log, metrics, pool, ch, redis, sessions, hints });
await app.listen({ host: cfg.api.host, port: cfg.api.port });
const addr = app.server.address();
log.info({ host: cfg.api.host, port: typeof addr === 'object' && addr ? addr.port : cfg.api.port }, 'listening');

let closing = false;
async function shutdown(why: string): Promise<void> {
  if (closing) return;
  closing = true;
  log.info({ why }, 'shutting down');
  await app.close();
  await (nc as NatsConnection | null)?.drain().catch(() => {});
  await Promise.allSettled([pool.end(), ch.close(), redis.quit()]);
  log.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
if (process.env.FLEET_SUPERVISED === '1') process.stdin.on('end', () => void shutdown('supervisor gone')).resume();
