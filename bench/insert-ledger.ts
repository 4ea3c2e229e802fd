// "Stored exactly once" for a long run, where merges cannot be stopped (after about 300 inserts a
// partition with merges stopped refuses more with "too many parts", and the workers wait: the
// first hostile soak measured that, not the service). Every report table is a ReplacingMergeTree
// keyed by report id, so its merges fold a doubled report into one row. A materialized view into
// a plain MergeTree sees every insert into the table as it happens and never folds anything: its
// rows per report id are the rows inserted for that report, however often that was.
import type { ClickHouseClient } from '../lib/infra/clickhouse.js';
import { queryRows } from '../lib/infra/clickhouse.js';

export interface InsertLedger {
  /** Rows inserted per report id into `table` for the given customers, since the ledger was made. */
  inserted(table: string, customerIds: readonly string[]): Promise<Map<string, number>>;
  /** Removes the views (their data with them). */
  drop(): Promise<void>;
}

/** Starts counting inserts into `tables` (each with `customer_id` and `report_id` columns). */
export async function insertLedger(ch: ClickHouseClient, tables: readonly string[], tag: string): Promise<InsertLedger> {
  const view = (t: string) => `${t}_inserts_${tag}`;
  for (const t of tables) {
    await ch.command({
      query: `CREATE MATERIALIZED VIEW IF NOT EXISTS ${view(t)} ENGINE = MergeTree ORDER BY (customer_id, report_id) AS SELECT customer_id, report_id FROM ${t}`,
    });
  }
  return {
    async inserted(table, customerIds) {
      const ids = customerIds.map((c) => `'${c.replace(/'/g, '')}'`).join(',') || "''";
      const rows = await queryRows<{ id: string; n: string }>(ch, `SELECT report_id AS id, count() AS n FROM ${view(table)} WHERE customer_id IN (${ids}) GROUP BY report_id`);
      return new Map(rows.map((r) => [r.id, Number(r.n)]));
    },
    async drop() {
      for (const t of tables) await ch.command({ query: `DROP TABLE IF EXISTS ${view(t)}` });
    },
  };
}
