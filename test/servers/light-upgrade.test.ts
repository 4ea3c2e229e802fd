// Upgrading a database whose stored colours are still in `instances` (before migration
// 0023-instance-lights): every instance keeps its colour, its time, reason and sequence number in
// `instance_lights`, and its recheck time says what the sweep must look at (never later than the
// change it waits for, so no colour is missed; not "now" for every instance, so the first sweep
// after the upgrade does not judge the whole fleet and repair every heartbeat key). The old
// columns and the colour indexes are gone; an instance inserted afterwards gets its row.
import t from 'tap';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { testStack, dbUrl, adminQuery } from '../helpers/stack.js';
import { migrate, migratePostgresBefore } from '../../lib/store/migrate.js';

const s = await testStack(t, 'lightupgrade', { gateway: false, worker: false, api: false });
const name = `t_upg${randomBytes(3).toString('hex')}`;
const server = s.env.DATABASE_URL!;
const admin = (sql: string) => adminQuery(sql, server);
await admin(`CREATE DATABASE "${name}"`);
t.teardown(() => admin(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));

const db = new pg.Client({ connectionString: dbUrl(name, server) });
await db.connect();
t.teardown(() => db.end());

await migratePostgresBefore(db, '0023-instance-lights');

// The fleet as the code before stored it: the colour recorded in instances.
const customer = (await db.query<{ id: string }>(`INSERT INTO customers (slug, name) VALUES ('up', 'up') RETURNING id`)).rows[0]!.id;
await db.query(`UPDATE licences SET tier = 'paid', device_limit = 1000 WHERE customer_id = $1`, [customer]);
const cases = {
  // name: [light, last heartbeat (s ago), status, last warning (s ago), maintenance end (s from now), retired]
  fresh: ['green', 10, 'running', null, null, false],
  silent: ['green', 400, 'running', null, null, false],
  red: ['red', 4000, 'running', null, null, false],
  redError: ['red', 10, 'error', null, null, false],
  ruleMoved: ['red', 100, 'running', null, null, false],
  warned: ['yellow', 10, 'running', 30, null, false],
  degraded: ['yellow', 10, 'degraded', null, null, false],
  inMaintenance: ['maintenance', 4000, 'running', null, 600, false],
  grey: ['grey', null, null, null, null, false],
  retired: ['green', 400, 'running', null, null, true],
} as const;
const ids: Record<string, string> = {};
for (const [slug, [light, hbAgo, status, warnAgo, mu, retired]] of Object.entries(cases)) {
  const m = (await db.query<{ id: string }>(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, $2, now(), now()) RETURNING id`, [customer, slug])).rows[0]!.id;
  const hb = hbAgo === null ? null : `now() - interval '${hbAgo} seconds'`;
  ids[slug] = (
    await db.query<{ id: string }>(
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, status, status_at, last_warning_at, maintenance_until,
                              deadline, late_at, light, light_since, light_reason, light_seq, light_judged_at, retired_at)
       VALUES ($1, $2, 'agent', now() - interval '1 day', COALESCE(${hb ?? 'NULL'}, now() - interval '1 day'), ${hb ?? 'NULL'}, $3, ${hb ?? 'NULL'},
               ${warnAgo === null ? 'NULL' : `now() - interval '${warnAgo} seconds'`}, ${mu === null ? 'NULL' : `now() + interval '${mu} seconds'`},
               light_deadline(${hb ?? 'NULL'}, NULL), light_late_at(${hb ?? 'NULL'}, NULL, NULL), $4, now() - interval '1 hour', 'as stored', 7, now() - interval '1 minute',
               ${retired ? 'now()' : 'NULL'})
       RETURNING id`,
      [customer, m, status, light],
    )
  ).rows[0]!.id;
}

