// The gateway's copy of the API tokens (gateway/token-cache.ts), in-process over this file's own
// Postgres database: a revocation is in the copy after the next refresh (the gateway refreshes every
// CACHE_REFRESH_MS), and tokens the copy does not know reach Postgres only within the global budget
// of docs/architecture.md (50 lookups/s, a burst of 100). Both checked without timing the machine:
// the refresh is called, and the lookups take their budget in one synchronous loop.
import t from 'tap';
import { testStack } from '../helpers/stack.js';
import { TokenCache } from '../../gateway/token-cache.js';
import { createToken, revokeToken } from '../../lib/store/customers.js';

const s = await testStack(t, 'tokencache', { gateway: false, worker: false, api: false });
const HOUR = 3_600_000;

t.test('a revoked token is refused by the copy after its next refresh, an un-revoked one is not', async (t) => {
  const a = await createToken(s.pool, s.customer.id, 'to revoke', ['ingest']);
  const b = await createToken(s.pool, s.customer.id, 'to keep', ['ingest']);
  // The timer never fires within the test: only the refreshes called here change the copy.
  const cache = new TokenCache(s.pool, HOUR, (e) => t.fail(String(e)));
  await cache.start();
  t.teardown(() => cache.stop());
  t.equal(cache.peek(a.token)?.revoked, false, 'known and valid after the first load');
  t.ok(await revokeToken(s.pool, a.id));
  t.equal(cache.peek(a.token)?.revoked, false, 'the copy does not change by itself (so the refresh below is what revokes)');
  await cache.refresh();
  t.equal(cache.peek(a.token)?.revoked, true, 'revoked after one refresh');
  t.equal(cache.peek(b.token)?.revoked, false, 'the other token stays valid');
});

t.test('unknown tokens: at most the burst of 100 reach Postgres at once, then 50 per second', async (t) => {
  const cache = new TokenCache(s.pool, HOUR, (e) => t.fail(String(e)));
  await cache.start();
  t.teardown(() => cache.stop());
  // 300 real tokens made after the copy was loaded: each lookup that answers a token made a query.
  const made = [];
  for (let i = 0; i < 300; i++) made.push((await createToken(s.pool, s.customer.id, `late ${i}`, ['ingest'])).token);
  t.equal(cache.peek(made[0]!), undefined, 'the copy does not know them');
  const started = Date.now();
  const lookups = made.map((tok) => cache.lookup(tok)); // each takes its budget before its first await
  const loopMs = Date.now() - started;
  const found = (await Promise.all(lookups)).filter((x) => x !== undefined).length;
  const allowed = 100 + Math.floor((50 * loopMs) / 1000);
  t.ok(found >= 100, `the burst is used (${found} found)`);
  t.ok(found <= allowed, `at most ${allowed} queries (burst 100 + 50/s over the ${loopMs} ms loop): ${found}`);

  const before = made.filter((tok) => cache.peek(tok) !== undefined).length;
  t.equal(before, found, 'only the found tokens were added to the copy');
});
