// GET /api/instances at fleet scale, in-process (buildApi over this file's databases): keyset
// paging (`after` / `next`) in every kind of order, at the page boundaries; the machine search;
// totals and the fleet summary from the cached counts (API_COUNT_CACHE_MS) and how stale they can
// be; two customers never see each other's rows or counts.
import t from 'tap';
import { testStack, eventually } from '../helpers/stack.js';
import { injectApi } from '../helpers/api.js';
import { judgeAll } from '../helpers/lights.js';
import { createCustomer, createToken } from '../../lib/store/customers.js';
import { listInstances } from '../../lib/store/instances.js';
import { orderKeys } from '../../lib/store/instance-order.js';
import type { LightColour } from '../../lib/domain/traffic-light.js';

const s = await testStack(t, 'paging', { gateway: false, worker: false, api: false });
const api = (countCacheMs: number) => injectApi(t, s, { API_COUNT_CACHE_MS: String(countCacheMs) });

const uncached = await api(0);
const cached = await api(60_000);
const usual = await api(1000);

const other = await createCustomer(s.pool, `paging-other-${s.id}`);
const otherToken = (await createToken(s.pool, other.id, 'read', ['read'])).token;
const A = { id: s.customer.id, auth: { authorization: `Bearer ${s.token}` } };
const B = { id: other.id, auth: { authorization: `Bearer ${otherToken}` } };

/**
 * n instances for a customer, by SQL (as the bench seeds): machines `<prefix>NNN`, two pieces of
 * software each; colours by number (every 10th red by status, every 7th yellow, every 13th never
 * heartbeated: grey); groups, locations and priorities with gaps (null), equal last-seen times in
 * runs of three (ties the order must break).
 */
async function seed(customerId: string, prefix: string, machines: number) {
  await s.pool.query(
    `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
     SELECT $1, $2 || lpad(g::text, 3, '0'), now(), now() FROM generate_series(0, $3::int - 1) g`,
    [customerId, prefix, machines],
  );
  await s.pool.query(
    `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, group_name, location,
                            group_priority, sort_priority, status, status_at)
     SELECT customer_id, id, sw, now() - interval '1 day', date_trunc('second', now()) - (n / 3) * interval '1 s',
            CASE WHEN n % 13 = 0 THEN NULL ELSE now() END,
            CASE WHEN n % 5 = 0 THEN NULL ELSE 'g' || (n % 4) END, CASE WHEN n % 6 = 0 THEN NULL ELSE 'loc' || (n % 3) END,
            CASE WHEN n % 4 = 0 THEN NULL ELSE n % 3 END, CASE WHEN n % 9 = 0 THEN NULL ELSE n % 5 END,
            CASE WHEN n % 10 = 0 THEN 'error' WHEN n % 7 = 0 THEN 'degraded' ELSE 'running' END, now()
       FROM (SELECT m.customer_id, m.id, s.sw, substr(m.slug, length($2) + 1)::int * 2 + s.k - 1 AS n
               FROM machines m CROSS JOIN unnest(ARRAY['agent', 'Scanner_x']) WITH ORDINALITY AS s(sw, k)
              WHERE m.customer_id = $1) x`,
    [customerId, prefix],
  );
}
await seed(A.id, 'a-m', 60); // 120 instances
await seed(B.id, 'b-m', 5); // 10 instances
// The api shows the stored colour: judged as a worker would.
await judgeAll(s.pool);

type Page = { items: { id: string; machine: string; software: string; light: string }[]; total: number; next: string | null };
async function page(app: Awaited<ReturnType<typeof api>>, who: typeof A, query: string): Promise<Page> {
  const r = await app.inject({ method: 'GET', url: `/api/instances?${query}`, headers: who.auth });
  if (r.statusCode !== 200) throw new Error(`${query}: ${r.statusCode} ${r.body}`);
  return r.json() as Page;
}
async function walk(who: typeof A, query: string, limit: number): Promise<Page['items']> {
  const out: Page['items'] = [];
  let after: string | null = null;
  for (let i = 0; i < 1000; i++) {
    const p = await page(uncached, who, `${query}&limit=${limit}${after ? `&after=${encodeURIComponent(after)}` : ''}`);
    out.push(...p.items);
    if (p.items.length > limit) throw new Error('page longer than its limit');
    if (!p.next) return out;
    after = p.next;
  }
  throw new Error('no last page');
}

t.test('keyset pages, followed to the end, are the whole list in order, each row once, in every kind of order', async (t) => {
  for (const sort of ['machine,software', '-last_seen', 'last_seen', 'group,group_priority,sort_priority,location', '-sort_priority,location', 'light', '-status,-group', 'software,-machine']) {
    const whole = await page(uncached, A, `sort=${sort}&limit=10000`);
    t.equal(whole.items.length, 120, `${sort}: all of A's instances`);
    t.equal(whole.next, null, `${sort}: one page holds them all: no next`);
    for (const limit of [1, 7, 119, 120]) {
      const walked = await walk(A, `sort=${sort}`, limit);
      t.same(
        walked.map((i) => i.id),
        whole.items.map((i) => i.id),
        `${sort}, limit ${limit}: the same rows in the same order`,
      );
    }
  }
});

