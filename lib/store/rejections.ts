// The ingest rejection log (ClickHouse `ingest_rejections`, written by the workers from the
// gateways' rate-limited records) as the api reads it: the rows attributed to one customer, or
// (customer id '') those with no known customer. At the end, the rows a worker inserts with a
// batch (workers/apply-batch.ts).
import { queryRows, insertTsv, tsvRow, type ClickHouseClient } from '../infra/clickhouse.js';
import { chStr, chInt } from '../infra/clickhouse-sql.js';
import type { RejectionRecord } from '../contract/messages.js';

export interface RejectionFilter {
  /** Milliseconds since the epoch, inclusive; null: open. */
  fromMs: number | null;
  toMs: number | null;
  status?: number;
  /** The customer slug the request named (rows with no known customer). */
  customer?: string;
  limit: number;
}

/** Rejections of one customer id ('' for none known), newest first. */
export async function listRejections(ch: ClickHouseClient, customerId: string, f: RejectionFilter): Promise<Record<string, string | number>[]> {
  const cond = [`customer_id = ${chStr(customerId)}`];
  if (f.fromMs !== null) cond.push(`received_ms >= ${chInt(Math.max(0, f.fromMs))}`);
  if (f.toMs !== null) cond.push(`received_ms <= ${chInt(Math.max(0, f.toMs))}`);
  if (f.status !== undefined) cond.push(`status = ${chInt(f.status)}`);
  if (f.customer) cond.push(`customer = ${chStr(f.customer)}`);
  return queryRows<Record<string, string | number>>(
    ch,
    `SELECT id, received_ms, customer, token_id, method, path, status, detail, body_size, remote, dropped
         FROM ingest_rejections FINAL WHERE ${cond.join(' AND ')}
        ORDER BY received_ms DESC, id LIMIT ${chInt(f.limit)}`,
  );
}

// ---- the workers' inserts: TabSeparated rows (lib/infra/clickhouse.ts), keyed by the record's id

/** Column order of rejectionRow. */
const REJECTION_COLS = ['received_at', 'received_ms', 'id', 'customer_id', 'customer', 'token_id', 'method', 'path', 'status', 'detail', 'body_size', 'remote', 'dropped'];

/** A rejection record's row; `at`: x.at as ClickHouse DateTime text. */
export function rejectionRow(at: string, x: RejectionRecord): string {
  return tsvRow([at, x.at, x.id, x.customer_id, x.customer, x.token_id, x.method, x.path, x.status, x.detail, x.body_size, x.remote, x.dropped]);
}

/** One insert of rejectionRow rows. */
export async function insertRejectionRows(ch: ClickHouseClient, rows: string[]): Promise<void> {
  await insertTsv(ch, 'ingest_rejections', REJECTION_COLS, rows);
}
