// Maintenance windows in Postgres (lib/store/maintenance.ts), against the real server: windows of
// each scope (the whole customer, a machine, a software pattern, an instance) and the answers of
// the seam's SQL fragments for the traffic light (inMaintenanceSql, maintenanceEndSql,
// maintenanceUntilSql, maintenanceFromSql) per instance and instant, with overlapping and touching windows and two
// customers (one's windows never apply to the other's instances, whatever their names); the
// occurrences stored for a recurring window; the job's run
// (refreshOccurrences) repeated, extending, pruning; the quota and another customer's ids; the plan
// of the light's recording statement (lib/store/light-events.ts) holds the maintenance chain once.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';
import { loadConfig } from '../../lib/infra/config.js';
import { OCCURRENCE_HORIZON_MS, occurrencesBetween, type WindowTimes } from '../../lib/domain/maintenance.js';
import {
  createWindow,
  deleteWindow,
  inMaintenanceSql,
  listWindows,
  maintenanceEndSql,
  maintenanceFromSql,
  maintenanceUntilSql,
  refreshOccurrences,
  type WindowScopeInput,
} from '../../lib/store/maintenance.js';
import { setOverrides } from '../../lib/store/quotas.js';
import { recordLightChanges, TRANSITION_SQL } from '../../lib/store/light-events.js';

const s = await testStack(t, 'maintwin', { gateway: false, worker: false, api: false });
const cfg = loadConfig(s.env);
const q = (sql: string, params: unknown[] = []) => s.pool.query(sql, params);

const A = s.customer;
const B = (await s.newCustomer('other')).customer;

