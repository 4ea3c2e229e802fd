// lib/store/schema.ts renders one ClickHouse schema two ways: for one server (plain ReplacingMergeTree)
// and for a cluster (CLICKHOUSE_CLUSTER: replicated `<table>_local`, Distributed under the name).
// The cluster tests run the rendered DDL on 18.16; this pins its shape.
import t from 'tap';
import { clickhouseMigrations, clickhouseMigrationsFor } from '../../lib/store/schema.js';

const one = clickhouseMigrations.flatMap((m) => m.sql);
const cluster = clickhouseMigrationsFor({ cluster: 'fleet', database: 'fleet' }).flatMap((m) => m.sql);
const flat = (s: string) => s.replace(/\s+/g, ' ');

t.test('one server: plain ReplacingMergeTree tables, no cluster, no _local', async (t) => {
  t.ok(one.some((s) => /^CREATE TABLE IF NOT EXISTS heartbeats \(/.test(s) && /ENGINE = ReplacingMergeTree\(\) PARTITION BY toYYYYMM\(received_at\)/.test(s)));
  t.ok(one.some((s) => /CREATE TABLE IF NOT EXISTS host_metrics .*ENGINE = ReplacingMergeTree\(ver\)/s.test(s)), 'the version column');
  t.ok(one.includes('ALTER TABLE heartbeats ADD COLUMN clock_skew UInt8 DEFAULT 0'));
  t.notOk(one.some((s) => /ON CLUSTER|_local|Replicated|Distributed/.test(s)));
});

t.test('a cluster: replicated local tables, Distributed tables over them, everything ON CLUSTER', async (t) => {
  t.ok(cluster.every((s) => /ON CLUSTER fleet/.test(s)), 'every statement ON CLUSTER');
  const local = cluster.find((s) => s.startsWith('CREATE TABLE IF NOT EXISTS fleet.heartbeats_local'))!;
  t.match(local, /ENGINE = ReplicatedReplacingMergeTree\('\/clickhouse\/tables\/\{shard\}\/fleet\/heartbeats', '\{replica\}'\) PARTITION BY/);
  t.match(cluster.find((s) => s.startsWith('CREATE TABLE IF NOT EXISTS fleet.host_metrics_local'))!, /'\{replica\}', ver\)/, 'the version column after the replica');
  const dist = cluster.filter((s) => s.startsWith('CREATE TABLE IF NOT EXISTS fleet.heartbeats ON CLUSTER'));
  t.equal(dist.length, 3, 'made, then made again after each of two added columns');
  t.match(dist[0]!, /ENGINE = Distributed\(fleet, fleet, heartbeats_local\)$/);
  t.notMatch(dist[0]!, /clock_skew/);
  t.match(flat(dist[2]!), /clock_skew UInt8 DEFAULT 0, agent_ts String DEFAULT ''\) ENGINE = Distributed/, 'the last one has both added columns');
  const i = cluster.indexOf('ALTER TABLE fleet.heartbeats_local ON CLUSTER fleet ADD COLUMN clock_skew UInt8 DEFAULT 0');
  t.ok(i > 0, 'a column goes to the replicated table');
  t.equal(cluster[i + 1], 'DROP TABLE IF EXISTS fleet.heartbeats ON CLUSTER fleet', 'then the Distributed table is made again');
  t.notOk(cluster.some((s) => /^ALTER TABLE fleet\.heartbeats ON/.test(s)), 'never ALTER ON CLUSTER of the Distributed table (18.16 refuses it)');
  t.ok(cluster.includes('CREATE VIEW IF NOT EXISTS fleet.heartbeats_v ON CLUSTER fleet AS SELECT * FROM fleet.heartbeats FINAL'));
});

t.test('0006-day-partitions: no SQL of its own, the two tables with their sorting keys to repartition', async (t) => {
  for (const target of [{ database: '' }, { cluster: 'fleet', database: 'fleet' }]) {
    const m = clickhouseMigrationsFor(target).find((x) => x.id === '0006-day-partitions')!;
    t.same(m.sql, []);
    t.same(m.repartition, [
      { table: 'heartbeats', from: 'toYYYYMM(received_at)', to: 'toYYYYMMDD(received_at)', orderBy: 'customer_id, instance_id, received_ms, report_id' },
      { table: 'ingest_rejections', from: 'toYYYYMM(received_at)', to: 'toYYYYMMDD(received_at)', orderBy: 'customer_id, received_ms, id' },
    ]);
  }
  t.ok(clickhouseMigrationsFor({ database: '' }).filter((x) => x.id !== '0006-day-partitions').every((x) => x.repartition.length === 0), 'no other migration repartitions');
});
