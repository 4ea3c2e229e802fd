// Data retention's pure part (lib/store/retention.ts): which ClickHouse partitions are wholly past
// their retention, and the statement that drops one on one server and on a cluster (the replicated
// `<name>_local` ON CLUSTER, never the Distributed table). The servers' side:
// test/servers/retention.test.ts.
import t from 'tap';
import { partitionsPastRetention, dropPartitionSql, CH_RETENTION_TABLES } from '../../lib/store/retention.js';
import { clickhouseSchema } from '../../lib/store/schema.js';

t.test('a partition goes only when its whole month (or day) is before the cutoff', async (t) => {
  const cut = new Map([['heartbeats', { month: 202605, day: 20260521 }]]);
  const parts = ['202501', '202604', '202605', '202606', '20260520', '20260521', 'tuple()'].map((partition) => ({ table: 'heartbeats', partition }));
  t.same(
    partitionsPastRetention(parts, cut).map((p) => p.partition),
    ['202501', '202604', '20260520'],
    'months before the cutoff month, days before the cutoff day; the cutoff month stays whole, an unknown shape stays',
  );
  t.same(partitionsPastRetention([{ table: 'diagnostics', partition: '201001' }], cut), [], 'a table without a cutoff (retention 0) keeps everything');
});

t.test('the drop statement: the table on one server, <name>_local ON CLUSTER on a cluster', async (t) => {
  t.equal(dropPartitionSql({ table: 'heartbeats', partition: '202501' }, { database: 'fleet' }), 'ALTER TABLE heartbeats DROP PARTITION 202501');
  t.equal(
    dropPartitionSql({ table: 'light_events', partition: '202501' }, { database: 'fleet', cluster: 'fleet_cluster' }),
    'ALTER TABLE fleet.light_events_local ON CLUSTER fleet_cluster DROP PARTITION 202501',
  );
  t.throws(() => dropPartitionSql({ table: 'heartbeats', partition: "202501; DROP TABLE x" }, { database: 'fleet' }), /not a month or day partition/);
  t.throws(() => dropPartitionSql({ table: 'x y', partition: '202501' }, { database: 'fleet' }), /unsafe/);
});

t.test('every ClickHouse table of the schema is covered, and each is partitioned by month', async (t) => {
  const tables = clickhouseSchema.flatMap((m) => m.statements.flatMap((st) => ('table' in st ? [st] : [])));
  t.same(tables.map((x) => x.table).sort(), [...CH_RETENTION_TABLES].sort(), 'the retention knows every table that grows with time');
  for (const x of tables) t.match(x.partition, /^toYYYYMM\(\w+\)$/, `${x.table}: monthly partitions`);
});
