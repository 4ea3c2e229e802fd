// ClickHouse client. Inserts are JSONEachRow batches; every table is a ReplacingMergeTree keyed by
// a report id, so a redelivered batch collapses into the rows already there (read with FINAL).
import { createClient, type ClickHouseClient } from '@clickhouse/client';

export type { ClickHouseClient };

export function createClickHouse(opts: { url: string; database?: string; user?: string; password?: string }): ClickHouseClient {
  return createClient({
    url: opts.url,
    database: opts.database,
    username: opts.user ?? 'default',
    password: opts.password ?? '',
    request_timeout: 60_000,
    max_open_connections: 10,
    compression: { request: false, response: false },
    // ClickHouse 18.16 knows none of the settings newer clients like to send.
    clickhouse_settings: {},
  });
}

export async function insertRows(ch: ClickHouseClient, table: string, rows: object[]): Promise<void> {
  if (rows.length === 0) return;
  await ch.insert({ table, values: rows, format: 'JSONEachRow' });
}

export async function queryRows<T>(ch: ClickHouseClient, query: string, params: Record<string, unknown> = {}): Promise<T[]> {
  const rs = await ch.query({ query, query_params: params, format: 'JSONEachRow' });
  return (await rs.json()) as T[];
}

/** Only SQL-safe identifiers become database names (test isolation creates them). */
export function chIdent(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`unsafe ClickHouse identifier: ${name}`);
  return name;
}
