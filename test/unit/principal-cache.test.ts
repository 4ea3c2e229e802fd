// api/principal-cache.ts, the rules that need no server: a row read while the copy was emptied is
// not kept (a notice arriving between a query and its answer), nothing is kept while not
// listening, entries age out, and the copy's size is bounded. The notices themselves, against
// Postgres: test/servers/principal-cache.test.ts.
import t from 'tap';
import { PrincipalCache } from '../../api/principal-cache.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

t.test('a row whose query was under way when the copy was emptied is returned, not kept', async (t) => {
  const c = new PrincipalCache(60_000);
  c.setLive(true);
  const answer = deferred<string>();
  const reading = c.get('k', () => answer.promise, () => true);
  c.invalidate(); // the notice arrives while the query is out
  answer.resolve('old');
  t.equal(await reading, 'old', 'the caller gets what it read');
  let loads = 0;
  t.equal(await c.get('k', async () => (loads++, 'new'), () => true), 'new');
  t.equal(loads, 1, 'read again: the old row was not kept');
  t.equal(await c.get('k', async () => (loads++, 'newer'), () => true), 'new', 'the new row is kept');
  t.equal(loads, 1);
});

t.test('the listener going down or up empties the copy, and rows read across it are not kept', async (t) => {
  const c = new PrincipalCache(60_000);
  t.notOk(c.on, 'off until the listener is up');
  let loads = 0;
  await c.get('k', async () => loads++, () => true);
  await c.get('k', async () => loads++, () => true);
  t.equal(loads, 2, 'not listening: every request reads');
  t.equal(c.size, 0);
  c.setLive(true);
  const answer = deferred<string>();
  const reading = c.get('k', () => answer.promise, () => true);
  c.setLive(false);
  c.setLive(true); // down and up again while the query was out: a notice may have been missed
  answer.resolve('stale');
  await reading;
  t.equal(c.size, 0, 'not kept');
  await c.get('k', async () => 'fresh', () => true);
  t.equal(c.size, 1);
  c.setLive(false);
  t.equal(c.size, 0, 'down: emptied');
});

t.test('what `keep` refuses (an unknown token) is read every time; entries age out; the size is bounded', async (t) => {
  const c = new PrincipalCache(50, 3);
  c.setLive(true);
  let loads = 0;
  for (let i = 0; i < 3; i++) await c.get('unknown', async () => (loads++, null), (v) => v !== null);
  t.equal(loads, 3);
  await c.get('a', async () => 'a1', () => true);
  t.equal(await c.get('a', async () => 'a2', () => true), 'a1');
  await new Promise((r) => setTimeout(r, 60));
  t.equal(await c.get('a', async () => 'a3', () => true), 'a3', 'older than maxAgeMs: read again');
  for (const k of ['b', 'c', 'd']) await c.get(k, async () => k, () => true);
  t.ok(c.size <= 3, `at most 3 entries (${c.size})`);
  const off = new PrincipalCache(0);
  off.setLive(true);
  t.notOk(off.on, 'maxAgeMs 0: off');
});
