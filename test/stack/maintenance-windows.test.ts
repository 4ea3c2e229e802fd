// Maintenance windows through the api and the CLI (docs/api.md and docs/operations.md "Maintenance
// windows"): an admin defines one-off and recurring windows of each scope, a viewer lists them with
// their next or current occurrence, a window's occurrences are in Postgres as soon as the api has
// answered, and go with it; bad definitions are 400 with a detail, another customer's ids 404, the
// quota 409; `fleet maintenance add|list|delete` does the same by slugs; the worker's job prunes
// occurrences that ended more than 8 days ago.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { testStack, post, get, request, eventually } from '../helpers/stack.js';
import { ROOT } from '../../deploy/service-process.js';
import { setOverrides } from '../../lib/store/quotas.js';

const s = await testStack(t, 'maintapi', { env: { MAINTENANCE_SWEEP_MS: '500' } });
const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');
const other = await s.newCustomer('maint-other');
const otherAdmin = await s.newUser('admin', { customer: other.customer });
const q = (sql: string, params: unknown[] = []) => s.pool.query(sql, params);
const url = `${s.apiUrl}/api/maintenance-windows`;
const fleet = (...args: string[]) => spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });

// Two instances of this customer: m1/agent, m1/db-backup (made before the subtests run).
let agent: { id: string; machine_id: string; software: string };
let db: typeof agent;
t.before(async () => {
  for (const sw of ['agent', 'db-backup']) if ((await s.report('m1', 'heartbeat', {}, { software: sw })).status !== 200) throw new Error('heartbeat refused');
  const rows = await eventually(async () => {
    const r = (await q(`SELECT id, machine_id, software FROM instances WHERE customer_id = $1 ORDER BY software`, [s.customer.id])).rows;
    return r.length === 2 ? r : null;
  }, 15_000, 'the two instances');
  [agent, db] = rows as (typeof agent)[];
});
const hours = (h: number) => new Date(Date.now() + h * 3_600_000).toISOString();
const occurrences = async (id: string) => (await q('SELECT customer_id, machine_id, instance_id, software_like, starts_at, ends_at FROM maintenance_occurrences WHERE window_id = $1 ORDER BY starts_at', [id])).rows;

t.test('an admin defines windows of each scope; their occurrences are stored with them; a viewer lists them', async (t) => {
  const whole = await post(url, admin.jwt, { scope: 'customer', starts_at: hours(1), ends_at: hours(3), description: 'datacentre move' });
  t.equal(whole.status, 201, JSON.stringify(whole.body));
  t.match(whole.body, { scope: 'customer', kind: 'once', machine_id: null, recurrence: null, description: 'datacentre move', next: { in_progress: false } });
  t.same((await occurrences(whole.body.id)).map((o) => [o.customer_id, o.machine_id, o.instance_id, o.software_like, o.starts_at.toISOString(), o.ends_at.toISOString()]), [
    [s.customer.id, null, null, null, whole.body.starts_at, whole.body.ends_at],
  ], 'one occurrence, the whole customer');

  const machine = await post(url, admin.jwt, { scope: 'machine', machine_id: agent.machine_id, starts_at: hours(-1), ends_at: hours(1) });
  t.equal(machine.status, 201, JSON.stringify(machine.body));
  t.match(machine.body, { scope: 'machine', machine: 'm1', next: { in_progress: true } });
  t.equal((await occurrences(machine.body.id))[0]?.machine_id, agent.machine_id);

  const instance = await post(url, admin.jwt, { scope: 'instance', instance_id: db.id, starts_at: hours(2), ends_at: hours(4) });
  t.equal(instance.status, 201, JSON.stringify(instance.body));
  t.match(instance.body, { scope: 'instance', instance_id: db.id, machine_id: db.machine_id, machine: 'm1', software: 'db-backup' });

  const nightly = await post(url, admin.jwt, {
    scope: 'software',
    software_pattern: 'db-*',
    recurrence: { time_zone: 'europe/berlin', start_time: '02:30', duration_minutes: 90, days: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] },
  });
  t.equal(nightly.status, 201, JSON.stringify(nightly.body));
  t.match(nightly.body, {
    scope: 'software',
    software_pattern: 'db-*',
    kind: 'recurring',
    recurrence: { time_zone: 'Europe/Berlin', start_time: '02:30', duration_minutes: 90, days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'], valid_from: null, valid_until: null },
  }, 'the zone canonical, the days in week order');
  const nightlyOcc = await occurrences(nightly.body.id);
  t.ok(nightlyOcc.length >= 16 && nightlyOcc.length <= 17, `16 days of a daily window (${nightlyOcc.length})`);
  t.ok(nightlyOcc.every((o) => o.software_like === 'db-%' && o.ends_at - o.starts_at === 90 * 60_000), 'each 90 minutes, the pattern as LIKE');
  t.ok(new Date(nightly.body.next.starts_at) > new Date(Date.now() - 90 * 60_000), 'next: the current or next night');

  const list = await get(url, viewer.jwt);
  t.equal(list.status, 200);
  t.same(list.body.items.map((w: { id: string }) => w.id), [whole.body.id, machine.body.id, instance.body.id, nightly.body.id], 'oldest first');
  t.ok(Date.parse(list.body.now) > 0);
  t.same((await get(url, otherAdmin.jwt)).body.items, [], "another customer sees none of them");
});

