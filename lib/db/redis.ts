// Redis connection and the key names the service uses, in one place.
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

export function redisKeys(prefix: string) {
  return {
    /** Present while the instance's heartbeat is fresh; PX = timeout from the receive time. */
    heartbeat: (instanceId: string) => `${prefix}hb:${instanceId}`,
    heartbeatPrefix: `${prefix}hb:`,
    /** First receive time of a report sent with an Idempotency-Key (24 h). */
    idempotency: (reportId: string) => `${prefix}idem:${reportId}`,
  };
}
