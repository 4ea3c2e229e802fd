// A ClickHouse table partitioned anew (docs/operations.md "Data retention", "Finer partitions"):
// ClickHouse cannot change a table's partition key, so the migration copies the table into one
// with the new key and puts it in the old one's place, while the workers go on writing and every
// row stays readable under the table's name. Run by lib/store/migrate.ts for a `repartition`
// statement of lib/store/schema.ts; idempotent, and a run stopped anywhere is finished by the next.
//
// The steps, for table T (on a cluster: the replicated `T_local` on the replica asked; its
// Distributed table and the `T_v` view name T, so they follow the swap):
//   1. `T_by_day` (the new key) is made with T's columns.
//   2. Every month of T is copied into it, one statement per month, while T takes the writes.
//      Before a month is copied, what an interrupted run left of it in `T_by_day` is dropped
//      (those days hold nothing else yet), so a month is never copied twice. Its highest block
//      number (every insert takes the next one; a merge keeps the highest of its parts) is
//      recorded in Postgres.
//   3. Swap: `RENAME TABLE T TO T_by_month, T_by_day TO T`, one statement. From here the workers
//      write into the new table; an insert that meets the instant between the two names waits
//      for ClickHouse as any missing table does (lib/infra/storage-errors.ts), nothing is lost.
//   4. What reached `T_by_month` after its month's copy (the current month's writes until the
//      swap; a report applied late into an older month: a backlog, a dead letter replayed) is
//      copied into T: the rows of the parts holding a block above the recorded one. Then the
//      month is recorded again and dropped from `T_by_month`. A part that a merge made of old and
//      new blocks is copied whole, so its old rows stand twice in the raw table until merges fold
//      them (the key is the same): exact through FINAL and the `*_v` views, as after a redelivered
//      batch. The same holds for a copy in step 4 that ran while its record did not.
//   5. `T_by_month` is dropped, the records deleted.
// Every row is readable under T's name throughout, except those written in the seconds between a
// month's copy in step 2 and the swap, until step 4 has copied them.
//
// Cost: every row is read and written once (step 2; step 4 copies only what came since), at the speed
// of INSERT … SELECT; the migration holds the process that runs it (`fleet migrate`, a start)
// until it is done, so a large table is best repartitioned from `fleet migrate` before the new
// release's processes start. On a cluster only the one-shard layout is supported (a copy on one
// replica reaches the others by replication); more shards are refused with an error.
import type { Pool } from '../infra/postgres.js';
import { chIdent, queryRows, type ClickHouseClient } from '../infra/clickhouse.js';
import { chStr } from '../infra/clickhouse-sql.js';
import { localTable, type ChTarget, type RepartitionSpec } from './schema.js';

export type { RepartitionSpec };

/** Test hooks: throw at a step, as a process killed there would stop. */
export type RepartitionStop = 'after-first-copy' | 'before-swap' | 'after-swap' | 'after-copy-before-record' | 'before-drop';

const BY_DAY = '_by_day';
const BY_MONTH = '_by_month';

/** Names of the three tables, as statements write them. */
function names(spec: RepartitionSpec, target: ChTarget) {
  const t = chIdent(spec.table);
  const local = (n: string) => (target.cluster ? localTable(n) : n);
  const q = (n: string) => (target.cluster ? `${chIdent(target.database)}.${n}` : n);
  return {
    live: local(t),
    fresh: local(`${t}${BY_DAY}`),
    old: local(`${t}${BY_MONTH}`),
    q,
    on: target.cluster ? ` ON CLUSTER ${chIdent(target.cluster)}` : '',
    zk: (n: string) => `/clickhouse/tables/{shard}/${target.database}/${n}`,
  };
}

async function tableExists(ch: ClickHouseClient, name: string): Promise<boolean> {
  const r = await queryRows<{ n: string }>(ch, `SELECT count() AS n FROM system.tables WHERE database = currentDatabase() AND name = ${chStr(name)}`);
  return Number(r[0]!.n) > 0;
}

/** Active partitions of a table with the highest block number in each. */
async function partitions(ch: ClickHouseClient, name: string): Promise<Map<string, number>> {
  const rows = await queryRows<{ partition: string; block: string }>(
    ch,
    `SELECT partition, max(max_block_number) AS block FROM system.parts
      WHERE database = currentDatabase() AND table = ${chStr(name)} AND active GROUP BY partition ORDER BY partition`,
  );
  return new Map(rows.map((r) => [r.partition, Number(r.block)]));
}

/** The active parts of one partition holding a block above `after` (an insert since then, or a merge of one). */
async function partsAbove(ch: ClickHouseClient, name: string, partition: string, after: number): Promise<string[]> {
  const rows = await queryRows<{ name: string }>(
    ch,
    `SELECT name FROM system.parts WHERE database = currentDatabase() AND table = ${chStr(name)} AND active
        AND partition = ${chStr(partition)} AND max_block_number > ${Math.floor(after)} ORDER BY name`,
  );
  return rows.map((r) => r.name);
}

async function recorded(pool: Pool, table: string): Promise<Map<number, number>> {
  const r = await pool.query<{ month: number; max_block: string }>(`SELECT month, max_block FROM clickhouse_repartitions WHERE tbl = $1`, [table]);
  return new Map(r.rows.map((x) => [x.month, Number(x.max_block)]));
}

async function record(pool: Pool, table: string, month: number, block: number): Promise<void> {
  await pool.query(
    `INSERT INTO clickhouse_repartitions (tbl, month, max_block) VALUES ($1, $2, $3)
     ON CONFLICT (tbl, month) DO UPDATE SET max_block = EXCLUDED.max_block, copied_at = now()`,
    [table, month, block],
  );
}

