// ClickHouse client. Inserts are TabSeparated (the workers' report rows) or JSONEachRow (the rest);
// every table is a ReplacingMergeTree keyed by a report id, so a redelivered batch collapses into
// the rows already there (read with FINAL). A server that is not there surfaces as
// DependencyUnavailableError (lib/infra/storage-errors.ts).
import { Readable } from 'node:stream';
import { createClient, type ClickHouseClient } from '@clickhouse/client';
import { asUnavailable } from './storage-errors.js';

export type { ClickHouseClient };

/**
 * `requestTimeoutMs`: how long one statement may take (60 s). A longer one (a migration's copy of a
 * table) also asks for progress headers every 10 s, so that no proxy or load balancer takes the
 * quiet connection for dead.
 */
export function createClickHouse(opts: { url: string; database?: string; user?: string; password?: string; requestTimeoutMs?: number }): ClickHouseClient {
  const long = (opts.requestTimeoutMs ?? 0) > 60_000;
  return createClient({
    url: opts.url,
    database: opts.database,
    username: opts.user ?? 'default',
    password: opts.password ?? '',
    request_timeout: opts.requestTimeoutMs ?? 60_000,
    max_open_connections: 10,
    compression: { request: false, response: false },
    // ClickHouse 18.16 knows none of the settings newer clients like to send; these two it does.
    clickhouse_settings: long ? { send_progress_in_http_headers: 1, http_headers_progress_interval_ms: '10000' } : {},
  });
}

export async function insertRows(ch: ClickHouseClient, table: string, rows: object[]): Promise<void> {
  if (rows.length === 0) return;
  await ch.insert({ table, values: rows, format: 'JSONEachRow' }).catch((e: unknown) => {
    throw asUnavailable('clickhouse', e);
  });
}

/**
 * A read. ClickHouse away (unreachable, a replica killed mid-answer, a table detached) surfaces as
 * DependencyUnavailableError, so the api answers 503 with Retry-After, not 500: a read is safe to
 * ask again. The answer is read inside the same guard, since a server can die after its headers.
 */
export async function queryRows<T>(ch: ClickHouseClient, query: string, params: Record<string, unknown> = {}): Promise<T[]> {
  try {
    const rs = await ch.query({ query, query_params: params, format: 'JSONEachRow' });
    return (await rs.json()) as T[];
  } catch (e) {
    throw asUnavailable('clickhouse', e);
  }
}

/** Only SQL-safe identifiers become database names (test isolation creates them). */
export function chIdent(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`unsafe ClickHouse identifier: ${name}`);
  return name;
}

/**
 * TabSeparated rows, built as text: the cheapest format for a worker to produce and for ClickHouse
 * to parse (JSONEachRow costs an object and a JSON.stringify per row, and most of a worker's time
 * in garbage collection at 100k rows per batch). Values: string, number, null (\N), string[].
 */
export type TsvValue = string | number | null | undefined | readonly string[];

const TSV_NEEDS_ESCAPE = /[\\\t\n\r\0]/;
const TSV_ESCAPE = /[\\\t\n\r\0]/g;
const TSV_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' };
const QUOTED_ESCAPE = /[\\'\t\n\r\0]/g;
const QUOTED_ESCAPES: Record<string, string> = { ...TSV_ESCAPES, "'": "\\'" };

export function tsvValue(v: TsvValue): string {
  if (v === null || v === undefined) return '\\N';
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string') return TSV_NEEDS_ESCAPE.test(v) ? v.replace(TSV_ESCAPE, (c) => TSV_ESCAPES[c]!) : v;
  // An array field: ['a','b'], elements quoted and escaped (so no raw tab or newline reaches the row).
  return `[${v.map((x) => `'${x.replace(QUOTED_ESCAPE, (c) => QUOTED_ESCAPES[c]!)}'`).join(',')}]`;
}

let lastSecond = -1;
let lastText = '';
/** ClickHouse DateTime text (UTC) of a time in ms; consecutive rows share their second's text. */
export function chTime(ms: number): string {
  const sec = Math.floor(ms / 1000);
  if (sec !== lastSecond) {
    lastSecond = sec;
    lastText = new Date(sec * 1000).toISOString().slice(0, 19).replace('T', ' ');
  }
  return lastText;
}

export function tsvRow(values: TsvValue[]): string {
  let s = tsvValue(values[0]);
  for (let i = 1; i < values.length; i++) s += '\t' + tsvValue(values[i]);
  return s;
}

/**
 * The rows of one insert, made into one flat text every ROWS_PER_PIECE rows. A row built by
 * tsvRow is a concatenation, a tree of about two strings per value; a worker builds the rows of a
 * whole batch (tens of thousands) before it inserts them, and kept as they were, every tree
 * outlived the young generation's collections (copied, then promoted). Joined in pieces as they
 * come, each tree is garbage at once.
 */
export class TsvRows {
  private readonly pieces: string[] = [];
  private open: string[] = [];
  /** Rows pushed. */
  length = 0;

  push(row: string): void {
    this.open.push(row);
    this.length++;
    if (this.open.length >= ROWS_PER_PIECE) {
      this.pieces.push(this.open.join('\n'));
      this.open = [];
    }
  }

  /** Every row, each ended by a newline (TabSeparated). */
  text(): string {
    const all = this.open.length > 0 ? [...this.pieces, this.open.join('\n')] : this.pieces;
    return all.length === 0 ? '' : all.join('\n') + '\n';
  }
}

const ROWS_PER_PIECE = 256;

export async function insertTsv(ch: ClickHouseClient, table: string, columns: readonly string[], rows: readonly string[] | TsvRows): Promise<void> {
  if (rows.length === 0) return;
  const text = rows instanceof TsvRows ? rows.text() : rows.join('\n') + '\n';
  await ch
    .insert({
      table,
      values: Readable.from([Buffer.from(text)], { objectMode: false }),
      format: 'TabSeparated',
      columns: columns as [string, ...string[]],
    })
    .catch((e: unknown) => {
      throw asUnavailable('clickhouse', e);
    });
}
