// The plan of the traffic light's recording statement over a batch, on a fleet large enough for the
// planner to choose (lib/store/light-events.ts TRANSITION_PLANNING): the batch's instances are
// read by probes of the primary key, never by hashing every instance (with the default
// random_page_cost Postgres scanned and hashed the whole table for every batch of 5,000, spilling
// to disk at 100,000, so a change cost more the larger the fleet); and the setting is the
// statement's alone: the transaction's is back afterwards.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';
import { recordLightChanges, TRANSITION_PLANNING, TRANSITION_SQL } from '../../lib/store/light-events.js';

const N = 40_000;
const BATCH = 5000;
const s = await testStack(t, 'lightplan', { gateway: false, worker: false, api: false });
await s.pool.query(
  `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
   SELECT $1, 'm' || g, now() - interval '1 day', now() - interval '10 minutes' FROM generate_series(1, $2::int) g`,
  [s.customer.id, N],
);
await s.pool.query(
  `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, deadline, late_at)
   SELECT customer_id, id, 'agent', now() - interval '1 day', now() - interval '10 minutes', now() - interval '10 minutes',
          light_deadline(now() - interval '10 minutes', NULL), light_late_at(now() - interval '10 minutes', NULL, NULL)
     FROM machines WHERE customer_id = $1`,
  [s.customer.id],
);
await s.pool.query(
  `UPDATE instance_lights l SET light = 'green', light_since = now() - interval '1 day', light_judged_at = now() - interval '10 minutes', recheck_at = i.deadline
     FROM instances i WHERE i.id = l.instance_id AND i.customer_id = $1`,
  [s.customer.id],
);
await s.pool.query('ANALYZE instances; ANALYZE machines; ANALYZE instance_lights');
const ids = (await s.pool.query<{ id: string }>('SELECT id FROM instances WHERE customer_id = $1 ORDER BY id LIMIT $2', [s.customer.id, BATCH])).rows.map((r) => r.id);

t.test(`a batch of ${BATCH} of ${N} instances: read by probes of the primary key, not by a scan of the table`, async (t) => {
  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query(TRANSITION_PLANNING.set);
    const plan = (await c.query({ text: `EXPLAIN ${TRANSITION_SQL}`, values: [ids, 900, 'sweep', Date.now(), 0, randomUUID(), ids.map((_, k) => (k % 2 ? Date.now() - 1000 : null))] })).rows.map((r) => r['QUERY PLAN'] as string);
    // `x` is the statement's read of the batch (CTE base); the UPDATEs' own joins are the
    // planner's choice by the size of the batch's changes.
    const read = plan.filter((l) => /on instances x\s/.test(l));
    t.same(read.filter((l) => /Seq Scan/.test(l)), [], 'no sequential scan of instances to read the batch');
    t.ok(read.some((l) => /Index Scan using instances_pkey on instances x\s/.test(l)), `the batch read by its primary key (${read.map((l) => l.replace(/^[\s>-]+/, '').split('  ')[0]).join('; ')})`);
    // And its stored colours (instance_lights, `y`) the same way.
    const lights = plan.filter((l) => /on instance_lights y\s/.test(l));
    t.same(lights.filter((l) => /Seq Scan/.test(l)), [], 'no sequential scan of instance_lights to read the batch');
    t.ok(lights.some((l) => /Index Scan using instance_lights_pkey on instance_lights y\s/.test(l)), `the stored colours read by their primary key (${lights.map((l) => l.replace(/^[\s>-]+/, '').split('  ')[0]).join('; ')})`);
  } finally {
    await c.query('ROLLBACK');
    c.release();
  }
});

t.test("the statement's setting does not outlive it: the transaction's own is back", async (t) => {
  const c = await s.pool.connect();
  try {
    const before = (await c.query<{ v: string }>("SELECT current_setting('random_page_cost') AS v")).rows[0]!.v;
    t.not(before, '1.1', `the server's setting is another (${before}), so the test can tell`);
    await c.query('BEGIN');
    const { events } = await recordLightChanges(c, ids.slice(0, 100), 'sweep', 900, Date.now());
    t.equal(events.length, 100, 'the batch recorded (each silent instance turns red)');
    t.equal((await c.query<{ v: string }>("SELECT current_setting('random_page_cost') AS v")).rows[0]!.v, before, 'inside the transaction, after the statement');
    await c.query('ROLLBACK');
  } finally {
    c.release();
  }
});