/** The month (YYYYMM) a partition of the old key or of the new one belongs to. */
const monthOf = (partition: string) => Number(partition.slice(0, 6));

/** A partition as DROP PARTITION takes it: the number (both keys are UInt32). */
function partitionLiteral(p: string): string {
  if (!/^\d{6}(\d{2})?$/.test(p)) throw new Error(`not a month or day partition: ${p}`);
  return p;
}

/**
 * A copy is never taken for a repeated insert: a replicated table drops a block it has seen
 * (insert_deduplicate), also after its partition was dropped, and a month copied again after an
 * interruption has the very same blocks.
 */
const COPY = { clickhouse_settings: { insert_deduplicate: 0 } } as const;

/**
 * Repartitions `spec.table` (module comment). Returns what it did, for the migration's log; a
 * table that has the new key already returns `done` at once.
 */
export async function repartition(
  ch: ClickHouseClient,
  pool: Pool,
  target: ChTarget,
  spec: RepartitionSpec,
  o: { stopAt?: RepartitionStop; log?: (msg: string) => void } = {},
): Promise<{ state: 'done' | 'repartitioned'; copied: number[] }> {
  const n = names(spec, target);
  const log = o.log ?? (() => {});
  const stop = (at: RepartitionStop) => {
    if (o.stopAt === at) throw new Error(`repartition of ${spec.table} stopped ${at} (test)`);
  };
  if (target.cluster) {
    const shards = await queryRows<{ n: string }>(ch, `SELECT uniqExact(shard_num) AS n FROM system.clusters WHERE cluster = ${chStr(target.cluster)}`);
    if (Number(shards[0]!.n) > 1) throw new Error(`repartition of ${spec.table}: cluster ${target.cluster} has ${shards[0]!.n} shards; only one is supported (docs/operations.md "Finer partitions")`);
  }
  const swapped = await tableExists(ch, n.old);
  if (!swapped) {
    const create = await queryRows<{ q: string }>(ch, `SELECT create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name = ${chStr(n.live)}`);
    if (create[0]?.q.includes(`PARTITION BY ${spec.to}`)) return { state: 'done', copied: [] };
  }
  const copied: number[] = [];
  const sync = async (name: string) => {
    if (target.cluster) await ch.command({ query: `SYSTEM SYNC REPLICA ${n.q(name)}` });
  };

  if (!swapped) {
    // 1. The new table, with the live table's columns (defaults included).
    const engine = target.cluster
      ? `ReplicatedReplacingMergeTree('${n.zk(`${spec.table}${BY_DAY}`)}', '{replica}'${spec.ver ? `, ${spec.ver}` : ''})`
      : `ReplacingMergeTree(${spec.ver ?? ''})`;
    await ch.command({
      query: `CREATE TABLE IF NOT EXISTS ${n.q(n.fresh)}${n.on} AS ${n.q(n.live)} ENGINE = ${engine} PARTITION BY ${spec.to} ORDER BY (${spec.orderBy})`,
    });
    // 2. Every month, each once.
    const done = await recorded(pool, spec.table);
    await sync(n.live);
    for (const [p, block] of await partitions(ch, n.live)) {
      const month = monthOf(p);
      if (done.has(month)) continue;
      for (const d of (await partitions(ch, n.fresh)).keys()) {
        if (monthOf(d) === month) await ch.command({ query: `ALTER TABLE ${n.q(n.fresh)}${n.on} DROP PARTITION ${partitionLiteral(d)}` });
      }
      await ch.command({ query: `INSERT INTO ${n.q(n.fresh)} SELECT * FROM ${n.q(n.live)} WHERE ${spec.from} = ${month}`, ...COPY });
      await record(pool, spec.table, month, block);
      copied.push(month);
      log(`clickhouse ${spec.table}: month ${month} copied into ${n.fresh} (before the swap)`);
      stop('after-first-copy');
    }
    stop('before-swap');
    // 3. The swap.
    await ch.command({ query: `RENAME TABLE ${n.q(n.live)} TO ${n.q(n.old)}, ${n.q(n.fresh)} TO ${n.q(n.live)}${n.on}` });
    log(`clickhouse ${spec.table}: ${n.fresh} is ${n.live} now; ${n.old} holds the old partitions`);
    stop('after-swap');
  }

  // 4. What reached the old table after its copy: the rows of the parts with a later block (all
  // of a month no copy recorded).
  const done = await recorded(pool, spec.table);
  await sync(n.old);
  for (const [p, block] of await partitions(ch, n.old)) {
    const month = monthOf(p);
    const at = done.get(month);
    if (at === undefined || block > at) {
      const parts = at === undefined ? null : await partsAbove(ch, n.old, p, at);
      const which = parts ? ` AND _part IN (${parts.map(chStr).join(', ')})` : '';
      await ch.command({ query: `INSERT INTO ${n.q(n.live)} SELECT * FROM ${n.q(n.old)} WHERE ${spec.from} = ${month}${which}`, ...COPY });
      stop('after-copy-before-record');
      await record(pool, spec.table, month, block);
      copied.push(month);
      log(`clickhouse ${spec.table}: month ${month}${parts ? `, ${parts.length} parts written since its copy,` : ''} copied into ${n.live} (after the swap)`);
    }
    stop('before-drop');
    await ch.command({ query: `ALTER TABLE ${n.q(n.old)}${n.on} DROP PARTITION ${partitionLiteral(p)}` });
  }
  // 5. The old table, empty now, and the records.
  await ch.command({ query: `DROP TABLE IF EXISTS ${n.q(n.old)}${n.on}` });
  await pool.query(`DELETE FROM clickhouse_repartitions WHERE tbl = $1`, [spec.table]);
  return { state: 'repartitioned', copied };
}
