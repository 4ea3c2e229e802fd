// Postgres pool and transaction helper.
import pg from 'pg';
import { asUnavailable } from './storage-errors.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// bigint columns (ms counters, priorities) come back as JS numbers: every value we store fits in 2^53.
pg.types.setTypeParser(20, (v: string) => Number(v));

/**
 * `settings`: Postgres settings for every connection of the pool (sent at connect, as `-c name=value`
 * options), e.g. the api's planner costs (api/main.ts).
 */
export function createPool(url: string, max = 10, applicationName = 'fleet', settings: Record<string, string | number> = {}): Pool {
  const options = Object.entries(settings)
    .map(([k, v]) => `-c ${k}=${v}`)
    .join(' ');
  const pool = new pg.Pool({ connectionString: url, max, application_name: applicationName, idleTimeoutMillis: 30_000, ...(options ? { options } : {}) });
  // A client that loses its connection emits 'error': an idle one on the pool, a checked-out one
  // on itself (seen: a Postgres restart crashed a worker mid-transaction). Without a listener
  // either would crash the process; the query in flight fails anyway, and is retried by its caller.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

const TIMESTAMPTZ = 1184;
const parseTimestamptz = pg.types.getTypeParser(TIMESTAMPTZ, 'text') as (text: string) => unknown;

/**
 * A timestamptz as Postgres writes it in UTC (`2026-11-28 23:01:19.14+00`), turned straight into
 * the ISO 8601 string the api answers (`2026-11-28T23:01:19.140Z`): the very text that pg's own
 * parser and Date's toISOString make of it (milliseconds cut, not rounded; checked against
 * Postgres in test/servers/iso-times.test.ts), without a Date, a regular expression and a second
 * conversion per value. An instance row has up to nine of these: at 50 rows a page, parsing them
 * was a good part of the api's CPU per list request (bench/README.md, "api CPU per list request").
 * Any other form (a session in another time zone, a year past 9999, BC, ±infinity) goes through
 * pg's parser as before (a Date, or ±Infinity).
 */
export function timestamptzToIso(text: string): unknown {
  const n = text.length;
  if (
    n >= 22 &&
    n <= 29 &&
    text.charCodeAt(4) === 45 && // -
    text.charCodeAt(7) === 45 &&
    text.charCodeAt(10) === 32 && // ' '
    text.charCodeAt(13) === 58 && // :
    text.charCodeAt(16) === 58 &&
    text.charCodeAt(n - 3) === 43 && // +00
    text.charCodeAt(n - 2) === 48 &&
    text.charCodeAt(n - 1) === 48 &&
    (n === 22 || text.charCodeAt(19) === 46) // .
  ) {
    const frac = n === 22 ? '000' : (text.slice(20, n - 3) + '00').slice(0, 3);
    return `${text.slice(0, 10)}T${text.slice(11, 19)}.${frac}Z`;
  }
  return parseTimestamptz(text);
}

/**
 * Type parsers for a query whose rows go straight into JSON: timestamptz columns come back as ISO
 * 8601 strings (timestamptzToIso), everything else as pg parses it. Per query (`types`), never for
 * the pool: code that reads a time as a Date keeps getting one.
 */
export const ISO_TIMES: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === TIMESTAMPTZ && format !== 'binary' ? timestamptzToIso : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig['getTypeParser'],
};

/** An iso time, or null (the JSON form of a timestamptz column). */
export const isoTime = (d: Date | null | undefined): string | null => (d ? d.toISOString() : null);

/** A row as the api answers it: every Date an ISO 8601 string (the SELECT names the fields). */
export function apiRow<R extends object>(r: R): { [K in keyof R]: R[K] extends Date ? string : R[K] extends Date | null ? string | null : R[K] } {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) out[k] = v instanceof Date ? v.toISOString() : v;
  return out as never;
}

/** A health probe (readiness): resolves when Postgres answers a trivial query. */
export async function ping(pool: Pool): Promise<void> {
  // No aggregate's SQL: the probe belongs with the client (docs/architecture.md "Floor plan").
  // eslint-disable-next-line no-restricted-syntax
  await pool.query('SELECT 1');
}

export async function withTx<T>(pool: Pool, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect().catch((e: unknown) => {
    throw asUnavailable('postgres', e);
  });
  try {
    await client.query('BEGIN');
    const out = await fn(client);
    await client.query('COMMIT');
    return out;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    throw asUnavailable('postgres', e);
  } finally {
    client.release();
  }
}

/**
 * The one Postgres sanitiser. Postgres text and jsonb refuse NUL characters, and jsonb refuses lone
 * UTF-16 surrogates; both are valid in JSON. The gateway and the api refuse them (422, lib/domain/storable.ts);
 * what is written anyway (reports queued by an older gateway) has NULs stripped and lone surrogates
 * replaced (U+FFFD), in values and in object keys alike, rather than failing the write.
 */
export function pgText(s: string | null | undefined): string | null {
  if (s === null || s === undefined) return null;
  return s.includes('\u0000') ? s.replace(/\u0000/g, '').toWellFormed() : s.toWellFormed();
}

export function pgJson(v: unknown): string {
  const json = JSON.stringify(v);
  if (!/\\u0000|\\ud[89a-f]/i.test(json)) return json;
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === 'string') return pgText(x);
    if (x && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).some((k) => k !== pgText(k))) {
      return Object.fromEntries(Object.entries(x).map(([k, y]) => [pgText(k), y]));
    }
    return x;
  });
}
