// Timeout rules (lib/store/timeout-rules.ts) over this file's own Postgres database, without
// processes: which rule wins for each value, that a glob matches only what it says, that the SQL
// functions and the statements' expressions compute the same times, that a new instance takes its
// rule (also when it races a rule change), that a change recomputes every instance across chunk
// boundaries and only the customer's own, that a recompute left half-way is found again, and that
// changed defaults move the deadlines of exactly the instances without a rule. Hostile: the whole
// quota of the longest near-miss patterns under ingest; Postgres refusing writes half-way through a
// recompute (the rest is finished later).
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';
import { applyBatch, type ApplyDeps } from '../../workers/apply-batch.js';
import { HeartbeatState } from '../../workers/heartbeat-state.js';
import {
  applyLightDefaults, createTimeoutRule, deleteTimeoutRule, globToLike, recomputeCustomer, unfinishedRecomputes, updateTimeoutRule, RECOMPUTE_CHUNK,
  type TimeoutRuleInput,
} from '../../lib/store/timeout-rules.js';
import { deadlineSql, lateAtSql } from '../../lib/domain/traffic-light.js';
import type { Report } from '../../lib/contract/messages.js';
import type { Customer } from '../../lib/store/customers.js';

const s = await testStack(t, 'tmrules', { gateway: false, worker: false, api: false });
const prefix = s.env.REDIS_PREFIX!;
const other = (await s.newCustomer(`tmo-${randomUUID().slice(0, 8)}`)).customer;

// Every heartbeat straight to Postgres (interval 0): these tests are about the rows.
const deps: ApplyDeps = {
  pool: s.pool,
  ch: s.ch,
  redis: s.redis,
  redisPrefix: prefix,
  heartbeats: new HeartbeatState(s.redis, prefix, { heartbeatTimeoutMs: 300_000, pgIntervalMs: 0, idCacheSize: 10_000 }),
  idempotencyTtlS: 60,
  tsWindow: { pastMs: 30 * 86_400_000, futureMs: 86_400_000 },
  ackTimeoutS: 3600,
};

const hb = (machine: string, software: string, c: Customer = s.customer, receivedAt = Date.now()): Report => ({
  id: randomUUID(), kind: 'heartbeat', customerId: c.id, customer: c.slug, machine, software, tokenId: randomUUID(), receivedAt, body: {},
});

interface Row {
  id: string;
  software: string;
  timeout_s: number | null;
  late_percent: number | null;
  deadline: Date | null;
  late_at: Date | null;
  last_heartbeat_at: Date;
}

async function row(machine: string, software: string, c: Customer = s.customer): Promise<Row> {
  const r = await s.pool.query<Row>(
    `SELECT i.id, i.software, i.timeout_s, i.late_percent, i.deadline, i.late_at, i.last_heartbeat_at
       FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.customer_id = $1 AND m.slug = $2 AND i.software = $3`,
    [c.id, machine, software],
  );
  return r.rows[0]!;
}

const secs = (a: Date | null, b: Date) => (a ? Math.round((a.getTime() - b.getTime()) / 1000) : null);

const rule = (over: Partial<TimeoutRuleInput>): TimeoutRuleInput => ({
  scope: 'customer', softwarePattern: null, instanceId: null, timeoutS: null, latePercent: null, description: '', createdBy: null, ...over,
});

async function create(c: Customer, over: Partial<TimeoutRuleInput>) {
  const out = await createTimeoutRule(s.pool, c.id, rule(over), 1000);
  if (!('created' in out)) throw new Error(`not created: ${JSON.stringify(out)}`);
  return out;
}