t.test('next is null exactly on the last page (limit + 1 rows read), with offsets and with cursors', async (t) => {
  const exact = await page(uncached, A, 'limit=20&offset=100');
  t.equal(exact.items.length, 20);
  t.equal(exact.next, null, 'the last 20 rows: no next page');
  const oneMore = await page(uncached, A, 'limit=20&offset=99');
  t.equal(oneMore.items.length, 20);
  t.type(oneMore.next, 'string', 'one row remains: a next page');
  const last = await page(uncached, A, `limit=20&after=${encodeURIComponent(oneMore.next!)}`);
  t.equal(last.items.length, 1);
  t.equal(last.next, null);
  t.equal(last.total, 120, 'total counts every page, not this one');
  const beyond = await page(uncached, A, 'limit=20&offset=120');
  t.same([beyond.items.length, beyond.next], [0, null], 'past the end: empty, no next');
});

t.test('filters with cursors: colour, software, machine search (substring, any case, LIKE characters literal)', async (t) => {
  const all = (await page(uncached, A, 'limit=10000')).items;
  const red = await walk(A, 'light=red&sort=machine', 3);
  t.same(
    red.map((i) => i.id),
    all.filter((i) => i.light === 'red').map((i) => i.id),
    'red only, in order',
  );
  t.ok(red.length > 3, 'several pages of red');
  t.equal((await page(uncached, A, 'light=red&limit=1')).total, red.length, 'total of the colour');
  const sw = await walk(A, 'software=Scanner_x&sort=-last_seen', 9);
  t.equal(sw.length, 60);
  t.ok(sw.every((i) => i.software === 'Scanner_x'));
  const q = await page(uncached, A, 'q=M04&limit=100');
  t.same(
    q.items.map((i) => i.machine),
    ['a-m040', 'a-m040', 'a-m041', 'a-m041', 'a-m042', 'a-m042', 'a-m043', 'a-m043', 'a-m044', 'a-m044', 'a-m045', 'a-m045', 'a-m046', 'a-m046', 'a-m047', 'a-m047', 'a-m048', 'a-m048', 'a-m049', 'a-m049'],
    'machines containing "m04", any case',
  );
  t.equal(q.total, 20);
  t.equal((await page(uncached, A, 'q=a_m&limit=5')).total, 0, '_ matches only itself');
  t.equal((await page(uncached, A, 'q=%25&limit=5')).total, 0, '% matches only itself');
  t.equal((await page(uncached, A, 'q=&limit=5')).total, 120, 'an empty search filters nothing');
  t.equal((await page(uncached, A, 'machine=a-m007&limit=5')).total, 2, 'machine: the exact name still');
});

// A list of one colour that few instances have reads that colour's rows first and builds the full
// rows of the page only (colourFirst, which the api takes from its cached counts); otherwise it
// walks the order's index. Both must give the same rows in the same order, with the same cursors,
// in every order, at every offset and after every cursor, whatever the colour; and A's list never
// holds B's instances of that colour.
t.test('a list of one colour: read colour first or by walking the order, the same page, row for row', async (t) => {
  const read = (light: LightColour, sort: string, colourFirst: boolean, offset = 0, after?: (string | null)[], limit = 8) =>
    listInstances(s.pool, A.id, { filter: {}, light, sort, keys: orderKeys(sort), after, limit, offset, colourFirst });
  const seen = (rows: Record<string, unknown>[]) => rows.map((r) => Object.entries(r).map(([k, v]) => `${k}=${v instanceof Date ? v.toISOString() : JSON.stringify(v)}`).join(','));
  let compared = 0;
  for (const light of ['red', 'yellow', 'grey', 'green'] as LightColour[]) {
    for (const sort of ['machine,software', '-last_seen', 'last_seen', 'group,group_priority,sort_priority,location', '-sort_priority,location', 'light', '-status,-group', 'software,-machine', 'first_seen']) {
      const whole = await read(light, sort, false, 0, undefined, 1000);
      t.same(seen(await read(light, sort, true, 0, undefined, 1000)), seen(whole), `${light} by ${sort}: every row and column the same`);
      for (const offset of [0, 3, whole.length - 1, whole.length].filter((o) => o >= 0)) {
        t.same(seen(await read(light, sort, true, offset)), seen(await read(light, sort, false, offset)), `${light} by ${sort}, offset ${offset}`);
        compared++;
      }
      for (const at of [0, 4, whole.length - 2].filter((i) => i >= 0)) {
        const row = whole[at]!;
        const cursor = orderKeys(sort).map((_, i) => (row[`_c${i}`] ?? null) as string | null);
        t.same(seen(await read(light, sort, true, 0, cursor)), seen(await read(light, sort, false, 0, cursor)), `${light} by ${sort}, after row ${at}`);
        compared++;
      }
      t.ok(whole.every((r) => r.light === light), `${light} by ${sort}: that colour only`);
    }
  }
  t.ok(compared > 200, `${compared} pages compared`);
  const theirs = await listInstances(s.pool, A.id, { filter: {}, light: 'red', sort: 'machine', keys: orderKeys('machine'), limit: 1000, offset: 0, colourFirst: true });
  t.ok(theirs.length > 0 && theirs.every((r) => String(r.machine).startsWith('a-m')), "A's red only, never B's");
});