t.test('bad definitions: 400 with a detail; roles; another customer’s ids 404', async (t) => {
  const bad = async (body: unknown, detail: RegExp, what: string) => {
    const r = await post(url, admin.jwt, body);
    t.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
    t.match(r.body.detail, detail, what);
  };
  const rec = (o: object) => ({ scope: 'customer', recurrence: { time_zone: 'Europe/Berlin', start_time: '02:00', duration_minutes: 60, days: ['mon'], ...o } });
  await bad(rec({ time_zone: 'Mars/Olympus' }), /unknown time zone "Mars\/Olympus"/, 'unknown zone');
  await bad(rec({ start_time: '24:00' }), /start_time/, 'start time');
  await bad(rec({ days: ['mon', 'tue'], duration_minutes: 1321 }), /duration_minutes: at most 1320/, 'longer than the days allow');
  await bad(rec({ duration_minutes: 0 }), /duration_minutes/, 'zero duration');
  await bad(rec({ days: [] }), /days/, 'no weekday');
  await bad(rec({ valid_from: hours(48), valid_until: hours(24) }), /valid_until must be after valid_from/, 'until before from');
  await bad(rec({ valid_until: hours(-1) }), /valid_until is in the past/, 'until past');
  await bad({ scope: 'customer', starts_at: hours(2), ends_at: hours(1) }, /ends_at must be after starts_at/, 'end before start');
  await bad({ scope: 'customer', starts_at: hours(-3), ends_at: hours(-1) }, /in the past/, 'over already');
  await bad({ scope: 'customer', starts_at: hours(1), ends_at: hours(24 * 32) }, /at most 31 days/, 'too long');
  await bad({ scope: 'customer', starts_at: hours(1) }, /needs starts_at and ends_at/, 'no end');
  await bad({ scope: 'customer' }, /needs starts_at and ends_at; a recurring one, recurrence/, 'no times');
  await bad({ ...rec({}), starts_at: hours(1), ends_at: hours(2) }, /not both/, 'both kinds');
  await bad({ scope: 'machine', starts_at: hours(1), ends_at: hours(2) }, /scope machine needs machine_id/, 'machine without id');
  await bad({ scope: 'customer', machine_id: agent.machine_id, starts_at: hours(1), ends_at: hours(2) }, /scope customer takes no id or pattern, not machine_id/, 'customer with an id');
  await bad({ scope: 'software', software_pattern: 'DB?', starts_at: hours(1), ends_at: hours(2) }, /software_pattern/, 'pattern characters');
  await bad({ scope: 'customer', starts_at: hours(1), ends_at: hours(2), colour: 'blue' }, /colour|additional/, 'unknown field');

  t.equal((await post(url, viewer.jwt, { scope: 'customer', starts_at: hours(1), ends_at: hours(2) })).status, 403, 'a viewer may not create');
  const mine = (await get(url, viewer.jwt)).body.items[0].id;
  t.equal((await request('DELETE', `${url}/${mine}`, viewer.jwt)).status, 403, 'nor delete');
  const theirs = await post(url, otherAdmin.jwt, { scope: 'machine', machine_id: agent.machine_id, starts_at: hours(1), ends_at: hours(2) });
  t.equal(theirs.status, 404, "another customer's machine: 404");
  t.equal(theirs.body.detail, 'no such machine');
  t.equal((await post(url, otherAdmin.jwt, { scope: 'instance', instance_id: db.id, starts_at: hours(1), ends_at: hours(2) })).status, 404, "another customer's instance: 404");
  t.equal((await request('DELETE', `${url}/${mine}`, otherAdmin.jwt)).status, 404, "another customer's window: 404");
  t.ok((await occurrences(mine)).length > 0, 'and it is still there');
  t.equal((await request('DELETE', `${url}/not-a-uuid`, admin.jwt)).status, 400);
});

t.test('delete: the window and its occurrences go; twice 404', async (t) => {
  const w = await post(url, admin.jwt, { scope: 'instance', instance_id: agent.id, starts_at: hours(5), ends_at: hours(6) });
  t.equal(w.status, 201);
  t.equal((await occurrences(w.body.id)).length, 1);
  t.equal((await request('DELETE', `${url}/${w.body.id}`, admin.jwt)).status, 204);
  t.same(await occurrences(w.body.id), [], 'its occurrences are gone');
  t.equal((await q('SELECT count(*)::int AS n FROM maintenance_windows WHERE id = $1', [w.body.id])).rows[0].n, 0);
  t.equal((await request('DELETE', `${url}/${w.body.id}`, admin.jwt)).status, 404, 'twice: 404');
});

