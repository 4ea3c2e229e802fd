// Migrations applied again after an interruption (lib/store/migrate.ts): ClickHouse has no
// transactions, so a run that stopped after a migration's statements and before its record applies
// it again. 18.16 has no `ADD COLUMN IF NOT EXISTS`; the column an interrupted run added answers
// code 44, which must count as done. Before the fix the code was looked for on a ClickHouseError,
// which @clickhouse/client never builds from 18.16's error text: the second run failed and no
// process could start.
import t from 'tap';
import { testStack, chRows } from '../helpers/stack.js';
import { migrate } from '../../lib/store/migrate.js';
import { clickhouseSchema } from '../../lib/store/schema.js';

const s = await testStack(t, 'migrate', { gateway: false, worker: false, api: false });
const target = { databaseUrl: s.env.DATABASE_URL!, clickhouseUrl: s.env.CLICKHOUSE_URL!, clickhouseDatabase: s.env.CLICKHOUSE_DB! };

t.test('a ClickHouse migration with ADD COLUMN, applied but not recorded, is applied again without error', async (t) => {
  const withAdd = clickhouseSchema.find((m) => m.statements.some((st) => 'addColumn' in st));
  t.ok(withAdd, 'a migration adds a column');
  t.same(await migrate(target), [], 'the stack is migrated: nothing left to do');
  // The record of applied migrations (a Log table: no DELETE) written again without that one.
  const ids = (await chRows<{ id: string }>(s.ch, 'SELECT id FROM schema_migrations ORDER BY id')).map((r) => r.id);
  t.ok(ids.includes(withAdd!.id), `${withAdd!.id} recorded`);
  await s.ch.command({ query: 'DROP TABLE schema_migrations' });
  await s.ch.command({ query: 'CREATE TABLE schema_migrations (id String, applied_at DateTime) ENGINE = Log' });
  await s.ch.insert({ table: 'schema_migrations', values: ids.filter((id) => id !== withAdd!.id).map((id) => ({ id, applied_at: 0 })), format: 'JSONEachRow' });

  t.same(await migrate(target), [`clickhouse ${withAdd!.id}`], 'applied again: the existing column is no error');
  const columns = (await chRows<{ name: string }>(s.ch, "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'heartbeats'")).map((r) => r.name);
  for (const st of withAdd!.statements) {
    if ('addColumn' in st && st.to === 'heartbeats') t.ok(columns.includes(st.addColumn.split(' ')[0]!), `${st.addColumn.split(' ')[0]} once`);
  }
  t.same(await migrate(target), [], 'recorded now: a third run has nothing to do');
});

t.test('any other error of an ADD COLUMN still stops the migration', async (t) => {
  await s.ch.command({ query: 'DROP TABLE schema_migrations' });
  await s.ch.command({ query: 'CREATE TABLE schema_migrations (id String, applied_at DateTime) ENGINE = Log' });
  // Every migration is applied again. `heartbeats` is a view now: its CREATE TABLE IF NOT EXISTS
  // passes, and adding a column to it fails with another code than 44.
  await s.ch.command({ query: 'RENAME TABLE heartbeats TO heartbeats_aside' });
  await s.ch.command({ query: 'CREATE VIEW heartbeats AS SELECT 1 AS x' });
  t.teardown(async () => {
    await s.ch.command({ query: 'DROP TABLE IF EXISTS heartbeats' });
    await s.ch.command({ query: 'RENAME TABLE heartbeats_aside TO heartbeats' });
  });
  await t.rejects(migrate(target), /Code: \d+/, 'not taken for done');
  const ids = (await chRows<{ id: string }>(s.ch, 'SELECT id FROM schema_migrations')).map((r) => r.id);
  const withAdd = clickhouseSchema.find((m) => m.statements.some((st) => 'addColumn' in st && st.to === 'heartbeats'))!;
  t.notOk(ids.includes(withAdd.id), `${withAdd.id} not recorded`);
});

