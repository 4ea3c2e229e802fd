// Data retention (docs/operations.md "Data retention"): a scheduled job (workers/jobs.ts, queue
// `retention`) runs `runRetention` every RETENTION_SWEEP_MS on one worker replica. Postgres rows that
// ended longer ago than their table's RETENTION_*_DAYS are deleted in chunks; ClickHouse months
// wholly past their table's retention are dropped as partitions. The statements and the rules of
// what is live are lib/store/retention.ts's. Idempotent: a second run finds nothing; a run that
// fails half-way is finished by the next. Postgres and ClickHouse are pruned independently (one
// away does not stop the other); the run fails (and is logged) if either did.
import type { Pool } from '../lib/infra/postgres.js';
import type { ClickHouseClient } from '../lib/infra/clickhouse.js';
import type { Logger } from '../lib/infra/log.js';
import type { ChTarget } from '../lib/store/schema.js';
import { prunePostgres, dropExpiredPartitions, type PgRetentionTable, type ChRetentionTable } from '../lib/store/retention.js';
import { stuckOutbox } from '../lib/store/light-events.js';
import { artifactsBeingDeleted, markArtifactsPastRetention, purgeArtifact, type ArtifactStore, type DoomedArtifact } from '../lib/store/artifacts.js';
import type { ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { RunResult } from './jobs.js';

/** Outbox rows older than this are reported: the sweep delivers a row within seconds. */
const OUTBOX_STUCK_S = 3600;

export interface RetentionDeps {
  pool: Pool;
  ch: ClickHouseClient;
  /** Where the ClickHouse tables are (CLICKHOUSE_CLUSTER: drop on `<name>_local` ON CLUSTER). */
  target: ChTarget;
  /** Days per table; 0: kept forever (lib/infra/config.ts `retention`). */
  days: { postgres: Record<PgRetentionTable, number>; clickhouse: Record<ChRetentionTable, number>; artifacts?: number };
  /**
   * Artifacts (RETENTION_ARTIFACTS_DAYS, `days.artifacts`): the object store and the quota's
   * reservations. Without it artifacts are left alone.
   */
  artifacts?: { store: ArtifactStore; usage?: ArtifactUsage };
  /** Artifacts per batch (100). */
  artifactBatch?: number;
  log: Logger;
  /** Rows per Postgres statement (5000). */
  chunk?: number;
  now?: () => number;
  /** What was removed, for the metrics: Postgres rows of a table, ClickHouse partitions of a table; a store that failed. */
  onRows?: (table: string, n: number) => void;
  onPartition?: (table: string) => void;
  onFailure?: (store: 'postgres' | 'clickhouse' | 'artifacts') => void;
}

/** One run: counts per table (`<table>` rows, `<table>_partitions`), logged by the job when any is above zero. */
export async function runRetention(d: RetentionDeps): Promise<RunResult> {
  const out: RunResult = {};
  let failure: unknown = null;
  try {
    const pruned = await prunePostgres(d.pool, d.days.postgres, { chunk: d.chunk });
    for (const [table, n] of Object.entries(pruned)) {
      if (n === 0) continue;
      out[table] = n;
      d.onRows?.(table, n);
    }
  } catch (e) {
    failure = e;
    d.onFailure?.('postgres');
    d.log.warn({ err: e }, 'retention: Postgres not pruned this time (the next run goes on)');
  }
  try {
    const r = await dropExpiredPartitions(d.ch, d.target, d.days.clickhouse, (d.now ?? Date.now)());
    for (const p of r.dropped) {
      d.log.info(p, 'retention: ClickHouse partition dropped');
      out[`${p.table}_partitions`] = (out[`${p.table}_partitions`] ?? 0) + 1;
      d.onPartition?.(p.table);
    }
    for (const f of r.failed) {
      d.log.error(
        { err: f.error, ...f.partition },
        'retention: ClickHouse partition not dropped (larger than the server allows? max_partition_size_to_drop, docs/operations.md "Data retention")',
      );
    }
    if (r.failed.length > 0) {
      failure ??= r.failed[0]!.error;
      d.onFailure?.('clickhouse');
    }
  } catch (e) {
    failure ??= e;
    d.onFailure?.('clickhouse');
    d.log.warn({ err: e }, 'retention: ClickHouse partitions not dropped this time (the next run goes on)');
  }
  if (d.artifacts) {
    try {
      const r = await pruneArtifacts(d, d.artifacts.store, d.artifacts.usage);
      if (r.artifacts > 0) {
        out.artifacts = r.artifacts;
        out.artifact_chunks = r.chunks;
        d.onRows?.('artifacts', r.artifacts);
      }
    } catch (e) {
      failure ??= e;
      d.onFailure?.('artifacts');
      d.log.warn({ err: e }, 'retention: artifacts not all deleted this time (those marked are hidden; the next run finishes them)');
    }
  }
  // Never deleted for age (an undelivered change would be lost), but worth saying.
  const stuck = await stuckOutbox(d.pool, OUTBOX_STUCK_S).catch(() => null);
  if (stuck && stuck.rows > 0) d.log.warn(stuck, 'traffic-light changes wait in light_outbox for more than an hour: deliveries are failing (the sweep logs why)');
  if (failure !== null) {
    if (Object.keys(out).length > 0) d.log.info(out, 'retention: removed before the failure');
    throw failure;
  }
  return out;
}

/**
 * Artifacts: first every deletion that stopped half-way (a row marked deleting_at, whatever its
 * age: an api request that lost NATS, an earlier run, an offboarding), then those uploaded longer
 * ago than RETENTION_ARTIFACTS_DAYS, `artifactBatch` at a time (lib/store/artifacts.ts: marked,
 * bytes and upload record out of NATS, row deleted).
 */
async function pruneArtifacts(d: RetentionDeps, store: ArtifactStore, usage?: ArtifactUsage): Promise<{ artifacts: number; chunks: number }> {
  const batch = d.artifactBatch ?? 100;
  const out = { artifacts: 0, chunks: 0 };
  const purge = async (rows: DoomedArtifact[]) => {
    for (const a of rows) {
      out.chunks += (await purgeArtifact(d.pool, store, a, usage)).chunks;
      out.artifacts++;
    }
  };
  // Half-done deletions (a row that fails throws, and the next run starts again; a row seen twice
  // ends the pass: something keeps it, and the next run tries again).
  const seen = new Set<string>();
  for (;;) {
    const rows = await artifactsBeingDeleted(d.pool, { limit: batch });
    const fresh = rows.filter((a) => !seen.has(a.id));
    for (const a of fresh) seen.add(a.id);
    await purge(fresh);
    if (rows.length < batch || fresh.length < rows.length) break;
  }
  const days = d.days.artifacts ?? 0;
  if (days > 0) {
    for (;;) {
      const rows = await markArtifactsPastRetention(d.pool, days, batch);
      await purge(rows);
      if (rows.length < batch) break;
    }
  }
  return out;
}