t.test('a glob matches what it says: * any run, every other character itself (LIKE characters too)', async (t) => {
  const like = async (glob: string, text: string) =>
    (await s.pool.query<{ m: boolean }>('SELECT $1::text LIKE $2::text AS m', [text, globToLike(glob)])).rows[0]!.m;
  t.ok(await like('agent-*', 'agent-x'));
  t.ok(await like('agent-*', 'agent-'));
  t.notOk(await like('agent-*', 'agentx'));
  t.ok(await like('a_b', 'a_b'));
  t.notOk(await like('a_b', 'axb'), '_ is not a wildcard');
  t.notOk(await like('50%', '50 percent'), '% is not a wildcard');
  t.ok(await like('50%', '50%'));
  t.ok(await like('c:\\*', 'c:\\tools'), 'a backslash is itself');
  t.notOk(await like('c:\\*', 'c:tools'));
  t.ok(await like('*-db-*', 'pg-db-1'));
  t.notOk(await like('Agent', 'agent'), 'case-sensitive');
});

t.test("the statements' times equal the SQL functions' (the trigger uses those)", async (t) => {
  const cases: [number | null, number | null][] = [[null, null], [60, null], [null, 50], [3600, 80], [45, 0], [2_592_000, 99]];
  for (const [timeout, late] of cases) {
    const r = await s.pool.query<{ a: Date; b: Date; c: Date | null; d: Date | null }>(
      `SELECT ${deadlineSql('h', 't')} AS a, light_deadline(h, t) AS b, ${lateAtSql('h', 't', 'p')} AS c, light_late_at(h, t, p) AS d
         FROM (SELECT now() AS h, $1::int AS t, $2::int AS p) x`,
      [timeout, late],
    );
    const x = r.rows[0]!;
    t.equal(x.a.getTime(), x.b.getTime(), `deadline, timeout ${timeout}`);
    t.equal(x.c?.getTime() ?? null, x.d?.getTime() ?? null, `late time, timeout ${timeout}, late ${late}`);
  }
});

t.test('each value from the most specific rule that sets it; another customer is never touched', async (t) => {
  await applyBatch(deps, [hb('p1', 'agent-web'), hb('p1', 'agent-db'), hb('p1', 'backup'), hb('p1', 'agent-web', other)], []);
  const before = await row('p1', 'agent-web');
  t.equal(secs(before.deadline, before.last_heartbeat_at), 300, 'the default timeout');
  t.equal(before.late_at, null, 'no late share by default');

  const cust = await create(s.customer, { timeoutS: 600, latePercent: 50 });
  t.equal(cust.recomputed, 3, 'the customer rule changed its three instances');
  const pat = await create(s.customer, { scope: 'software', softwarePattern: 'agent-*', timeoutS: 120 });
  t.equal(pat.recomputed, 2);
  const longer = await create(s.customer, { scope: 'software', softwarePattern: 'agent-w*', latePercent: 75 });
  t.equal(longer.recomputed, 1);
  const inst = (await row('p1', 'agent-web')).id;
  await create(s.customer, { scope: 'instance', instanceId: inst, timeoutS: 90 });

  const web = await row('p1', 'agent-web');
  t.equal(web.timeout_s, 90, 'timeout: the instance rule');
  t.equal(web.late_percent, 75, 'late share: the longest matching pattern (the instance rule sets none)');
  t.equal(secs(web.deadline, web.last_heartbeat_at), 90);
  t.equal(secs(web.late_at, web.last_heartbeat_at), 68, '75 % of 90 s (67.5, shown rounded)');
  const db = await row('p1', 'agent-db');
  t.same([db.timeout_s, db.late_percent], [120, 50], 'agent-db: the pattern timeout, the customer late share');
  const backup = await row('p1', 'backup');
  t.same([backup.timeout_s, backup.late_percent], [600, 50], 'backup: the customer rule');
  t.equal(secs(backup.late_at, backup.last_heartbeat_at), 300);
  const theirs = await row('p1', 'agent-web', other);
  t.same([theirs.timeout_s, theirs.late_percent, secs(theirs.deadline, theirs.last_heartbeat_at)], [null, null, 300], "the other customer's instance of the same name keeps the default");

  // Equal lengths: the first in byte order wins.
  await create(s.customer, { scope: 'software', softwarePattern: 'back*', timeoutS: 200 });
  await create(s.customer, { scope: 'software', softwarePattern: '*ckup', timeoutS: 400 });
  t.equal((await row('p1', 'backup')).timeout_s, 400, "'*ckup' < 'back*' in byte order (both 5 characters)");

  // A rule's value cleared falls back; a rule deleted falls back.
  const changed = await updateTimeoutRule(s.pool, s.customer.id, longer.created.id, { latePercent: 0 });
  t.ok(changed && 'updated' in changed);
  t.equal((await row('p1', 'agent-web')).late_percent, 0, 'late 0 on a pattern: no late colour for it');
  t.equal((await row('p1', 'agent-web')).late_at, null);
  t.same(await updateTimeoutRule(s.pool, s.customer.id, pat.created.id, { timeoutS: null }), { empty: true }, 'a rule keeps one value');
  t.equal(await updateTimeoutRule(s.pool, other.id, pat.created.id, { timeoutS: 30 }), null, "another customer's rule: not found");
  t.equal(await deleteTimeoutRule(s.pool, other.id, pat.created.id), null);
  const del = await deleteTimeoutRule(s.pool, s.customer.id, pat.created.id);
  t.same(del, { recomputed: 1 }, 'agent-db falls back to the customer rule');
  t.equal((await row('p1', 'agent-db')).timeout_s, 600);
  t.same(await unfinishedRecomputes(s.pool, -60), [], 'every recompute finished: no mark left');
});

