// The duplicate register of host-metric ids (gateway/metrics.ts): one Lua call marks every id of a
// request instead of one SET command each. With 100 records per request the pipeline of 100
// ioredis commands capped a gateway near 730 requests/s (bench/README.md).
import { chunks, luaCommand, sameSlot, type Redis } from '../lib/infra/redis.js';

/**
 * KEYS[i]  register key of record i
 * ARGV[1]  the value (receive time, ms)
 * ARGV[2]  time to live, seconds
 * Returns per key 1 when this call set it (new), 0 when it was there already (duplicate).
 */
const MARK_NEW = `
local out = {}
for i = 1, #KEYS do
  if redis.call('SET', KEYS[i], ARGV[1], 'EX', ARGV[2], 'NX') then out[i] = 1 else out[i] = 0 end
end
return out
`;

const markMetricIds = luaCommand<number[]>('markMetricIds', MARK_NEW);

/** Marks `keys` as received; resolves with how many were new (set by this call). */
export async function markNew(redis: Redis, keys: string[], value: string, ttlS: number): Promise<number> {
  // One call per slot's keys in a cluster (the keys carry their group's tag: lib/infra/redis.ts).
  // At most 1,000 keys a call (lib/infra/redis.ts LUA_MAX_ARGS).
  const calls = sameSlot(redis, keys)
    .flatMap((idx) => chunks(idx, 1000))
    .map((idx) => markMetricIds(redis, idx.length, ...idx.map((i) => keys[i]!), value, ttlS));
  let fresh = 0;
  for (const res of await Promise.all(calls)) for (const v of res) fresh += v;
  return fresh;
}
