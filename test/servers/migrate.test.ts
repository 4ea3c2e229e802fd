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