t.test('a target, once; an instance of another customer is not found; the quota holds', async (t) => {
  const c = (await s.newCustomer(`tmq-${randomUUID().slice(0, 8)}`)).customer;
  await applyBatch(deps, [hb('q1', 'agent', c)], []);
  const ok = await createTimeoutRule(s.pool, c.id, rule({ timeoutS: 100 }), 2);
  t.ok('created' in ok);
  const again = await createTimeoutRule(s.pool, c.id, rule({ timeoutS: 200 }), 2);
  t.same(again, { exists: 'created' in ok ? ok.created.id : '' }, 'a second customer rule names the first');
  const foreign = (await row('p1', 'backup')).id;
  t.same(await createTimeoutRule(s.pool, c.id, rule({ scope: 'instance', instanceId: foreign, timeoutS: 100 }), 2), { noInstance: true });
  t.ok('created' in (await createTimeoutRule(s.pool, c.id, rule({ scope: 'software', softwarePattern: 'a*', timeoutS: 100 }), 2)));
  t.same(await createTimeoutRule(s.pool, c.id, rule({ scope: 'software', softwarePattern: 'b*', timeoutS: 100 }), 2), { full: { count: 2, max: 2 } });
});

t.test('a new instance takes its rule when it is inserted', async (t) => {
  const c = (await s.newCustomer(`tmn-${randomUUID().slice(0, 8)}`)).customer;
  await create(c, { scope: 'software', softwarePattern: 'kiosk-*', timeoutS: 40, latePercent: 25 });
  await applyBatch(deps, [hb('n1', 'kiosk-a', c), hb('n1', 'other', c)], []);
  const k = await row('n1', 'kiosk-a', c);
  t.same([k.timeout_s, k.late_percent, secs(k.deadline, k.last_heartbeat_at), secs(k.late_at, k.last_heartbeat_at)], [40, 25, 40, 10]);
  const o = await row('n1', 'other', c);
  t.same([o.timeout_s, secs(o.deadline, o.last_heartbeat_at)], [null, 300]);
  // Later heartbeats move the times with the rule.
  const later = Date.now() + 5000;
  await applyBatch(deps, [hb('n1', 'kiosk-a', c, later)], []);
  const k2 = await row('n1', 'kiosk-a', c);
  t.equal(k2.deadline!.getTime(), later + 40_000, 'deadline = newest heartbeat + 40 s');
  t.equal(k2.late_at!.getTime(), later + 10_000);
});

