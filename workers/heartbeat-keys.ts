// Heartbeat keys in Redis: one per instance, expiring at (receive time + heartbeat timeout); the
// expiry turns the traffic light red (workers/light-expiry.ts). An older report never
// shortens a newer key, so batches applied out of order or twice leave the same expiry.
//
// One script call per 1,000 instances instead of two commands per instance: a draining worker
// spent 12 % of its CPU building and sending 20,000 ioredis commands per batch (bench/README.md).
import { luaCommand, type Redis } from '../lib/db/redis.js';

/**
 * KEYS[i]      heartbeat key of instance i
 * ARGV[2i - 1] its value (the customer id)
 * ARGV[2i]     its expiry time, ms since the epoch
 * Returns the number of keys handled.
 *
 * The keys of one call may hash to different slots: a Redis Cluster is not supported (one
 * primary, with replicas for failover, is the deployment in docs/operations.md).
 */
const EXTEND_HEARTBEATS = `
for i = 1, #KEYS do
  local at = ARGV[2 * i]
  if not redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'PXAT', at, 'NX') then
    redis.call('PEXPIREAT', KEYS[i], at, 'GT')
  end
end
return #KEYS
`;

const extendHeartbeats = luaCommand<number>('extendHeartbeats', EXTEND_HEARTBEATS);
const CHUNK = 1000;

export interface HeartbeatKey {
  key: string;
  value: string;
  expireAtMs: number;
}

/** Sets or extends every key to its expiry time (never earlier than it is). */
export async function extendHeartbeatKeys(redis: Redis, keys: HeartbeatKey[]): Promise<void> {
  const calls: Promise<number>[] = [];
  for (let i = 0; i < keys.length; i += CHUNK) {
    const part = keys.slice(i, i + CHUNK);
    const args: (string | number)[] = part.map((k) => k.key);
    for (const k of part) args.push(k.value, k.expireAtMs);
    calls.push(extendHeartbeats(redis, part.length, ...args));
  }
  await Promise.all(calls);
}
