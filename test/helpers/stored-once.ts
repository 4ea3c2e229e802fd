// "Stored exactly once", counted on raw rows. Every report table is a ReplacingMergeTree keyed by
// report id: a report inserted twice is two rows until a merge collapses them, and `FINAL` or
// `uniqExact(report_id)` show one either way. So a test that must prove a report was not stored
// twice stops merges on its tables first (`stopMerges`, before anything is inserted) and counts
// rows without FINAL: `count()` beside `uniqExact(report_id)` per expected key.
import type { ClickHouseClient } from '../../lib/infra/clickhouse.js';

/** The tables with one row per report. */
export const REPORT_TABLES = ['heartbeats', 'status_history'] as const;

/** SYSTEM STOP MERGES on `tables` of `database` (the test's own; merges stay stopped until it is dropped). */
export async function stopMerges(ch: ClickHouseClient, database: string, tables: readonly string[] = REPORT_TABLES): Promise<void> {
  for (const table of tables) await ch.command({ query: `SYSTEM STOP MERGES ${database}.${table}` });
}

export interface Stored {
  /** Keys expected (one report each). */
  expected: number;
  /** Raw rows holding them (no FINAL). */
  rows: number;
  /** Distinct report ids among those rows. */
  reports: number;
  /** Expected keys with no row. */
  missing: string[];
  /** Expected keys with more than one raw row (one report inserted twice, or two reports). */
  doubled: string[];
  /**
   * Expected keys held by more than one report id: one request stored as two reports. Unlike
   * `doubled`, merges cannot hide it (they only collapse rows of one report id), and it is wrong
   * even where copies of one report are allowed (a redelivery after a crash, docs/architecture.md).
   */
  split: string[];
  /** Every key exactly once: one raw row, one report. */
  once: boolean;
}

const quote = (s: string) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/**
 * How `table` holds the reports whose `column` is one of `keys` (a marker each report carries,
 * unique per report: a heartbeat's version, a status message), counted on raw rows.
 */
export async function storedOnce(ch: ClickHouseClient, table: string, column: string, keys: readonly string[], opts: { like?: string } = {}): Promise<Stored> {
  // Many keys sharing a prefix: `like` selects them by the prefix instead of listing each.
  const where = opts.like !== undefined ? `${column} LIKE ${quote(opts.like)}` : `${column} IN (${keys.map(quote).join(',') || "''"})`;
  const rs = await ch.query({
    query: `SELECT ${column} AS k, count() AS n, uniqExact(report_id) AS r FROM ${table} WHERE ${where} GROUP BY k`,
    format: 'JSONEachRow',
  });
  const got = new Map(((await rs.json()) as { k: string; n: string; r: string }[]).map((x) => [x.k, { n: Number(x.n), r: Number(x.r) }]));
  let rows = 0;
  let reports = 0;
  for (const k of new Set(keys)) {
    rows += got.get(k)?.n ?? 0;
    reports += got.get(k)?.r ?? 0;
  }
  const missing = keys.filter((k) => !got.has(k));
  const doubled = keys.filter((k) => (got.get(k)?.n ?? 0) > 1);
  const split = keys.filter((k) => (got.get(k)?.r ?? 0) > 1);
  return { expected: keys.length, rows, reports, missing, doubled, split, once: missing.length === 0 && doubled.length === 0 && rows === keys.length && reports === keys.length };
}
