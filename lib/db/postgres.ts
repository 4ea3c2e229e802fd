// Postgres pool and transaction helper.
import pg from 'pg';

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

