// GET /api/instances sorted and grouped by the heartbeat fields of 5.7.0 (group, location,
// group_priority, sort_priority); pre-5.7.0 instances (none of them) sort last.
import t from 'tap';
import { testStack, get, eventually } from '../helpers/stack.js';

const s = await testStack(t, 'groups');
const hb = (m: string, body: unknown) => s.report(m, 'heartbeat', body);

const fleet: [string, Record<string, unknown>][] = [
  ['a1', { group: 'line-b', location: 'hall 2', group_priority: 2, sort_priority: 2 }],
  ['a2', { group: 'line-b', location: 'hall 1', group_priority: '2', sort_priority: 1 }],
  ['a3', { group: 'line-a', location: 'hall 1', group_priority: 1, sort_priority: 5 }],
  ['a4', { group: 'line-a', location: 'hall 3', group_priority: 1 }],
  ['a5', { group: 'office', location: 'hall 2' }],
  ['a6', { version: '5.6.0' }], // pre-5.7.0: no group fields
];

t.before(async () => {
  for (const [m, body] of fleet) if ((await hb(m, body)).status !== 200) throw new Error(`heartbeat ${m} refused`);
  await eventually(async () => (await get(`${s.apiUrl}/api/instances`, s.token)).body.total === fleet.length, 15_000, 'all instances'); // totals may be API_COUNT_CACHE_MS old
});

const machines = (items: { machine: string }[]) => items.map((i) => i.machine);

t.test('sort by group, group_priority, sort_priority, location, machine; missing values last', async (t) => {
  const r = await get(`${s.apiUrl}/api/instances?sort=group,group_priority,sort_priority,location,machine`, s.token);
  t.equal(r.status, 200);
  t.same(machines(r.body.items), ['a3', 'a4', 'a2', 'a1', 'a5', 'a6']);
  t.equal(r.body.groups, undefined, 'no groups without group_by');
  const desc = await get(`${s.apiUrl}/api/instances?sort=-sort_priority,machine`, s.token);
  t.same(machines(desc.body.items), ['a3', 'a1', 'a2', 'a4', 'a5', 'a6'], 'descending, missing still last');
  const def = await get(`${s.apiUrl}/api/instances`, s.token);
  t.same(machines(def.body.items), ['a1', 'a2', 'a3', 'a4', 'a5', 'a6'], 'default: machine, software');
  const page = await get(`${s.apiUrl}/api/instances?sort=location,machine&limit=2&offset=1`, s.token);
  t.same(machines(page.body.items), ['a3', 'a1']);
  t.equal(page.body.total, 6);
});

t.test('group_by=group: groups by lowest group_priority, then name; no group last', async (t) => {
  const r = await get(`${s.apiUrl}/api/instances?group_by=group&sort=sort_priority,machine`, s.token);
  t.equal(r.status, 200);
  t.same(r.body.groups.map((g: { key: string | null; count: number }) => [g.key, g.count]), [['line-a', 2], ['line-b', 2], ['office', 1], [null, 1]]);
  t.same(r.body.groups.map((g: { items: { machine: string }[] }) => machines(g.items)), [['a3', 'a4'], ['a2', 'a1'], ['a5'], ['a6']]);
  t.same(machines(r.body.items), ['a3', 'a4', 'a2', 'a1', 'a5', 'a6'], 'items: the same page, flat');
  t.match(r.body.groups[0].items[0], { group: 'line-a', location: 'hall 1', group_priority: 1, sort_priority: 5 });
});

t.test('group_by=location and filters', async (t) => {
  const r = await get(`${s.apiUrl}/api/instances?group_by=location`, s.token);
  t.same(r.body.groups.map((g: { key: string | null }) => g.key), ['hall 1', 'hall 2', 'hall 3', null]);
  t.same(machines(r.body.groups[0].items), ['a2', 'a3']);
  const f = await get(`${s.apiUrl}/api/instances?group=line-b&sort=sort_priority`, s.token);
  t.same(machines(f.body.items), ['a2', 'a1']);
  t.equal(f.body.total, 2);
  t.same(machines((await get(`${s.apiUrl}/api/instances?location=hall%202`, s.token)).body.items), ['a1', 'a5']);
});

t.test('bad sort or group_by: 400', async (t) => {
  for (const q of ['sort=password', 'sort=machine;drop', 'sort=', 'sort=machine,,group', 'group_by=colour', 'group_by=group&sort=-']) {
    const r = await get(`${s.apiUrl}/api/instances?${q}`, s.token);
    t.equal(r.status, 400, q);
    t.type(r.body.detail, 'string');
  }
});