t.test('the quota maintenance_windows: 409 naming it, shown in GET /api/quotas', async (t) => {
  const n = (await get(url, viewer.jwt)).body.items.length;
  await setOverrides(s.pool, s.customer.id, { maintenance_windows: n });
  const full = await post(url, admin.jwt, { scope: 'customer', starts_at: hours(1), ends_at: hours(2) });
  t.equal(full.status, 409);
  t.match(full.body.detail, new RegExp(`has ${n} maintenance windows, its quota \\(maintenance_windows = ${n}\\)`));
  t.match((await get(`${s.apiUrl}/api/quotas`, viewer.jwt)).body.quotas.maintenance_windows, { limit: n, default: 100, source: 'override', used: n });
  t.equal((await get(url, viewer.jwt)).body.items.length, n, 'nothing written');
  await setOverrides(s.pool, s.customer.id, { maintenance_windows: null });
  t.equal((await post(url, otherAdmin.jwt, { scope: 'customer', starts_at: hours(1), ends_at: hours(2) })).status, 201, "the other customer's own quota is untouched");
});

t.test('the CLI: fleet maintenance add, list, delete, by slugs', async (t) => {
  const slug = s.customer.slug;
  const add = fleet('maintenance', 'add', slug, '--instance', 'm1/agent', '--days', 'sat,sun', '--at', '01:30', '--duration', '1h30m', '--tz', 'America/New_York', '--description', 'weekend');
  t.equal(add.status, 0, add.stderr);
  const w = JSON.parse(add.stdout);
  t.match(w, { scope: 'instance', instance_id: agent.id, kind: 'recurring', recurrence: { time_zone: 'America/New_York', start_time: '01:30', duration_minutes: 90, days: ['sat', 'sun'] }, description: 'weekend' });
  t.ok((await occurrences(w.id)).length >= 4, 'its occurrences are stored');
  const once = fleet('maintenance', 'add', slug, '--software', 'db-*', '--start', hours(1), '--end', hours(2));
  t.equal(once.status, 0, once.stderr);
  t.match(JSON.parse(once.stdout), { scope: 'software', software_pattern: 'db-*', kind: 'once' });
  const list = fleet('maintenance', 'list', slug);
  t.equal(list.status, 0, list.stderr);
  t.ok(JSON.parse(list.stdout).items.some((x: { id: string }) => x.id === w.id));

  const refused = [
    ['maintenance', 'add', slug, '--days', 'daily', '--at', '02:00', '--duration', '23h', '--tz', 'Europe/Berlin'],
    ['maintenance', 'add', slug, '--days', 'daily', '--at', '02:00', '--duration', '1h', '--tz', 'Mars/Olympus'],
    ['maintenance', 'add', slug, '--start', hours(1)],
    ['maintenance', 'add', slug, '--machine', 'no-such-machine', '--start', hours(1), '--end', hours(2)],
    ['maintenance', 'add', other.customer.slug, '--instance', 'm1/db-backup', '--start', hours(1), '--end', hours(2)],
    ['maintenance', 'delete', other.customer.slug, w.id],
  ];
  for (const args of refused) {
    const r = fleet(...args);
    t.equal(r.status, 1, `${args.join(' ')}: ${r.stderr.trim()}`);
    t.match(r.stderr, /^fleet: /);
  }
  const del = fleet('maintenance', 'delete', slug, w.id);
  t.equal(del.status, 0, del.stderr);
  t.same(await occurrences(w.id), []);
  t.equal(fleet('maintenance', 'delete', slug, w.id).status, 1, 'twice: no such window');
});

t.test("the worker's job prunes occurrences that ended more than 8 days ago, and writes back a lost one", async (t) => {
  const w = await post(url, admin.jwt, { scope: 'customer', recurrence: { time_zone: 'UTC', start_time: '12:00', duration_minutes: 60, days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] } });
  t.equal(w.status, 201);
  await q(`INSERT INTO maintenance_occurrences (window_id, customer_id, starts_at, ends_at) VALUES ($1, $2, now() - interval '20 days', now() - interval '19 days')`, [w.body.id, s.customer.id]);
  const lost = (await q(`DELETE FROM maintenance_occurrences WHERE window_id = $1 AND starts_at = (SELECT max(starts_at) FROM maintenance_occurrences WHERE window_id = $1) RETURNING starts_at`, [w.body.id])).rows[0].starts_at as Date;
  await eventually(
    async () => {
      const now = await occurrences(w.body.id);
      return now.every((o) => o.ends_at > Date.now() - 8 * 86_400_000) && now.some((o) => o.starts_at.getTime() === lost.getTime()) ? now : null;
    },
    20_000,
    'the job (every MAINTENANCE_SWEEP_MS) pruned the old one and wrote the lost one again',
  );
  t.pass('pruned and restored');
});
