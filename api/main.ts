// Read-API process: dashboard, auth and queries, apart from the ingest path. Reads top-down:
// config -> Postgres, ClickHouse, Redis, NATS (in the background) -> Fastify app from the route
// table -> listen -> graceful close.
import { WhitelistChecks } from './whitelist-check.js';
import { configOrExit } from '../lib/infra/config.js';
import { Lifecycle, drainNats } from '../lib/infra/shutdown.js';
import { createLogger } from '../lib/infra/log.js';
import { createMetrics } from '../lib/infra/metrics.js';
import { createPool } from '../lib/infra/postgres.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { createRedis } from '../lib/infra/redis.js';
import { Sessions } from './session.js';
import { connectNats, warnDurability, type NatsConnection } from '../lib/infra/nats.js';
import { LightHub } from './light-stream.js';
import { buildApi } from './server.js';
import { ArtifactStore } from '../lib/store/artifacts.js';
import { subjects } from '../lib/contract/messages.js';
import { CommandHints } from '../lib/store/commands.js';
import { TimeoutRuleHints } from '../lib/store/timeout-rules.js';
import { DeadLetters } from '../lib/store/dead-letters.js';

const cfg = configOrExit('api');
const log = createLogger('api', cfg.logLevel);
const life = new Lifecycle(log, cfg.gateway.shutdownGraceMs + 15_000);
const metrics = createMetrics('api');
// The api reads by index, from data that is in memory: planned with the cost of a random read
// near a sequential one (random_page_cost 1.1, as for SSDs), a list filtered to a colour reads that
// colour's entries of instance_lights_customer_light and probes each instance, instead of
// scanning the customer's instances in order (at 100,000 instances, 2,000 of them red: 16 ms
// instead of 47-139 ms; docs/architecture.md "Read path").
const pool = createPool(cfg.databaseUrl, 10, 'fleet-api', { random_page_cost: 1.1 });
const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });

const redis = createRedis(cfg.redisUrl);
redis.on('error', (e) => log.warn({ err: e }, 'redis error'));
const sessions = new Sessions(cfg.api.jwtSecret, cfg.api.jwtTtlS);
if (sessions.ephemeral) log.warn('JWT_SECRET not set: sessions are signed with a random key of this process only (they end with it, and other replicas reject them)');

// NATS, connected in the background so the api starts (and serves everything else) while NATS is
// away: it feeds the live stream of traffic-light changes (one subscription per process), carries
// the agent-command hints to the gateways (their periodic re-read covers a hint not sent), the
// artifact downloads (which answer 503 until the store is reachable) and the dead-letter routes.
const hints = new CommandHints(subjects(cfg.subjectPrefix).control('commands'), (e) => log.warn({ err: e }, 'command hint not published'));
const ruleHints = new TimeoutRuleHints(subjects(cfg.subjectPrefix).control('timeout-rules'), (e) => log.warn({ err: e }, 'timeout-rule hint not published'));
const sseEvents = metrics.counter('fleet_api_light_stream_events_total');
const lights = new LightHub(log, cfg.api.sseKeepaliveS, cfg.api.sseMaxClients, (n) => sseEvents.inc(n));
let nc: NatsConnection | null = null;
let artifacts: ArtifactStore | null = null;
let deadLetters: DeadLetters | null = null;
void (async () => {
  const c = await connectNats(cfg.natsUrl, `api-${process.pid}`);
  nc = c;
  if (life.closing) return void c.close();
  deadLetters = new DeadLetters(c, cfg);
  lights.attach(c, cfg.subjectPrefix);
  hints.attach(c);
  ruleHints.attach(c);
  await warnDurability(c, await c.jetstreamManager(), cfg, log).catch((e) => log.warn({ err: e }, 'NATS durability check failed'));
  for (;;) {
    try {
      artifacts = await ArtifactStore.open(c, cfg);
      return;
    } catch (e) {
      log.warn({ err: e }, 'artifact store not reachable; retrying in 2 s');
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
})().catch((e) => log.error({ err: e }, 'NATS connection failed: no live traffic-light stream, no downloads'));

const whitelistChecks = new WhitelistChecks();
const app = await buildApi({ cfg, log, metrics, pool, ch, redis, sessions, artifacts: () => artifacts, lights, hints, ruleHints, deadLetters: () => deadLetters, whitelistChecks });
await app.listen({ host: cfg.api.host, port: cfg.api.port });
const addr = app.server.address();
log.info({ host: cfg.api.host, port: typeof addr === 'object' && addr ? addr.port : cfg.api.port }, 'listening');

life.onShutdown(async (why) => {
  log.info({ why }, 'shutting down');
  await app.close();
  await whitelistChecks.close();
  await drainNats(nc as NatsConnection | null);
  await Promise.allSettled([pool.end(), ch.close(), redis.quit()]);
});

