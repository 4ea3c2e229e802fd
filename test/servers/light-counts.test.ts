// The api's counts per colour (api/light-counts.ts), cached per customer and filter in an LRU of
// bounded size. More distinct filters at once than entries (the exact-machine filter over 25,000
// machines, 50 readers) evicted entries whose query was still running, and lru-cache rejected the
// requests waiting for them with `evicted`: a 500 (bench/README.md "The 500 of the exact machine").
// Against the real Postgres.
import t from 'tap';
import { testStack } from '../helpers/stack.js';
import { LightCounts } from '../../api/light-counts.js';
import { loadConfig } from '../../lib/infra/config.js';

const s = await testStack(t, 'lightcounts', { gateway: false, worker: false, api: false });
const cfg = loadConfig({ ...process.env, ...s.env });

await s.pool.query(
  `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
   SELECT $1, 'm' || g, now(), now() FROM generate_series(1, 20) g`,
  [s.customer.id],
);
await s.pool.query(
  `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at)
   SELECT customer_id, id, 'agent', now(), now() FROM machines WHERE customer_id = $1`,
  [s.customer.id],
);

t.test('twenty filters at once through a cache of two entries: every count answered, none evicted', async (t) => {
  const counts = new LightCounts({ cfg, pool: s.pool }, 2);
  const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => counts.get(s.customer.id, { machine: `m${i + 1}` })));
  const failed = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
  t.same(failed, [], 'no request rejected');
  for (const r of results) if (r.status === 'fulfilled') t.equal(Object.values(r.value).reduce((a, n) => a + n, 0), 1, 'one instance on each machine');
  // And the same filter asked by many at once while others push it out: one answer each.
  const again = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => counts.get(s.customer.id, { machine: `m${(i % 4) + 1}` })));
  t.equal(again.filter((r) => r.status === 'rejected').length, 0);
});
