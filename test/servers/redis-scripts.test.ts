// A Lua command (luaCommand) used for the first time in the same tick as another command on an
// automatically pipelining connection: ioredis used to crash the process ("results[i] is not
// iterable": the pending pipeline was made before the command was defined). Seen when a worker
// started under load (test/cluster/failover.test.ts). createRedis defines every command first.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { createRedis, luaCommand } from '../../lib/infra/redis.js';

const countKeys = luaCommand<number>('testCountKeys', 'return #KEYS');
const redis = createRedis(process.env.REDIS_URL ?? 'redis://127.0.0.1:26379/0');
t.teardown(() => redis.quit());

t.test('first use of a Lua command beside other commands in one tick', async (t) => {
  const key = `test:scripts:${randomUUID()}`;
  // All in one tick, before the connection's first pipeline has run.
  const [set, n, got, del] = await Promise.all([redis.set(key, 'v'), countKeys(redis, 2, key, `${key}:b`), redis.get(key), redis.del(key)]);
  t.equal(set, 'OK');
  t.equal(n, 2);
  t.equal(got, 'v');
  t.equal(del, 1);
});