t.test('a new instance racing a rule change ends with the rule, whichever commits first', async (t) => {
  const c = (await s.newCustomer(`tmr-${randomUUID().slice(0, 8)}`)).customer;
  // 1. The insert holds its customer lock (uncommitted) while the rule change starts: the change
  //    waits, then its recompute sees the committed instance.
  await applyBatch(deps, [hb('seed', 'agent', c)], []);
  const machine = (await s.pool.query<{ id: string }>('SELECT id FROM machines WHERE customer_id = $1', [c.id])).rows[0]!.id;
  const tx = await s.pool.connect();
  await tx.query('BEGIN');
  await tx.query(`INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at) VALUES ($1, $2, 'race-1', now(), now(), now())`, [c.id, machine]);
  let done = false;
  const change = create(c, { timeoutS: 77 }).then((x) => ((done = true), x));
  await new Promise((r) => setTimeout(r, 300));
  t.notOk(done, 'the rule change waits for the insert');
  await tx.query('COMMIT');
  tx.release();
  await change;
  t.equal((await row('seed', 'race-1', c)).timeout_s, 77, 'the recompute saw the instance inserted meanwhile');
  // 2. The rule change holds the customer's row (uncommitted) while an instance is inserted: the
  //    insert's trigger waits, then reads the new rule.
  const tx2 = await s.pool.connect();
  await tx2.query('BEGIN');
  await tx2.query('SELECT 1 FROM customers WHERE id = $1 FOR UPDATE', [c.id]);
  await tx2.query(`INSERT INTO timeout_rules (customer_id, scope, software_pattern, software_like, timeout_s) VALUES ($1, 'software', 'race-*', 'race-%', 55)`, [c.id]);
  let inserted = false;
  const insert = applyBatch(deps, [hb('seed', 'race-2', c)], []).then(() => (inserted = true));
  await new Promise((r) => setTimeout(r, 300));
  t.notOk(inserted, 'the insert waits for the rule change');
  await tx2.query('COMMIT');
  tx2.release();
  await insert;
  t.equal((await row('seed', 'race-2', c)).timeout_s, 55, "the new instance's trigger read the rule committed meanwhile");
});

t.test('a customer rule recomputes every instance across chunk boundaries; a half-done one is found again', async (t) => {
  const c = (await s.newCustomer(`tmc-${randomUUID().slice(0, 8)}`)).customer;
  const n = RECOMPUTE_CHUNK * 2 + 37;
  const reports: Report[] = [];
  for (let i = 0; i < n; i++) reports.push(hb(`c${String(i % 50).padStart(2, '0')}`, `sw-${i}`, c));
  for (let i = 0; i < reports.length; i += 500) await applyBatch(deps, reports.slice(i, i + 500), []);
  const out = await create(c, { timeoutS: 1234 });
  t.equal(out.recomputed, n, 'every instance changed');
  const r = await s.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM instances WHERE customer_id = $1 AND timeout_s = 1234 AND deadline = last_heartbeat_at + interval \'1234 s\'', [c.id]);
  t.equal(r.rows[0]!.n, n, 'every deadline follows');
  // An api that died after the rule's commit: the mark stays, the sweep's query finds it once old.
  await s.pool.query(`UPDATE instances SET timeout_s = NULL, deadline = last_heartbeat_at WHERE customer_id = $1`, [c.id]);
  await s.pool.query(`INSERT INTO timeout_recomputes (customer_id, requested_at) VALUES ($1, now() - interval '2 min')`, [c.id]);
  t.same(await unfinishedRecomputes(s.pool, 60), [c.id]);
  t.equal(await recomputeCustomer(s.pool, c.id), n);
  t.same(await unfinishedRecomputes(s.pool, 60), []);
  const again = await s.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM instances WHERE customer_id = $1 AND timeout_s = 1234 AND deadline = last_heartbeat_at + interval \'1234 s\'', [c.id]);
  t.equal(again.rows[0]!.n, n);
});

