// Redis connection and the key names the service uses, in one place.
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';

export { Redis };

export function createRedis(url: string, opts: { lazyConnect?: boolean; bullmq?: boolean } = {}): Redis {
  return new Redis(url, {
    lazyConnect: opts.lazyConnect ?? false,
    // BullMQ requires null here for its blocking connections.
    maxRetriesPerRequest: opts.bullmq ? null : 3,
    enableAutoPipelining: !opts.bullmq,
  });
}

/**
 * A Lua script, run by EVALSHA (the script's text goes over the wire only when Redis does not have
 * it yet: NOSCRIPT, then EVAL, which also loads it). Callers pass the number of keys, then keys and
 * args. Not an ioredis custom command (defineCommand): with auto-pipelining, a command defined on
 * its first call is missing from the pipeline ioredis already opened in that tick, and the
 * TypeError it throws there is uncaught and ends the process (a worker died so under load).
 * EVALSHA and EVAL exist on every pipeline.
 */
export function luaCommand<R>(name: string, lua: string): (redis: Redis, numKeys: number, ...args: (string | number)[]) => Promise<R> {
  const sha = createHash('sha1').update(lua).digest('hex');
  return async (redis, numKeys, ...args) => {
    try {
      return (await redis.evalsha(sha, numKeys, ...args)) as R;
    } catch (e) {
      if (!String((e as Error).message).startsWith('NOSCRIPT')) throw e;
      return (await redis.eval(lua, numKeys, ...args)) as R;
    }
  };
}

export function redisKeys(prefix: string) {
  return {
    /** Present while the instance's heartbeat is fresh; PX = timeout from the receive time. */
    heartbeat: (instanceId: string) => `${prefix}hb:${instanceId}`,
    heartbeatPrefix: `${prefix}hb:`,
    /**
     * Hash: the newest heartbeat of an instance and what Postgres holds of it (lib/live-heartbeats.ts,
     * workers/heartbeat-state.ts); expires a while after the heartbeat key.
     */
    heartbeatState: (instanceId: string) => `${prefix}hs:${instanceId}`,
    heartbeatStatePrefix: `${prefix}hs:`,
    /** Sorted set: instance id -> when its newest heartbeat is due in Postgres (ms). */
    heartbeatDue: `${prefix}hbdue`,
    /** First receive time of a report sent with an Idempotency-Key (24 h). */
    idempotency: (reportId: string) => `${prefix}idem:${reportId}`,
  };
}