t.test('a cursor that is not one of this list is refused (400), never an error of the database', async (t) => {
  const first = await page(uncached, A, 'sort=-last_seen&limit=5');
  const bad = async (query: string, detail: RegExp) => {
    const r = await uncached.inject({ method: 'GET', url: `/api/instances?${query}`, headers: A.auth });
    t.equal(r.statusCode, 400, query);
    t.match(r.json(), { detail }, query);
  };
  const forge = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  await bad('after=garbage', /not a cursor/);
  await bad(`sort=machine&after=${first.next}`, /another sort/);
  await bad(`sort=-last_seen&offset=5&after=${first.next}`, /offset/);
  await bad(`sort=-last_seen&group_by=group&after=${first.next}`, /group_by/);
  await bad(`sort=-last_seen&after=${forge({ s: '-last_seen', v: ['not a number', 'x', 'y', '00000000-0000-0000-0000-000000000000'] })}`, /not a cursor/);
  await bad(`sort=-last_seen&after=${forge({ s: '-last_seen', v: ['1'] })}`, /not a cursor/);
  await bad(`sort=-last_seen&after=${forge({ s: '-last_seen', v: [null, 'x', 'y', '00000000-0000-0000-0000-000000000000'] })}`, /not a cursor/);
});

t.test("two customers: neither's rows, totals, searches nor summary include the other's", async (t) => {
  const a = await page(uncached, A, 'limit=10000');
  const b = await page(uncached, B, 'limit=10000');
  t.equal(a.total, 120);
  t.equal(b.total, 10);
  t.ok(a.items.every((i) => i.machine.startsWith('a-')));
  t.ok(b.items.every((i) => i.machine.startsWith('b-')));
  t.equal((await page(uncached, B, 'q=a-m&limit=5')).total, 0, "B's search finds none of A's machines");
  t.equal((await page(cached, B, 'q=a-m&limit=5')).total, 0, 'nor through the cache');
  // A cursor taken from A's list positions B's list; it never shows A's rows.
  const fromA = (await page(uncached, A, 'limit=3')).next!;
  const bAfter = await page(uncached, B, `limit=100&after=${encodeURIComponent(fromA)}`);
  t.ok(bAfter.items.every((i) => i.machine.startsWith('b-')));
  for (const app of [uncached, cached]) {
    const sa = (await app.inject({ method: 'GET', url: '/api/fleet/summary', headers: A.auth })).json();
    const sb = (await app.inject({ method: 'GET', url: '/api/fleet/summary', headers: B.auth })).json();
    t.equal(sa.total, 120);
    t.equal(sb.total, 10);
    const byLight = (items: Page['items']) => items.reduce((c, i) => ({ ...c, [i.light]: (c[i.light] ?? 0) + 1 }), {} as Record<string, number>);
    t.same(Object.fromEntries(Object.entries(sb.lights).filter(([, n]) => n)), byLight(b.items), "B's colours are B's rows'");
    t.same(Object.fromEntries(Object.entries(sa.lights).filter(([, n]) => n)), byLight(a.items), "A's colours are A's rows'");
  }
});

t.test('counts are cached per customer and filter for API_COUNT_CACHE_MS: the rows are exact, the total at most that old', async (t) => {
  const summary = async (app: typeof cached) => (await app.inject({ method: 'GET', url: '/api/fleet/summary', headers: A.auth })).json().total as number;
  const before = { cached: await summary(cached), usual: await summary(usual), software: (await page(cached, A, 'software=new-sw&limit=5')).total };
  t.same(before, { cached: 120, usual: 120, software: 0 });
  const m = (await s.pool.query<{ id: string }>(`SELECT id FROM machines WHERE customer_id = $1 AND slug = 'a-m000'`, [A.id])).rows[0]!;
  await s.pool.query(`INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at) VALUES ($1, $2, 'new-sw', now(), now(), now())`, [A.id, m.id]);
  t.teardown(() => s.pool.query(`DELETE FROM instances WHERE software = 'new-sw'`));

  t.equal(await summary(uncached), 121, 'no cache (0): the new instance at once');
  t.equal(await summary(cached), 120, 'a 60 s cache: still the count from before');
  const p = await page(cached, A, 'software=new-sw&limit=5');
  t.same([p.items.length, p.total], [1, 0], 'the page itself is read fresh; its total is the cached count');
  t.equal((await page(cached, A, 'software=agent&limit=1')).total, 60, 'another filter is another entry (counted now)');
  // The usual 1 s cache catches up by itself.
  await eventually(async () => (await summary(usual)) === 121, 10_000, 'the 1 s cache to count the new instance');
  await eventually(async () => (await page(usual, A, 'limit=1')).total === 121, 10_000, "the list's total too");
  t.equal(await summary(cached), 120, 'the 60 s cache still has not');
});
