// Postgres pool and transaction helper.
import pg from 'pg';
import { asUnavailable } from './storage-errors.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// bigint columns (ms counters, priorities) come back as JS numbers: every value we store fits in 2^53.
pg.types.setTypeParser(20, (v: string) => Number(v));

export function createPool(url: string, max = 10, applicationName = 'fleet'): Pool {
  const pool = new pg.Pool({ connectionString: url, max, application_name: applicationName, idleTimeoutMillis: 30_000 });
  // A client that loses its connection emits 'error': an idle one on the pool, a checked-out one
  // on itself (seen: a Postgres restart crashed a worker mid-transaction). Without a listener
  // either would crash the process; the query in flight fails anyway, and is retried by its caller.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

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
