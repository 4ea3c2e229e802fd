// The ingest rejection log, readable: GET /api/ingest-rejections for the active customer (filters
// from, to, status, limit), and rows with no known customer only for system admins at
// GET /api/admin/ingest-rejections. A flood stays bounded and its dropped count is visible.
import t from 'tap';
import { testStack, post, get, eventually } from '../helpers/stack.js';

const s = await testStack(t, 'rejlog', { env: { REJECTION_LOG_RATE_PER_S: '2', REJECTION_LOG_BURST: '5' } });
const c = s.customer.slug;
const url = (m: string, kind = 'heartbeat', customer = c) => `${s.gatewayUrl}/api/ingest/${customer}/${m}/agent/${kind}`;
const viewer = await s.newUser('viewer');
const sysadmin = await s.newUser(null, { systemAdmin: true });
const other = await s.newCustomer('other');
const t0 = new Date().toISOString();

interface Item {
  status: number;
  path: string;
  detail: string;
  customer: string;
  token_id: string | null;
  dropped: number;
  received_at: string;
}

t.before(async () => {
  // Attributed to this customer (its token): a 422 and a 400.
  if ((await post(url('r1', 'diagnostics'), s.token, { items: [{ code: 1, severity: 9 }] })).status !== 422) throw new Error('expected 422');
  if ((await post(url('r2', 'status'), s.token, '{"status":')).status !== 400) throw new Error('expected 400');
  // Attributed to the other customer: its token on our path.
  if ((await post(url('r3'), other.token, {})).status !== 403) throw new Error('expected 403');
  // No known customer: missing and unknown tokens.
  if ((await post(url('r4'), null, {})).status !== 403) throw new Error('expected 403');
  if ((await post(url('r5'), 'fk_nobody', {})).status !== 403) throw new Error('expected 403');
  await eventually(async () => (await get(`${s.apiUrl}/api/admin/ingest-rejections`, sysadmin.jwt)).body.items?.length >= 2, 10_000, 'unattributed rows');
  await eventually(async () => (await get(`${s.apiUrl}/api/ingest-rejections`, s.token)).body.items?.length >= 2, 10_000, 'attributed rows');
});

t.test("a customer sees its own rejections, newest first, and nobody else's", async (t) => {
  const r = await get(`${s.apiUrl}/api/ingest-rejections`, viewer.jwt);
  t.equal(r.status, 200);
  const items: Item[] = r.body.items;
  t.same(items.map((i) => [i.status, i.path]), [
    [400, `/api/ingest/${c}/r2/agent/status`],
    [422, `/api/ingest/${c}/r1/agent/diagnostics`],
  ]);
  t.ok(items.every((i) => i.customer === c && i.token_id && i.dropped === 0));
  t.match(items[1]!.detail, /severity/);
  t.notMatch(JSON.stringify(items), /fk_/, 'never a token');
  const theirs = await get(`${s.apiUrl}/api/ingest-rejections`, other.token);
  t.same(theirs.body.items.map((i: Item) => [i.status, i.path]), [[403, `/api/ingest/${c}/r3/agent/heartbeat`]], 'a token used on a foreign path shows up for its owner');
});

t.test('filters: status, from/to, limit; bad values 400', async (t) => {
  const only422 = await get(`${s.apiUrl}/api/ingest-rejections?status=422`, s.token);
  t.same(only422.body.items.map((i: Item) => i.status), [422]);
  t.equal((await get(`${s.apiUrl}/api/ingest-rejections?limit=1`, s.token)).body.items.length, 1);
  t.equal((await get(`${s.apiUrl}/api/ingest-rejections?from=${encodeURIComponent(t0)}`, s.token)).body.items.length, 2);
  t.same((await get(`${s.apiUrl}/api/ingest-rejections?to=${encodeURIComponent(t0)}`, s.token)).body.items, [], 'nothing before the test started');
  for (const q of ['status=abc', 'status=42', 'limit=0', 'from=yesterday', 'from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z']) {
    const r = await get(`${s.apiUrl}/api/ingest-rejections?${q}`, s.token);
    t.equal(r.status, 400, q);
    t.type(r.body.detail, 'string');
  }
  t.equal((await get(`${s.apiUrl}/api/ingest-rejections`, null)).status, 401);
});

t.test('rejections with no known customer: system admins only', async (t) => {
  const r = await get(`${s.apiUrl}/api/admin/ingest-rejections`, sysadmin.jwt);
  t.equal(r.status, 200);
  const paths = r.body.items.map((i: Item) => i.path);
  t.ok(paths.includes(`/api/ingest/${c}/r4/agent/heartbeat`) && paths.includes(`/api/ingest/${c}/r5/agent/heartbeat`), 'missing and unknown token');
  t.ok(r.body.items.every((i: Item) => i.token_id === null));
  t.notOk(paths.some((p: string) => /\/r[123]\//.test(p)), 'attributed rows are not here');
  const byCustomer = await get(`${s.apiUrl}/api/admin/ingest-rejections?customer=${c}&status=403`, sysadmin.jwt);
  t.equal(byCustomer.body.items.length, 2);
  t.same((await get(`${s.apiUrl}/api/admin/ingest-rejections?customer=nobody-else`, sysadmin.jwt)).body.items, []);
  t.equal((await get(`${s.apiUrl}/api/admin/ingest-rejections`, viewer.jwt)).status, 403);
  t.equal((await get(`${s.apiUrl}/api/admin/ingest-rejections`, s.token)).status, 403);
  // And the customer's own list does not show them either.
  const mine = await get(`${s.apiUrl}/api/ingest-rejections`, s.token);
  t.notOk(mine.body.items.some((i: Item) => /\/r[45]\//.test(i.path)));
});

t.test('a flood from one source stays bounded; the dropped count is readable', async (t) => {
  const n = 200;
  for (let i = 0; i < n; i += 50) {
    const rs = await Promise.all(Array.from({ length: 50 }, () => post(url('flood', 'status'), s.token, { status: 'exploded' })));
    t.ok(rs.every((r) => r.status === 422));
  }
  const items: Item[] = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/ingest-rejections?limit=1000`, s.token);
    const flood = (r.body.items as Item[]).filter((i) => i.path.includes('/flood/'));
    const written = flood.length;
    const dropped = flood.reduce((a, i) => a + i.dropped, 0);
    // Every rejection is either a row or counted in a summary row (which is a row itself).
    return dropped > 0 && written + dropped - flood.filter((i) => i.dropped > 0).length >= n ? flood : null;
  }, 15_000, 'flood written or counted');
  t.ok(items.length < 30, `only ${items.length} rows for ${n} rejections`);
  const summary = items.find((i) => i.dropped > 0)!;
  t.match(summary.detail, /rejections not logged/);
});
