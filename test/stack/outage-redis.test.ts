// Redis refusing writes, on a Redis of the test's own: `maxmemory` reached with the `noeviction`
// policy (every write answered `OOM command not allowed …`, Lua scripts too), and read-only (made
// the replica of a primary that is not there, as a failover gone wrong leaves it: every write
// answered `READONLY …`, its data kept since it never synchronised). Reports
// acknowledged during the fault wait, the worker says so, none is dead-lettered, and afterwards
// each is stored exactly once (test/helpers/outage.ts).
import t from 'tap';
import { testStack } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { OwnRedis } from '../helpers/redis-server.js';
import { outageTest } from '../helpers/outage.js';

const redis = new OwnRedis(await freePort());
await redis.start();
t.teardown(() => redis.destroy());

const s = await testStack(t, 'outredis', { redisUrl: redis.url, worker: false, api: false, env: { WORKER_RETRY_MAX_MS: '1000' } });
const port = await freePort();
const worker = { proc: await s.startWorker({ WORKER_HTTP_PORT: String(port) }), url: `http://127.0.0.1:${port}` };

t.test('Redis out of memory (noeviction): the reports wait until it takes writes again, then are stored once', async (t) => {
  await outageTest(t, s, worker, 'oom', 4, {
    dependency: 'redis',
    reason: /Redis error OOM/,
    start: () => redis.config('maxmemory', '1'),
    end: () => redis.config('maxmemory', '0'),
  });
});

t.test('Redis read-only (a replica of a primary that is not there): the reports wait until it is a primary again, then are stored once', async (t) => {
  const nowhere = await freePort();
  await outageTest(t, s, worker, 'readonly', 4, {
    dependency: 'redis',
    reason: /Redis error READONLY/,
    start: async () => {
      await redis.command('REPLICAOF', '127.0.0.1', String(nowhere));
    },
    end: async () => {
      await redis.command('REPLICAOF', 'NO', 'ONE');
    },
  });
});
