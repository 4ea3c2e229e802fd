// Heartbeat keys written by the Lua script (workers/heartbeat-keys.ts), against the real Redis:
// a key is created with its value and expiry, extended by a newer report, never shortened by an
// older one, and more keys than one script call takes are all written.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { createRedis } from '../lib/db/redis.js';
import { extendHeartbeatKeys } from '../workers/heartbeat-keys.js';

const redis = createRedis(process.env.REDIS_URL!);
const prefix = `test-hbkeys-${randomUUID()}:`;
/** Absolute expiry of a key, ms since the epoch (Redis 7's PEXPIRETIME). */
const expiresAt = async (key: string) => Number(await redis.call('PEXPIRETIME', key));
t.teardown(async () => {
  const keys = await redis.keys(`${prefix}*`);
  for (let i = 0; i < keys.length; i += 500) await redis.del(...keys.slice(i, i + 500));
  await redis.quit();
});

t.test('a new key gets the value and the absolute expiry', async (t) => {
  const at = Date.now() + 300_000;
  await extendHeartbeatKeys(redis, [{ key: `${prefix}a`, value: 'cust-1', expireAtMs: at }]);
  t.equal(await redis.get(`${prefix}a`), 'cust-1');
  t.equal(await expiresAt(`${prefix}a`), at);
});

t.test('a newer expiry extends the key; an older one never shortens it', async (t) => {
  const at = Date.now() + 300_000;
  await extendHeartbeatKeys(redis, [{ key: `${prefix}b`, value: 'cust-1', expireAtMs: at }]);
  await extendHeartbeatKeys(redis, [{ key: `${prefix}b`, value: 'cust-1', expireAtMs: at + 60_000 }]);
  t.equal(await expiresAt(`${prefix}b`), at + 60_000, 'extended');
  await extendHeartbeatKeys(redis, [{ key: `${prefix}b`, value: 'cust-1', expireAtMs: at - 60_000 }]);
  t.equal(await expiresAt(`${prefix}b`), at + 60_000, 'an older report left it alone');
});

t.test('more keys than one script call takes (2,500) are all written', async (t) => {
  const at = Date.now() + 300_000;
  const keys = Array.from({ length: 2500 }, (_, i) => ({ key: `${prefix}many:${i}`, value: `c${i % 7}`, expireAtMs: at + i }));
  await extendHeartbeatKeys(redis, keys);
  t.equal((await redis.keys(`${prefix}many:*`)).length, 2500);
  t.equal(await redis.get(`${prefix}many:2498`), 'c6', 'its own value (2498 % 7)');
  t.equal(await expiresAt(`${prefix}many:2499`), at + 2499);
  t.equal(await expiresAt(`${prefix}many:1000`), at + 1000, 'first key of the second call');
});
