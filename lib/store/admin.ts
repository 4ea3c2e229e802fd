// Server administration, not an aggregate's rows: statements about a Postgres server's catalogue
// (`pg_database`) that set a project-local server up before the schema can be applied
// (lib/store/migrate.ts creates ClickHouse's database itself, and applies both schemas). Here because
// SQL lives in lib/store/ (docs/architecture.md "Floor plan"); used by deploy/local-servers.ts, on a
// client connected to the maintenance database `postgres` as the superuser.
import type { Pool, PoolClient } from '../infra/postgres.js';

/** A pool, a pool's client, or a lone client (pg.Client: the same `query`). */
type Db = Pool | PoolClient | Pick<PoolClient, 'query'>;

/** Creates the database `name` unless it exists (double quotes in the name are dropped). */
export async function createDatabaseIfMissing(db: Db, name: string): Promise<void> {
  const r = await db.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
  if (r.rowCount === 0) await db.query(`CREATE DATABASE "${name.replace(/"/g, '')}"`);
}