t.test('the upgrade keeps every stored colour and says when each is to be judged again', async (t) => {
  const before = new Map(
    (await db.query<{ id: string; since: number; judged: number }>(`SELECT id, extract(epoch FROM light_since)::float8 AS since, extract(epoch FROM light_judged_at)::float8 AS judged FROM instances`)).rows.map(
      (r) => [r.id, [r.since, r.judged]],
    ),
  );
  await migrate({ databaseUrl: dbUrl(name, server), clickhouseUrl: s.env.CLICKHOUSE_URL!, clickhouseDatabase: s.env.CLICKHOUSE_DB! });
  const rows = (
    await db.query<{ id: string; light: string; light_reason: string; light_seq: string; since: number; judged: number; recheck_s: number | null }>(
      `SELECT l.instance_id AS id, l.light, l.light_reason, l.light_seq::text, extract(epoch FROM l.light_since)::float8 AS since,
              extract(epoch FROM l.light_judged_at)::float8 AS judged, extract(epoch FROM l.recheck_at - now())::float8 AS recheck_s
         FROM instance_lights l`,
    )
  ).rows;
  const by = new Map(rows.map((r) => [r.id, r]));
  t.equal(rows.length, Object.keys(cases).length, 'one row per instance, retired ones too');
  for (const [slug, [light]] of Object.entries(cases)) {
    const r = by.get(ids[slug]!)!;
    t.same([r.light, r.light_reason, r.light_seq, [r.since, r.judged]], [light, 'as stored', '7', before.get(ids[slug]!)], `${slug}: colour, reason, seq, since and judgement time kept`);
  }
  const recheck = (slug: keyof typeof cases) => by.get(ids[slug]!)!.recheck_s;
  // Seconds from now, a few after the migration ran: within 30 s of what each should be.
  const near = (slug: keyof typeof cases, want: number) => recheck(slug) !== null && Math.abs(recheck(slug)! - want) < 30;
  t.ok(near('fresh', 290), `green: at its deadline (${recheck('fresh')} s)`);
  t.ok(near('silent', -100), `green past its deadline: due already, the first sweep turns it red (${recheck('silent')} s)`);
  t.equal(recheck('red'), null, 'red for silence: nothing but a report changes it');
  t.equal(recheck('redError'), null, 'red for status error: the same');
  t.ok(near('ruleMoved', 0), `red whose deadline lies ahead (a rule moved it): judged at once, not at its deadline 200 s ahead (${recheck('ruleMoved')} s)`);
  t.ok(near('warned', -30) && recheck('warned')! <= -30, `yellow for a warning: at the warning itself, early (the window is the workers' setting) (${recheck('warned')} s)`);
  t.ok(near('degraded', 290), `yellow for status degraded: at its deadline (${recheck('degraded')} s)`);
  t.ok(near('inMaintenance', 600), `maintenance: at its end (${recheck('inMaintenance')} s)`);
  t.equal(recheck('grey'), null, 'grey: nothing but a report');
  t.equal(recheck('retired'), null, 'retired: never again');
  const cols = (await db.query<{ c: string }>(`SELECT column_name AS c FROM information_schema.columns WHERE table_name = 'instances' AND column_name LIKE 'light%'`)).rows;
  t.same(cols, [], 'no colour column left in instances');
  const idx = (await db.query<{ i: string }>(`SELECT indexname AS i FROM pg_indexes WHERE tablename = 'instances' AND indexname LIKE 'instances_light%'`)).rows;
  t.same(idx, [], 'no colour index left on instances');
  const m = (await db.query<{ id: string }>(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, 'later', now(), now()) RETURNING id`, [customer])).rows[0]!.id;
  const later = (await db.query<{ id: string }>(`INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at) VALUES ($1, $2, 'agent', now(), now()) RETURNING id`, [customer, m])).rows[0]!.id;
  const row = (await db.query(`SELECT light, light_seq::text AS seq, recheck_at, customer_id FROM instance_lights WHERE instance_id = $1`, [later])).rows[0];
  t.same(row, { light: 'grey', seq: '0', recheck_at: null, customer_id: customer }, 'an instance inserted afterwards has its row: grey, no change yet, its customer named');
  // 0024: every row names its instance's customer (the api's colour filter and counts read them by customer).
  const owners = (await db.query<{ n: string }>(`SELECT count(*)::text AS n FROM instance_lights l JOIN instances i ON i.id = l.instance_id WHERE l.customer_id = i.customer_id`)).rows[0]!.n;
  t.equal(owners, String(Object.keys(cases).length + 1), "every row names its instance's customer, the upgraded ones too");
  // The keys, added after the copy, are the ones a table declared with them has.
  const keys = (
    await db.query<{ name: string; def: string }>(
      `SELECT conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'instance_lights'::regclass AND contype IN ('p', 'f') ORDER BY conname`,
    )
  ).rows;
  t.same(keys, [
    { name: 'instance_lights_instance_id_fkey', def: 'FOREIGN KEY (instance_id) REFERENCES instances(id) ON DELETE CASCADE' },
    { name: 'instance_lights_pkey', def: 'PRIMARY KEY (instance_id)' },
  ]);
  await db.query('DELETE FROM instances WHERE id = $1', [later]);
  t.equal((await db.query('SELECT 1 FROM instance_lights WHERE instance_id = $1', [later])).rowCount, 0, 'an instance deleted takes its row along');
});