t.test('changed defaults move the deadlines of the instances without a rule, and only theirs', async (t) => {
  const c = (await s.newCustomer(`tmd-${randomUUID().slice(0, 8)}`)).customer;
  await create(c, { scope: 'software', softwarePattern: 'ruled', timeoutS: 500 });
  await applyBatch(deps, [hb('d1', 'ruled', c), hb('d1', 'plain', c)], []);
  t.notOk(await applyLightDefaults(s.pool, 300, 0), 'the defaults in force: nothing to do');
  t.ok(await applyLightDefaults(s.pool, 900, 40));
  const plain = await row('d1', 'plain', c);
  t.same([secs(plain.deadline, plain.last_heartbeat_at), secs(plain.late_at, plain.last_heartbeat_at)], [900, 360]);
  const ruled = await row('d1', 'ruled', c);
  t.same([secs(ruled.deadline, ruled.last_heartbeat_at), secs(ruled.late_at, ruled.last_heartbeat_at)], [500, 200], 'its own timeout, the default late share');
  // A run that stopped half-way (pending) is done again by the next start, with the same values.
  await s.pool.query('UPDATE light_defaults SET pending = true');
  await s.pool.query(`UPDATE instances SET deadline = last_heartbeat_at WHERE customer_id = $1`, [c.id]);
  t.ok(await applyLightDefaults(s.pool, 900, 40));
  t.equal(secs((await row('d1', 'plain', c)).deadline, plain.last_heartbeat_at), 900);
  t.equal((await s.pool.query('SELECT pending FROM light_defaults')).rows[0].pending, false);
  t.ok(await applyLightDefaults(s.pool, 300, 0), 'back to the defaults of the other tests');
});

t.test('hostile: the whole quota of the longest patterns, each a near miss for LIKE, under ingest; every new instance takes its longest match', async (t) => {
  const c = (await s.newCustomer(`tmh-${randomUUID().slice(0, 8)}`)).customer;
  const QUOTA = 1000;
  // 998 patterns of up to 128 characters, 61 stars each: `*a*a…*a*-<i>` (a software of 60 a's and
  // more matches only its own i); 'a*' sets the late share for all of them; the customer rule the rest.
  const long = (i: number) => `${'*a'.repeat(60)}*-${i}`;
  for (let i = 0; i < QUOTA - 2; i++) await create(c, { scope: 'software', softwarePattern: long(i), timeoutS: 100 + i });
  t.ok(long(QUOTA - 3).length <= 128, 'the longest pattern the api takes');
  await create(c, { scope: 'software', softwarePattern: 'a*', latePercent: 10 });
  await create(c, { scope: 'customer', timeoutS: 6000 });
  t.same(await createTimeoutRule(s.pool, c.id, rule({ scope: 'software', softwarePattern: 'z*', timeoutS: 100 }), QUOTA), { full: { count: QUOTA, max: QUOTA } }, 'the quota is full');

  // 300 new instances (software names of the longest allowed, 64 characters) in one batch, with
  // another customer's instances of the same names in it.
  const name = (i: number) => `${'a'.repeat(64 - 1 - String(i).length)}-${i}`;
  const reports: Report[] = [];
  for (let i = 0; i < 300; i++) reports.push(hb(`h${i % 10}`, name(i), c), hb(`h${i % 10}`, name(i), other));
  reports.push(hb('h0', 'b-x', c));
  await applyBatch(deps, reports, []);
  const rows = (
    await s.pool.query<{ software: string; timeout_s: number | null; late_percent: number | null; customer_id: string }>(
      `SELECT software, timeout_s, late_percent, customer_id FROM instances WHERE customer_id = ANY($1::uuid[]) AND machine_id IN (SELECT id FROM machines WHERE slug LIKE 'h%')`,
      [[c.id, other.id]],
    )
  ).rows;
  const mine = rows.filter((r) => r.customer_id === c.id);
  t.equal(mine.length, 301, 'every instance of the customer');
  const wrong = mine.filter((r) => {
    if (r.software === 'b-x') return r.timeout_s !== 6000 || r.late_percent !== null;
    const i = Number(r.software.split('-')[1]);
    return r.timeout_s !== 100 + i || r.late_percent !== 10;
  });
  t.same(wrong, [], 'each: the timeout of its own long pattern, the late share of a*, b-x the customer rule');
  t.same(rows.filter((r) => r.customer_id === other.id && (r.timeout_s !== null || r.late_percent !== null)), [], "the other customer's instances of the same names: no rule");
});

