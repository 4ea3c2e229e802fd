// The ingest rejection log (ClickHouse `ingest_rejections`, written by the workers from the
// gateways' rate-limited records) as the api reads it: the rows attributed to one customer, or
// (customer id '') those with no known customer.
import { queryRows, type ClickHouseClient } from '../infra/clickhouse.js';
import { chStr, chInt } from '../infra/clickhouse-sql.js';

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
