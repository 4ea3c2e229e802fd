// Machines (Postgres `machines`) as the api asks about them: "does this machine belong to this
// customer", a 404 otherwise (never a 403, which would tell that the id exists).
import type { Pool, PoolClient } from '../infra/postgres.js';
import { notFound } from '../contract/errors.js';

/** 404 unless the machine is the customer's. */
export async function ownedMachine(db: Pool | PoolClient, customerId: string, id: string): Promise<void> {
  const r = await db.query('SELECT 1 FROM machines WHERE customer_id = $1 AND id = $2', [customerId, id]);
  if (!r.rowCount) throw notFound('no such machine');
}