// The expiry listener's and the sweep's other statements over a batch of ids (lib/store/instances.ts
// BATCH_IDS): the same probes. Written as `id = ANY($1)` each scanned every row of both tables
// (at 100,000 instances 40-60 ms a batch: bench/README.md "The light's own statements").
t.test(`the listener's and the sweep's reads of a batch of ${BATCH} of ${N}: probes of the primary keys, the rows of id = ANY`, async (t) => {
  const { lockFreeInstances, notRed, silenceTimes, silentButLit } = await import('../../lib/store/instances.js');
  // Some of the batch made yellow and red, one id twice and one that is no instance.
  await s.pool.query(`UPDATE instance_lights SET light = CASE WHEN random() < 0.5 THEN 'yellow' ELSE 'red' END WHERE instance_id = ANY($1::uuid[])`, [ids.slice(0, 400)]);
  await s.pool.query(`UPDATE instances SET deadline = now() - interval '1 minute' WHERE id = ANY($1::uuid[])`, [ids.slice(200, 700)]);
  const batch = [...ids, ids[3]!, '00000000-0000-4000-8000-000000000000'];
  // Each statement as the functions send it, for its plan below.
  const captured: { sql: string; values: unknown[] }[] = [];
  const spyOn = <D extends { query: (q: string, v: unknown[]) => Promise<unknown> }>(db: D) =>
    ({ query: (q: string, v: unknown[]) => (captured.push({ sql: q, values: v }), db.query(q, v)) }) as unknown as D;
  const spy = spyOn(s.pool);
  const got = {
    notRed: (await notRed(spy, batch)).sort(),
    silenceTimes: (await silenceTimes(spy, batch)).map((x) => `${x.id} ${x.at}`).sort(),
    silentButLit: (await silentButLit(spy, batch)).map((x) => `${x.id} ${x.due}`).sort(),
  };
  // The same rows as the plain forms, which read every row (the old statements).
  const plain = async (sql: string) => (await s.pool.query(sql, [batch])).rows;
  const { silenceAtSql, silentSql, overdueSql } = await import('../../lib/domain/traffic-light.js');
  t.same(got.notRed, (await plain(`SELECT instance_id AS id FROM instance_lights WHERE instance_id = ANY($1::uuid[]) AND light <> 'red'`)).map((r) => r.id).sort(), 'notRed: the same ids');
  t.same(
    got.silenceTimes,
    (await plain(`SELECT i.id, (extract(epoch FROM ${silenceAtSql('i')}) * 1000)::float8 AS at FROM instances i JOIN instance_lights l ON l.instance_id = i.id
                   WHERE i.id = ANY($1::uuid[]) AND i.retired_at IS NULL AND l.light IN ('green', 'yellow')`)).filter((r) => r.at !== null).map((r) => `${r.id} ${r.at}`).sort(),
    'silenceTimes: the same ids and times',
  );
  t.same(
    got.silentButLit,
    (await plain(`SELECT i.id, (extract(epoch FROM CASE WHEN ${silentSql('i')} THEN i.deadline ELSE i.late_at END) * 1000)::float8 AS due
                    FROM instances i JOIN instance_lights l ON l.instance_id = i.id WHERE i.id = ANY($1::uuid[]) AND i.retired_at IS NULL
                     AND ((l.light IN ('green', 'yellow', 'late') AND ${silentSql('i')}) OR (l.light IN ('green', 'yellow') AND ${overdueSql('i')}))`)).map((r) => `${r.id} ${r.due}`).sort(),
    'silentButLit: the same ids and times',
  );
  t.ok(got.silentButLit.length >= 300 && got.notRed.length > 4000 && got.silenceTimes.length > 4000, `every form has rows to compare (${got.notRed.length}, ${got.silenceTimes.length}, ${got.silentButLit.length})`);

  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    const locked = await lockFreeInstances(spyOn(c), batch);
    t.equal(locked.length, BATCH, 'lockFreeInstances: each instance once (the id given twice too), the unknown id not');
    // A second transaction takes none of them: they are held, and skipped rather than waited for.
    const other = await s.pool.connect();
    try {
      await other.query('BEGIN');
      t.same(await lockFreeInstances(other, ids.slice(0, 50)), [], 'rows another transaction holds are skipped');
      await other.query('ROLLBACK');
    } finally {
      other.release();
    }
    t.equal(captured.length, 4, 'the four statements were sent (each planned below)');
    for (const { sql, values } of captured) {
      const plan = (await c.query({ text: `EXPLAIN ${sql}`, values })).rows.map((r) => r['QUERY PLAN'] as string);
      const name = sql.slice(0, 60).replace(/\s+/g, ' ');
      t.same(plan.filter((l) => /Seq Scan on instance/.test(l)), [], `${name}…: no sequential scan of instances or instance_lights`);
      t.same(plan.filter((l) => /Hash Join|Merge Join/.test(l)), [], `${name}…: no join of whole tables`);
      t.ok(plan.some((l) => /Index Scan using instance(s|_lights)_pkey/.test(l)), `${name}…: probes of a primary key`);
    }
    await c.query('ROLLBACK');
  } finally {
    c.release();
  }
});
