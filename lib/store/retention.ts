// Data retention (docs/operations.md "Data retention"): what is past its age is deleted, what is
// still live never. Run by the scheduled job of workers/retention.ts; every statement is here.
//
// Postgres: rows that have ended (a delivered webhook attempt, a finished command, a used reset
// link, …) longer ago than the table's retention, deleted in chunks of `chunk` rows, one statement
// (one short transaction) per chunk, repeated until a chunk comes back short: a backlog of millions
// never holds a lock for long. Rows another transaction holds are skipped (SKIP LOCKED): whatever
// is being changed right now is live, and the next run finds it if it is still past its age.
//
// ClickHouse: whole partitions are dropped (`ALTER TABLE … DROP PARTITION`), never rows deleted.
// Every table is partitioned by month (`toYYYYMM(<time>)`, lib/store/schema.ts), so a partition
// goes once every row it can hold is past the retention: its month ended before now − retention.
// The granularity is one month (a table keeps up to a month more than its retention) until a later
// migration makes partitions finer; a day partition (`toYYYYMMDD`) is understood already. TTL is not
// used: ClickHouse 18.16 (Debian's) has none, and one path serves every release. The months are
// compared by ClickHouse itself (`toYYYYMM(cutoff)`), in the server's time zone, which is the zone
// its partitions were cut in.
import type { Pool } from '../infra/postgres.js';
import { chIdent, queryRows, type ClickHouseClient } from '../infra/clickhouse.js';
import { chInt, chStr } from '../infra/clickhouse-sql.js';
import { localTable, type ChTarget } from './schema.js';

// ---- Postgres

export const PG_RETENTION_TABLES = ['webhook_deliveries', 'commands', 'invitations', 'sessions', 'password_resets'] as const;
export type PgRetentionTable = (typeof PG_RETENTION_TABLES)[number];

/** Rows removed by one pruning, per table; `command_events` went with their commands (ON DELETE CASCADE). */
export type PgPruned = Record<PgRetentionTable | 'command_events', number>;

/** The instant the retention of `$1` days ends at, by the database's clock. */
const CUT = '(now() - make_interval(days => $1::int))';

interface Rule {
  /** The table's key (the chunk is chosen by it). */
  key: string[];
  /** Ended longer ago than the retention; the table is `x`. Never true of a live row. */
  ended: string;
  /** Rows of another table that go with these (ON DELETE CASCADE), counted. */
  cascade?: { table: string; column: string };
}

const RULES: Record<PgRetentionTable, Rule> = {
  // Delivered or failed, its last attempt past the retention. A row still `retrying` only when its
  // next attempt is past the retention too: its job was lost (Redis), nothing will try it again.
  webhook_deliveries: {
    key: ['webhook_id', 'event_id'],
    ended: `x.last_attempt_at < ${CUT} AND (x.state <> 'retrying' OR COALESCE(x.next_attempt_at, x.last_attempt_at) < ${CUT})`,
  },
  // Ended (succeeded, failed, expired, timed_out, cancelled), by the server's time of its last
  // change (finished_at may be the agent's clock); queued and delivered commands are open.
  commands: {
    key: ['id'],
    ended: `x.state NOT IN ('queued', 'delivered') AND x.updated_at < ${CUT}`,
    cascade: { table: 'command_events', column: 'command_id' },
  },
  // Accepted, revoked, or (neither) expired: by that time. An invitation resent gets a new expiry,
  // so only one nobody renewed goes. Each customer's first invitation stays: it dates the onboarding
  // checklist's "teammate" step (lib/store/onboarding.ts), one row per customer.
  invitations: {
    key: ['id'],
    ended: `COALESCE(x.accepted_at, x.revoked_at, x.expires_at) < ${CUT}
            AND EXISTS (SELECT 1 FROM invitations f WHERE f.customer_id = x.customer_id AND (f.created_at, f.id) < (x.created_at, x.id))`,
  },
  // Revoked or expired: a request naming a session that is gone is refused like a revoked one
  // (lib/store/sessions.ts, the LEFT JOIN finds nothing).
  sessions: { key: ['id'], ended: `(x.revoked_at < ${CUT} OR x.expires_at < ${CUT})` },
  // Used or expired: neither can be used again.
  password_resets: { key: ['id'], ended: `(x.used_at < ${CUT} OR x.expires_at < ${CUT})` },
};

function pruneSql(table: PgRetentionTable): string {
  const r = RULES[table];
  const cols = r.key.map((k) => `x.${k}`).join(', ');
  const match = r.key.map((k) => `t.${k} = d.${k}`).join(' AND ');
  const cascade = r.cascade ? `cascaded AS (SELECT count(*)::int AS n FROM ${r.cascade.table} e JOIN doomed d ON e.${r.cascade.column} = d.id),` : '';
  return `WITH doomed AS (SELECT ${cols} FROM ${table} x WHERE ${r.ended} LIMIT $2 FOR UPDATE OF x SKIP LOCKED),
            ${cascade}
            gone AS (DELETE FROM ${table} t USING doomed d WHERE ${match} RETURNING 1)
          SELECT (SELECT count(*)::int FROM gone) AS n, ${r.cascade ? '(SELECT n FROM cascaded)' : '0'} AS cascaded`;
}

/**
 * Deletes what has ended longer ago than its table's retention (`days`; 0 or absent: kept
 * forever), `chunk` rows per statement, each its own transaction. Returns the rows removed.
 */