// Deleting a machine, an instance or a user looks its rows up in every table that refers to it
// (ON DELETE CASCADE / SET NULL). Without an index that begins with the referring column that is
// a scan of the whole table per deleted row: a customer of 100,000 machines took longer than five
// minutes to delete (instances_live_software leaves retired rows out and cannot serve it).
t.test('every foreign key is served by an index that begins with its column', async (t) => {
  const missing = await s.pool.query<{ fk: string }>(
    `SELECT c.conrelid::regclass || '.' || a.attname || ' -> ' || c.confrelid::regclass AS fk
       FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
      WHERE c.contype = 'f'
        AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.conrelid AND i.indkey[0] = c.conkey[1])
      ORDER BY 1`,
  );
  t.same(missing.rows.map((r) => r.fk), [], 'no foreign key without an index');
  const fks = await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_constraint WHERE contype = 'f'`);
  t.ok(fks.rows[0]!.n >= 30, `the check saw the schema's foreign keys (${fks.rows[0]!.n})`);
});

// Each index of instances costs every write of a row an entry (a written heartbeat moves the
// indexed last_seen_at, so no row write is a HOT update): each one here names what reads it, and an
// index nobody reads (0025 dropped three) or a new one without a reader fails this test.
t.test('every index of instances has a reader', async (t) => {
  const readers: Record<string, string> = {
    instances_pkey: 'every lookup by id',
    instances_live_software: 'the ingest upsert: one live instance per machine and software',
    instances_customer_machine: 'GET /api/instances in the default order (machine, software)',
    instances_customer_software: 'sort=software',
    instances_customer_last_seen: 'sort=last_seen',
    instances_customer_status: 'sort=status',
    instances_machine_trgm: 'the machine search (substring)',
    instances_retired: 'retired instances of a machine and software',
    instances_customer_maintenance: "a customer's instances in maintenance",
    instances_machine_id: 'the foreign key to machines',
    instances_retired_by: 'the foreign key to users (partial: retired rows only)',
  };
  const got = (await s.pool.query<{ i: string }>(`SELECT indexname AS i FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'instances' ORDER BY 1`)).rows.map((r) => r.i);
  t.same(got, Object.keys(readers).sort(), 'the indexes of instances are exactly those with a reader');
});

// The recording statement of the traffic light over a batch spent 1.7 s of 2.1 s in JIT
// compilation (migration 0022-scale): the app's sessions run without it.
t.test('JIT is off for the application database', async (t) => {
  const c = await s.pool.connect();
  try {
    t.equal((await c.query<{ jit: string }>('SHOW jit')).rows[0]!.jit, 'off', 'a new session of the app has jit off');
  } finally {
    c.release();
  }
});

// A customer's deletion (offboarding) cascades over its machines, instances and their rows:
// each step an index lookup now. 3,000 machines with an instance each, deleted in one statement;
// another customer's rows stay.
t.test('deleting a customer of 3,000 machines cascades through indexes, and leaves the other customer alone', async (t) => {
  const mk = async (slug: string) => (await s.pool.query<{ id: string }>(`INSERT INTO customers (slug) VALUES ($1) RETURNING id`, [slug])).rows[0]!.id;
  const a = await mk(`fk-a-${Date.now()}`);
  const b = await mk(`fk-b-${Date.now()}`);
  for (const cid of [a, b]) {
    await s.pool.query(
      `WITH m AS (INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
                   SELECT $1, 'm-' || g, now(), now() FROM generate_series(1, 3000) g RETURNING id, customer_id)
       INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at) SELECT customer_id, id, 'agent', now(), now() FROM m`,
      [cid],
    );
  }
  const count = async (cid: string) =>
    (await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instances WHERE customer_id = $1`, [cid])).rows[0]!.n;
  t.equal(await count(a), 3000);
  const plan = await s.pool.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN DELETE FROM instances WHERE machine_id = (SELECT id FROM machines WHERE customer_id = $1 LIMIT 1)`,
    [a],
  );
  t.match(plan.rows.map((r) => r['QUERY PLAN']).join('\n'), /instances_machine_id/, "a machine's instances are found by the index");
  await s.pool.query('DELETE FROM customers WHERE id = $1', [a]);
  t.equal(await count(a), 0, "the customer's instances went with it");
  t.equal(await count(b), 3000, "the other customer's stay");
  await s.pool.query('DELETE FROM customers WHERE id = $1', [b]);
});
