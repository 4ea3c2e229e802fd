// lib/db/redis.ts luaCommand against the test Redis: a script's first call in the same tick as other
// commands of an auto-pipelined connection (ioredis had opened that tick's pipeline before a custom
// command was defined, threw an uncaught TypeError there, and the worker died), and a Redis that
// lost its scripts (NOSCRIPT: the script is sent again).
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { createRedis, luaCommand } from '../lib/db/redis.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:26379/0';
const key = `t:lua:${randomBytes(4).toString('hex')}`;
const redis = createRedis(url);
t.teardown(async () => {
  await redis.del(key);
  await redis.quit();
});

t.test('first call of a script in the same tick as other commands; after SCRIPT FLUSH', async (t) => {
  // A script of its own (its text unique to this run), so Redis cannot know it yet.
  const incr = luaCommand<number>(`incr${randomBytes(4).toString('hex')}`, `-- ${randomBytes(8).toString('hex')}\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])`);
  const [a, b, c] = await Promise.all([redis.set(key, '1'), incr(redis, 1, key, 2), incr(redis, 1, key, 3)]);
  t.equal(a, 'OK');
  t.same([b, c], [3, 6], 'run in order, in the pipeline of that tick');
  await redis.script('FLUSH');
  t.equal(await incr(redis, 1, key, 4), 10, 'NOSCRIPT: sent again');
  t.equal(await incr(redis, 1, key, 5), 15);
  await t.rejects(luaCommand<number>('bad', "return redis.call('NOSUCHCOMMAND')")(redis, 0), /Unknown Redis command|unknown command/i, 'a script error is not swallowed');
});