async function machine(customerId: string, slug: string): Promise<string> {
  return (await q(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, $2, now(), now()) RETURNING id`, [customerId, slug])).rows[0].id;
}
async function instance(customerId: string, machineId: string, software: string): Promise<string> {
  return (await q(`INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at) VALUES ($1, $2, $3, now(), now()) RETURNING id`, [customerId, machineId, software])).rows[0].id;
}

// Customer A: m1 with agent and db-backup, m2 with agent. Customer B: the same names (m1 with agent and db-main).
const aM1 = await machine(A.id, 'm1');
const aM2 = await machine(A.id, 'm2');
const bM1 = await machine(B.id, 'm1');
const I = {
  aM1agent: await instance(A.id, aM1, 'agent'),
  aM1db: await instance(A.id, aM1, 'db-backup'),
  aM2agent: await instance(A.id, aM2, 'agent'),
  bM1agent: await instance(B.id, bM1, 'agent'),
  bM1db: await instance(B.id, bM1, 'db-main'),
};
const names = Object.fromEntries(Object.entries(I).map(([k, v]) => [v, k]));

// Times: hours after a base a day from now (well inside the 8-day horizon).
const dbNow = (await q('SELECT clock_timestamp() AS now')).rows[0].now as Date;
const base = Math.ceil((dbNow.getTime() + 86_400_000) / 3_600_000) * 3_600_000;
const H = (h: number) => new Date(base + h * 3_600_000);
const once = (from: number, to: number): WindowTimes => ({ kind: 'once', startsAt: H(from), endsAt: H(to) });

async function add(customerId: string, scope: WindowScopeInput, times: WindowTimes, description = ''): Promise<string> {
  const r = await createWindow(s.pool, cfg, customerId, { scope, times, description, createdBy: null });
  if (!('created' in r)) throw new Error(`window not created: ${JSON.stringify(r)}`);
  return r.created.id;
}

await add(A.id, { scope: 'customer' }, once(0, 1), 'slot 0-1: all of A');
await add(A.id, { scope: 'machine', machineId: aM1 }, once(2, 3), 'slot 2-3: A/m1');
await add(A.id, { scope: 'software', softwarePattern: 'db-*' }, once(4, 5), 'slot 4-5: db-*');
await add(A.id, { scope: 'instance', instanceId: I.aM2agent }, once(6, 7), 'slot 6-7: A/m2/agent');
// Overlapping and touching: A/m1/agent 8-10 (instance), A/m1 9-11 (machine), agent 11-12 (software).
await add(A.id, { scope: 'instance', instanceId: I.aM1agent }, once(8, 10));
await add(A.id, { scope: 'machine', machineId: aM1 }, once(9, 11));
await add(A.id, { scope: 'software', softwarePattern: 'agent' }, once(11, 12));
// B's whole customer 13-14, and B's `*` 15-16: never A's instances.
await add(B.id, { scope: 'customer' }, once(13, 14));
await add(B.id, { scope: 'software', softwarePattern: '*' }, once(15, 16));

/** Per instance (by name), the fragment's answer at hour `h` (and `after`, for maintenanceEndSql). */
async function answers(fragment: string, params: unknown[]): Promise<Record<string, unknown>> {
  const r = await q(`SELECT i.id, ${fragment} AS v FROM instances i WHERE i.customer_id = ANY($${params.length + 1}::uuid[])`, [...params, [A.id, B.id]]);
  return Object.fromEntries(r.rows.map((x) => [names[x.id], x.v instanceof Date ? (x.v.getTime() - base) / 3_600_000 : x.v]));
}
const inM = (h: number) => answers(inMaintenanceSql('i', '$1'), [H(h)]);
const until = (h: number) => answers(maintenanceUntilSql('i', '$1'), [H(h)]);
const from = (h: number) => answers(maintenanceFromSql('i', '$1'), [H(h)]);
const ended = (after: number, at: number) => answers(maintenanceEndSql('i', '$1', '$2'), [H(after), H(at)]);
const only = (...yes: string[]) => Object.fromEntries(Object.keys(I).map((k) => [k, yes.includes(k)]));

t.test('inMaintenanceSql: each scope covers its instances and no other, starts_at <= t < ends_at', async (t) => {
  t.same(await inM(-0.5), only(), 'before any window: none');
  t.same(await inM(0), only('aM1agent', 'aM1db', 'aM2agent'), 'the whole customer, from its start instant on: all of A, none of B');
  t.same(await inM(0.5), only('aM1agent', 'aM1db', 'aM2agent'));
  t.same(await inM(1), only(), 'the end instant is outside');
  t.same(await inM(2.5), only('aM1agent', 'aM1db'), 'machine m1 of A: its two instances, not B’s m1');
  t.same(await inM(4.5), only('aM1db'), 'db-*: A’s db-backup, not B’s db-main');
  t.same(await inM(6.5), only('aM2agent'), 'one instance');
  t.same(await inM(9.5), only('aM1agent', 'aM1db'), 'overlapping windows');
  t.same(await inM(11.5), only('aM1agent', 'aM2agent'), 'software pattern without a wildcard: exactly agent, of A only');
  t.same(await inM(13.5), only('bM1agent', 'bM1db'), 'B’s whole customer: B only');
  t.same(await inM(15.5), only('bM1agent', 'bM1db'), 'B’s `*`: B only');
});

t.test('maintenanceUntilSql: the end of the union of overlapping and touching windows', async (t) => {
  const u = await until(8.5);
  t.equal(u.aM1agent, 12, 'A/m1/agent: 8-10, then 9-11 (machine), then 11-12 (agent) touching: until 12');
  t.equal(u.aM1db, null, 'A/m1/db-backup is not in maintenance at 8.5');
  t.equal(u.aM2agent, null);
  t.equal(u.bM1agent, null, 'B: nothing');
  const later = await until(9.5);
  t.equal(later.aM1db, 11, 'A/m1/db-backup: only the machine window 9-11 (the agent one does not apply)');
  t.equal(later.aM1agent, 12);
  t.equal((await until(11)).aM2agent, 12, 'A/m2/agent from the start of 11-12');
  t.equal((await until(0.5)).aM1agent, 1, 'a single window: its end');
  t.same(await until(12), Object.fromEntries(Object.keys(I).map((k) => [k, null])), 'at the last end: none');
});

t.test('maintenanceFromSql: the start of the union of overlapping and touching windows, chained backwards', async (t) => {
  t.equal((await from(11.5)).aM1agent, 8, 'A/m1/agent at 11.5: 11-12 (agent) touches 9-11 (machine), which overlaps 8-10: since 8');
  t.equal((await from(9.5)).aM1db, 9, 'A/m1/db-backup: only the machine window 9-11');
  t.equal((await from(11.5)).aM2agent, 11, 'A/m2/agent: 11-12 alone (6-7 ended long before)');
  t.equal((await from(0)).aM1agent, 0, 'from the start instant');
  t.equal((await from(1)).aM1agent, null, 'at an end instant: not in maintenance');
  t.equal((await from(15.5)).bM1agent, 15, 'B: its own windows (13-14 does not touch 15-16)');
  t.equal((await from(11.5)).bM1agent, null, "A's windows never reach B");
});

t.test('maintenanceEndSql: the latest end within (after, at]', async (t) => {
  const e = await ended(7, 11.5);
  t.equal(e.aM1agent, 11, 'A/m1/agent: ends 10 and 11 within (7, 11.5]: 11');
  t.equal(e.aM1db, 11);
  t.equal(e.aM2agent, null, 'A/m2/agent: 6-7 ended at 7, not after 7');
  t.equal((await ended(6.5, 7)).aM2agent, 7, 'the end instant itself counts (<= at)');
  t.equal((await ended(7, 13)).aM1agent, 12);
  t.equal((await ended(12, 13)).aM1agent, null, 'nothing ended after 12');
  t.equal((await ended(-1, 20)).bM1agent, 16, 'B: its own windows only');
  t.equal((await ended(12, 20)).aM1agent, null, "B's windows never end anything of A");
});

t.test('the fragments can use the index (customer_id, ends_at)', async (t) => {
  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('SET LOCAL enable_seqscan = off');
    const plan = (await c.query(`EXPLAIN SELECT i.id, ${inMaintenanceSql('i', 'now()')}, ${maintenanceUntilSql('i', 'now()')} FROM instances i WHERE i.customer_id = $1`, [A.id])).rows
      .map((r) => r['QUERY PLAN'])
      .join('\n');
    t.match(plan, /Index Scan using maintenance_occurrences_customer/, 'an index scan of maintenance_occurrences (customer_id, ends_at)');
    await c.query('ROLLBACK');
  } finally {
    c.release();
  }
  t.throws(() => inMaintenanceSql('i; DROP TABLE x', 'now()'), /not an SQL alias/);
});

// Inlined CTEs copied the maintenance chain into every CASE of the colour, its reason and its time:
// planning the recording statement took up to a second per report, under the instance's row lock.
t.test("the recording statement plans each maintenance chain once and each default's InitPlan a bounded number of times", async (t) => {
  const plan = (await q(`EXPLAIN ${TRANSITION_SQL}`, [[I.aM1agent], 900, 'report', Date.now(), 0, randomUUID(), []])).rows.map((r) => r['QUERY PLAN'] as string);
  t.equal(plan.filter((l) => l.includes('Recursive Union')).length, 2, "two recursive unions: the maintenance's chain forwards (its end) and backwards (its start)");
  const subplans = plan.filter((l) => /InitPlan|SubPlan/.test(l)).length;
  t.ok(subplans <= 60, `at most 60 sub-plans (${subplans} now; inlined there were 375)`);
});

// The statement is named, so Postgres may plan it once for any ids (a generic plan): there an
// `id = ANY($1)` is compared element by element for every row scanned (a batch of 5,000 of
// 100,000 instances: 7-8 s from the sixth run on). The ids are joined as a set instead.
t.test('the generic plan of the recording statement never compares ids with ANY of the parameter', async (t) => {
  const c = await s.pool.connect();
  try {
    await c.query('SET plan_cache_mode = force_generic_plan');
    await c.query(`PREPARE lt_generic(uuid[], float8, text, float8, float8, uuid, float8[]) AS ${TRANSITION_SQL}`);
    // EXPLAIN EXECUTE takes no bind parameters: the values are written in (an id from the table).
    const plan = (await c.query(`EXPLAIN EXECUTE lt_generic(ARRAY['${I.aM1agent}']::uuid[], 900, 'sweep', ${Date.now()}, 0, '${randomUUID()}', ARRAY[]::float8[])`)).rows.map((r) => r['QUERY PLAN'] as string);
    // (Two arrays unnested together: ROWS FROM, shown without the function's name.)
    t.ok(plan.some((l) => /Function Scan on (unnest )?k\s/.test(l)), `the ids are a set joined to instances (${plan.filter((l) => /Function Scan/.test(l)).join('; ')})`);
    t.same(plan.filter((l) => /= ANY \(\$1/.test(l)), [], 'no row is compared with ANY of the ids');
  } finally {
    await c.query('DEALLOCATE ALL; RESET plan_cache_mode');
    c.release();
  }
});

t.test('a recurring window: the stored occurrences are its horizon as lib/domain/maintenance.ts computes it (the daylight-saving rules: test/unit/maintenance.test.ts)', async (t) => {
  const times: WindowTimes = { kind: 'recurring', timeZone: 'America/New_York', startTime: '01:30', durationMinutes: 120, days: ['sat', 'sun'], validFrom: null, validUntil: null };
  const id = await add(A.id, { scope: 'instance', instanceId: I.aM2agent }, times);
  const stored = (await q('SELECT starts_at, ends_at, customer_id, instance_id FROM maintenance_occurrences WHERE window_id = $1 ORDER BY starts_at', [id])).rows;
  const now = (await q('SELECT clock_timestamp() AS now')).rows[0].now as Date;
  const want = occurrencesBetween(times, new Date(now.getTime() - OCCURRENCE_HORIZON_MS), new Date(now.getTime() + OCCURRENCE_HORIZON_MS));
  t.ok(want.length >= 4, `16 days of Saturdays and Sundays (${want.length})`);
  t.same(stored.map((r) => [r.starts_at.toISOString(), r.ends_at.toISOString()]), want.map((o) => [o.startsAt.toISOString(), o.endsAt.toISOString()]));
  t.ok(stored.every((r) => r.customer_id === A.id && r.instance_id === I.aM2agent), 'the scope is copied onto each');
  const listed = (await listWindows(s.pool, A.id)).items.find((w) => w.id === id)!;
  t.same(listed.days, [6, 7]);
  t.ok(listed.next && listed.next.endsAt > now, 'the list shows its current or next occurrence');
  t.ok(await deleteWindow(s.pool, A.id, id));
  t.equal((await q('SELECT count(*)::int AS n FROM maintenance_occurrences WHERE window_id = $1', [id])).rows[0].n, 0, 'deleting the window deletes its occurrences');
});

t.test('the job: a second run changes nothing; a lost occurrence comes back; an old one is pruned; a changed definition is followed', async (t) => {
  const times: WindowTimes = { kind: 'recurring', timeZone: 'Europe/Berlin', startTime: '02:30', durationMinutes: 60, days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'], validFrom: null, validUntil: null };
  const id = await add(B.id, { scope: 'machine', machineId: bM1 }, times);
  await refreshOccurrences(s.pool, { batch: 2 });
  const snapshot = async () => (await q('SELECT window_id, starts_at, ends_at FROM maintenance_occurrences ORDER BY window_id, starts_at')).rows.map((r) => `${r.window_id} ${r.starts_at.toISOString()} ${r.ends_at.toISOString()}`);
  const before = await snapshot();
  const again = await refreshOccurrences(s.pool, { batch: 2 });
  t.match(again, { inserted: 0, deleted: 0, pruned: 0 }, 'a second run writes nothing');
  t.ok(again.windows >= 10, `it looked at every window, in batches of 2 (${again.windows})`);
  t.same(await snapshot(), before);

  const lost = (await q('DELETE FROM maintenance_occurrences WHERE window_id = $1 AND starts_at > now() RETURNING starts_at', [id])).rowCount!;
  t.ok(lost >= 7, 'occurrences lost (a failed write, a restore)');
  t.match(await refreshOccurrences(s.pool), { inserted: lost }, 'the next run writes them again');
  t.same(await snapshot(), before);

  await q(`INSERT INTO maintenance_occurrences (window_id, customer_id, machine_id, starts_at, ends_at) VALUES ($1, $2, $3, now() - interval '10 days', now() - interval '9 days')`, [id, B.id, bM1]);
  t.match(await refreshOccurrences(s.pool), { pruned: 1, inserted: 0 }, 'one that ended 9 days ago is pruned');
  t.same(await snapshot(), before);

  // A definition that gives other occurrences now (as a tz database update could): they follow it.
  await q(`UPDATE maintenance_windows SET start_minute = 3 * 60 WHERE id = $1`, [id]);
  const moved = await refreshOccurrences(s.pool);
  t.ok(moved.inserted >= 16 && moved.deleted >= 16, `the old starts go, the new come (${JSON.stringify(moved)})`);
  const rows = (await q(`SELECT starts_at FROM maintenance_occurrences WHERE window_id = $1 AND ends_at > now() - interval '7 days'`, [id])).rows;
  t.ok(rows.length > 0 && rows.every((r) => '03:00' === new Intl.DateTimeFormat('en-GB', { timeZone: 'Europe/Berlin', hour: '2-digit', minute: '2-digit' }).format(r.starts_at)), 'every stored start is 03:00 Berlin time');
});

t.test("another customer's machine or instance is not found; the quota holds, also under concurrent creations", async (t) => {
  const wide = { kind: 'once' as const, startsAt: H(30), endsAt: H(31) };
  t.same(await createWindow(s.pool, cfg, A.id, { scope: { scope: 'machine', machineId: bM1 }, times: wide, description: '', createdBy: null }), { missing: 'machine' });
  t.same(await createWindow(s.pool, cfg, A.id, { scope: { scope: 'instance', instanceId: I.bM1agent }, times: wide, description: '', createdBy: null }), { missing: 'instance' });
  t.same(await createWindow(s.pool, cfg, A.id, { scope: { scope: 'instance', instanceId: randomUUID() }, times: wide, description: '', createdBy: null }), { missing: 'instance' });
  const n = (await listWindows(s.pool, A.id)).items.length;
  await setOverrides(s.pool, A.id, { maintenance_windows: n });
  t.same(await createWindow(s.pool, cfg, A.id, { scope: { scope: 'customer' }, times: wide, description: '', createdBy: null }), { full: { count: n, max: n } });
  t.equal((await listWindows(s.pool, A.id)).items.length, n, 'nothing written');
  t.notOk(await deleteWindow(s.pool, B.id, (await listWindows(s.pool, A.id)).items[0]!.id), "B cannot delete A's window");
  // Ten at once with room for three: exactly three (the customer's row is locked per creation).
  await setOverrides(s.pool, A.id, { maintenance_windows: n + 3 });
  const racing = await Promise.all(Array.from({ length: 10 }, () => createWindow(s.pool, cfg, A.id, { scope: { scope: 'customer' }, times: wide, description: 'race', createdBy: null })));
  t.equal(racing.filter((r) => 'created' in r).length, 3, 'three created');
  t.equal(racing.filter((r) => 'full' in r).length, 7, 'seven refused');
  t.equal((await listWindows(s.pool, A.id)).items.length, n + 3, 'the quota held under concurrent requests');
  await setOverrides(s.pool, A.id, { maintenance_windows: null });
});

// The recording statement follows the maintenance chain (a recursive query per instance) only for
// the customers of its batch with an occurrence that ends after the batch's earliest judgement
// time (lib/store/light-events.ts TRANSITION_SQL, `mwc`): for every other instance it cannot find
// one, and running it anyway was a tenth of the statement's time when 100,000 fell silent together
// (bench/README.md "The maintenance chain only where a window can apply").
t.test('the recording statement: the chain runs for the customers with a window that can apply, each instance judged as before', async (t) => {
  const now = ((await q('SELECT clock_timestamp() AS now')).rows[0].now as Date).getTime();
  const at = (minutes: number) => new Date(now + minutes * 60_000);
  const silentInstance = async (customerId: string) => {
    const id = await instance(customerId, await machine(customerId, 'silent'), 'agent');
    await q(
      `UPDATE instances SET last_heartbeat_at = now() - interval '10 minutes', deadline = light_deadline(now() - interval '10 minutes', NULL),
              late_at = light_late_at(now() - interval '10 minutes', NULL, NULL) WHERE id = $1`,
      [id],
    );
    await q(`UPDATE instance_lights SET light = 'green', light_since = now() - interval '1 day', light_judged_at = now() - interval '10 minutes' WHERE instance_id = $1`, [id]);
    return id;
  };
  const inWindow = (await s.newCustomer('inwindow')).customer;
  const noWindow = (await s.newCustomer('nowindow')).customer;
  const pastWindow = (await s.newCustomer('pastwindow')).customer;
  const later = (await s.newCustomer('laterwindow')).customer;
  const iIn = await silentInstance(inWindow.id);
  const iNo = await silentInstance(noWindow.id);
  const iPast = await silentInstance(pastWindow.id);
  const iLater = await silentInstance(later.id);
  await add(inWindow.id, { scope: 'customer' }, { kind: 'once', startsAt: at(-30), endsAt: at(60) });
  await add(pastWindow.id, { scope: 'customer' }, { kind: 'once', startsAt: at(-180), endsAt: at(-60) });
  await add(later.id, { scope: 'customer' }, { kind: 'once', startsAt: at(60), endsAt: at(120) });

  const c = await s.pool.connect();
  const inTx = async <T>(f: () => Promise<T>): Promise<T> => {
    await c.query('BEGIN');
    try {
      return await f();
    } finally {
      await c.query('ROLLBACK');
    }
  };
  const unions = async (ids: string[]) =>
    inTx(async () =>
      (await c.query({ text: `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${TRANSITION_SQL}`, values: [ids, 900, 'sweep', Date.now(), 0, randomUUID(), []] })).rows
        .map((r) => r['QUERY PLAN'] as string)
        .filter((l) => l.includes('Recursive Union')),
    );
  try {
    // The customer with a window in progress stands after one without in the batch, so a guard
    // read from the batch's first row would miss it.
    for (const ids of [
      [iNo, iIn, iPast, iLater],
      [iLater, iPast, iIn, iNo],
    ]) {
      const { events } = await inTx(() => recordLightChanges(c, ids, 'sweep', 900, Date.now()));
      t.same(
        Object.fromEntries(events.map((e) => [e.instance_id, e.to])),
        { [iIn]: 'maintenance', [iNo]: 'red', [iPast]: 'red', [iLater]: 'red' },
        'in the window: maintenance; no window, one that ended, one still to come: red',
      );
    }
    const idle = await unions([iNo, iPast]);
    t.equal(idle.length, 2, 'the statement holds both chains');
    t.ok(
      idle.every((l) => l.includes('never executed')),
      `neither chain runs for a batch whose customers have no window ending after its judgement (${idle.map((l) => l.trim()).join('; ')})`,
    );
    const mixed = await unions([iNo, iIn, iPast, iLater]);
    t.match(mixed[0] ?? '', /loops=2\)/, 'the forward chain runs twice, for the two instances whose customer has a window ending after the judgement (in it, or still to come), not for the other two');
  } finally {
    c.release();
  }
});
