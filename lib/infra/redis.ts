// Redis connection and the key names the service uses, in one place.
import { Redis } from 'ioredis';

export { Redis };

/** Every Lua command of the project (luaCommand), defined on each connection createRedis makes. */
const scripts = new Map<string, string>();

export function createRedis(url: string, opts: { lazyConnect?: boolean; bullmq?: boolean } = {}): Redis {
  const redis = new Redis(url, {
    lazyConnect: opts.lazyConnect ?? false,
    // BullMQ requires null here for its blocking connections.
    maxRetriesPerRequest: opts.bullmq ? null : 3,
    enableAutoPipelining: !opts.bullmq,
  });
  // Defined before any command: an automatic pipeline copies the connection's commands when it is
  // made, so one defined later is missing from a pipeline already pending in the same tick, and
  // ioredis then crashes the process ("results[i] is not iterable", seen when a worker started
  // under load in the rolling-restart test).
  for (const [name, lua] of scripts) redis.defineCommand(name, { lua });
  return redis;
}

/**
 * A Lua script as a command of `redis` (ioredis runs it by EVALSHA, loading it once). Declared at
 * module level, so every connection createRedis makes afterwards has it from the start; on any
 * other connection it is defined the first time it is called. Callers pass the number of keys,
 * then keys and args.
 */
export function luaCommand<R>(name: string, lua: string): (redis: Redis, numKeys: number, ...args: (string | number)[]) => Promise<R> {
  scripts.set(name, lua);
  return (redis, numKeys, ...args) => {
    const r = redis as unknown as Record<string, (n: number, ...a: (string | number)[]) => Promise<R>>;
    if (typeof r[name] !== 'function') redis.defineCommand(name, { lua });
    return r[name]!(numKeys, ...args);
  };
}

export function redisKeys(prefix: string) {
  return {
    /** Present while the instance's heartbeat is fresh; PX = timeout from the receive time. */
    heartbeat: (instanceId: string) => `${prefix}hb:${instanceId}`,
    heartbeatPrefix: `${prefix}hb:`,
    /**
     * Hash: the newest heartbeat of an instance and what Postgres holds of it (lib/store/live-heartbeats.ts,
     * workers/heartbeat-state.ts); expires a while after the heartbeat key.
     */
    heartbeatState: (instanceId: string) => `${prefix}hs:${instanceId}`,
    heartbeatStatePrefix: `${prefix}hs:`,
    /** Sorted set: instance id -> when its newest heartbeat is due in Postgres (ms). */
    heartbeatDue: `${prefix}hbdue`,
    /** First receive time of a report sent with an Idempotency-Key (24 h). */
    idempotency: (reportId: string) => `${prefix}idem:${reportId}`,
    /** The body an Idempotency-Key was first used with (a hash, gateway/idempotency.ts; 24 h). */
    idempotencyBody: (reportId: string) => `${prefix}idemb:${reportId}`,
    /** Hash: instances per stored traffic-light colour, and `at` when counted (workers/light-census.ts). */
    lightCensus: `${prefix}light-census`,
    /** A host metric's client_metric_id, per customer and machine, once durably queued (gateway/metrics.ts; METRIC_DEDUP_TTL_S). */
    metric: (id: string) => `${prefix}metric:${id}`,
    /** Wrong current passwords of a user's password changes (api/handlers/sessions.ts; LOGIN_WINDOW_S). */
    passwordChangeFailures: (userId: string) => `${prefix}pwchange:${userId}`,
    /** Password-reset mails asked for an address (its hash), within the hour (api/handlers/sessions.ts). */
    passwordResetRequests: (emailHash: string) => `${prefix}pwreset:${emailHash}`,
    /** The login guard's counters: `addr:`, `pair:`, `acct:`, `next:`, `dev:` (api/login-guard.ts). */
    login: (what: string) => `${prefix}login:${what}`,
    /** Hash: the steps of `fleet restore` done for one backup (lib/store/backup.ts; a re-run skips them). */
    restoreProgress: (backupId: string) => `${prefix}restore:${backupId}`,
  };
}
