// Postgres pool and transaction helper.
import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// bigint columns (ms counters, priorities) come back as JS numbers: every value we store fits in 2^53.
pg.types.setTypeParser(20, (v: string) => Number(v));

export function createPool(url: string, max = 10, applicationName = 'fleet'): Pool {
  const pool = new pg.Pool({ connectionString: url, max, application_name: applicationName, idleTimeoutMillis: 30_000 });
  // An idle client that loses its connection emits here; without a listener the process would crash.
  pool.on('error', () => {});
  return pool;
}

export async function withTx<T>(pool: Pool, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const out = await fn(client);
    await client.query('COMMIT');
    return out;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    client.release();
  }
}

/** Errors worth retrying: the server or the connection, not the data. */
export function isTransientPgError(e: unknown): boolean {
  const code = (e as { code?: string })?.code ?? '';
  return (
    code.startsWith('08') || // connection exception
    code.startsWith('53') || // insufficient resources
    code.startsWith('57') || // operator intervention (shutdown)
    code === '40001' || // serialization failure
    code === '40P01' // deadlock detected
  );
}