export async function prunePostgres(pool: Pool, days: Partial<Record<PgRetentionTable, number>>, o: { chunk?: number } = {}): Promise<PgPruned> {
  const chunk = o.chunk ?? 5000;
  const out = Object.fromEntries([...PG_RETENTION_TABLES, 'command_events'].map((t) => [t, 0])) as PgPruned;
  for (const table of PG_RETENTION_TABLES) {
    const d = days[table] ?? 0;
    if (!(d > 0)) continue;
    const sql = pruneSql(table);
    for (;;) {
      const r = await pool.query<{ n: number; cascaded: number }>(sql, [d, chunk]);
      const { n, cascaded } = r.rows[0]!;
      out[table] += n;
      if (RULES[table].cascade) out[RULES[table].cascade!.table as 'command_events'] += cascaded;
      if (n < chunk) break;
    }
  }
  return out;
}

// ---- ClickHouse

/** Every ClickHouse table that grows with time (lib/store/schema.ts `clickhouseSchema`). */
export const CH_RETENTION_TABLES = ['heartbeats', 'diagnostics', 'status_history', 'light_events', 'host_metrics', 'ingest_rejections'] as const;
export type ChRetentionTable = (typeof CH_RETENTION_TABLES)[number];

/** A partition of one of the app's tables (its name as the app knows it, not `<name>_local`). */
export interface ChPartition {
  table: string;
  /** As system.parts writes it: `202401` (a month), `20240115` (a day). */
  partition: string;
}

/** The month and the day (server time zone) of the instant a table's retention ends at. */
export interface ChCutoff {
  month: number;
  day: number;
}

/**
 * The partitions whose every row is past the retention: a month (YYYYMM) before the cutoff's
 * month, a day (YYYYMMDD) before its day. A table without a cutoff keeps everything, and so does a
 * partition of another shape (a later migration's: it waits for this code to learn it).
 */
export function partitionsPastRetention(parts: ChPartition[], cutoffs: Map<string, ChCutoff>): ChPartition[] {
  return parts.filter((p) => {
    const cut = cutoffs.get(p.table);
    if (!cut) return false;
    if (/^\d{6}$/.test(p.partition)) return Number(p.partition) < cut.month;
    if (/^\d{8}$/.test(p.partition)) return Number(p.partition) < cut.day;
    return false;
  });
}

/**
 * The statement that drops one partition: on one server the table itself; on a cluster the
 * replicated `<name>_local` ON CLUSTER (the Distributed table holds no data; ClickHouse runs it
 * on one replica per shard and the others follow through ZooKeeper).
 */
export function dropPartitionSql(p: ChPartition, target: ChTarget): string {
  if (!/^\d{6}(\d{2})?$/.test(p.partition)) throw new Error(`not a month or day partition: ${p.partition}`);
  const table = chIdent(p.table);
  if (!target.cluster) return `ALTER TABLE ${table} DROP PARTITION ${p.partition}`;
  return `ALTER TABLE ${chIdent(target.database)}.${localTable(table)} ON CLUSTER ${chIdent(target.cluster)} DROP PARTITION ${p.partition}`;
}

/** Each table's cutoff (now − its retention), as ClickHouse's month and day; tables kept forever have none. */
async function cutoffsOf(ch: ClickHouseClient, days: Partial<Record<ChRetentionTable, number>>, now: number): Promise<Map<string, ChCutoff>> {
  const cuts = CH_RETENTION_TABLES.flatMap((t) => {
    const d = days[t] ?? 0;
    const s = Math.floor(now / 1000) - d * 86_400;
    return d > 0 && s > 0 ? [[t, s] as const] : [];
  });
  const out = new Map<string, ChCutoff>();
  if (cuts.length === 0) return out;
  const cols = cuts.flatMap(([t, s]) => [`toYYYYMM(toDateTime(${chInt(s)})) AS m_${t}`, `toYYYYMMDD(toDateTime(${chInt(s)})) AS d_${t}`]);
  const [row] = await queryRows<Record<string, number | string>>(ch, `SELECT ${cols.join(', ')}`);
  for (const [t] of cuts) out.set(t, { month: Number(row![`m_${t}`]), day: Number(row![`d_${t}`]) });
  return out;
}

/** The active partitions of the app's tables in this database (on a cluster: of `<name>_local` on the replica asked). */
export async function listPartitions(ch: ClickHouseClient, target: ChTarget): Promise<ChPartition[]> {
  const names = new Map(CH_RETENTION_TABLES.map((t) => [target.cluster ? localTable(t) : t, t]));
  const rows = await queryRows<{ table: string; partition: string }>(
    ch,
    `SELECT DISTINCT table, partition FROM system.parts
      WHERE database = currentDatabase() AND active AND table IN (${[...names.keys()].map(chStr).join(', ')})
      ORDER BY table, partition`,
  );
  return rows.map((r) => ({ table: names.get(r.table)!, partition: r.partition }));
}

export interface DropResult {
  dropped: ChPartition[];
  failed: { partition: ChPartition; error: unknown }[];
}

/**
 * Drops every partition past its table's retention (`days`; 0 or absent: kept forever), judged at
 * `now` (ms). A partition that cannot be dropped (e.g. larger than the server's
 * max_partition_size_to_drop) is reported in `failed` and the others still go.
 */
export async function dropExpiredPartitions(
  ch: ClickHouseClient,
  target: ChTarget,
  days: Partial<Record<ChRetentionTable, number>>,
  now: number,
): Promise<DropResult> {
  const out: DropResult = { dropped: [], failed: [] };
  const cutoffs = await cutoffsOf(ch, days, now);
  if (cutoffs.size === 0) return out;
  for (const p of partitionsPastRetention(await listPartitions(ch, target), cutoffs)) {
    try {
      await ch.command({ query: dropPartitionSql(p, target) });
      out.dropped.push(p);
    } catch (error) {
      out.failed.push({ partition: p, error });
    }
  }
  return out;
}
