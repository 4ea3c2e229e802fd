// The database's clock, for copies that poll by `updated_at` (lib/infra/synced-map.ts) and for
// what they top up by a creation time (gateway/licence-gate.ts): the next poll starts from the
// time Postgres gave, never from a replica's own clock, which may differ from it.
import type { Pool, PoolClient } from '../infra/postgres.js';

/** `clock_timestamp()`: the time now (not the transaction's start). */
export async function databaseNow(db: Pool | PoolClient): Promise<Date> {
  return (await db.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now;
}