t.test('Postgres refuses writes half-way through a recompute: the rule stands, the instances done stay done, the rest is finished later', async (t) => {
  const c = (await s.newCustomer(`tmr-${randomUUID().slice(0, 8)}`)).customer;
  const n = RECOMPUTE_CHUNK + 200;
  const reports: Report[] = [];
  for (let i = 0; i < n; i++) reports.push(hb(`r${String(i % 20).padStart(2, '0')}`, `sw-${String(i).padStart(4, '0')}`, c));
  for (let i = 0; i < reports.length; i += 500) await applyBatch(deps, reports.slice(i, i + 500), []);
  // The second chunk's first instance in the recompute's order (machine, software, id) refuses, as
  // a read-only Postgres answers (SQLSTATE 25006).
  const order = (await s.pool.query<{ id: string }>(`SELECT id FROM instances WHERE customer_id = $1 ORDER BY machine, software, id`, [c.id])).rows;
  const victim = order[RECOMPUTE_CHUNK]!.id;
  const fn = `refuse_${randomUUID().replace(/-/g, '')}`;
  await s.pool.query(`CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      RAISE EXCEPTION 'cannot execute UPDATE in a read-only transaction' USING ERRCODE = '25006'; END $$`);
  await s.pool.query(`CREATE TRIGGER ${fn} BEFORE UPDATE ON instances FOR EACH ROW WHEN (OLD.id = '${victim}'::uuid) EXECUTE FUNCTION ${fn}()`);
  try {
    await t.rejects(create(c, { timeoutS: 777 }), { name: 'DependencyUnavailableError' }, 'the call fails as an outage (the api answers 503), not as bad input');
  } finally {
    await s.pool.query(`DROP TRIGGER ${fn} ON instances`);
    await s.pool.query(`DROP FUNCTION ${fn}()`);
  }
  const rules = await s.pool.query(`SELECT timeout_s FROM timeout_rules WHERE customer_id = $1`, [c.id]);
  t.same(rules.rows, [{ timeout_s: 777 }], 'the rule was committed before the recompute');
  const done = await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instances WHERE customer_id = $1 AND timeout_s = 777`, [c.id]);
  t.equal(done.rows[0]!.n, RECOMPUTE_CHUNK, 'the first chunk committed, the second rolled back whole');
  await s.pool.query(`UPDATE timeout_recomputes SET requested_at = now() - interval '2 min' WHERE customer_id = $1`, [c.id]);
  t.ok((await unfinishedRecomputes(s.pool, 60)).includes(c.id), 'its mark stayed: the sweep finds it');
  t.equal(await recomputeCustomer(s.pool, c.id), n - RECOMPUTE_CHUNK, 'the rest, once Postgres writes again');
  const all = await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instances WHERE customer_id = $1 AND timeout_s = 777 AND deadline = last_heartbeat_at + interval '777 s'`, [c.id]);
  t.equal(all.rows[0]!.n, n, 'every instance and deadline');
  t.notOk((await unfinishedRecomputes(s.pool, -60)).includes(c.id), 'no mark left');
});
