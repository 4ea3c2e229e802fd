// Conversion events (Postgres `conversions`: signup, first device, licence activated; written by a
// trigger, the workers (`recordFirstDevices`) and licence changes (lib/store/licences.ts)) as the api
// reads and acknowledges them: a user's own and those of the customers they belong to.
import type { Pool, PoolClient } from '../infra/postgres.js';

export interface PendingConversion {
  id: string;
  kind: string;
  customer_id: string | null;
  customer: string | null;
  created_at: Date;
  value: Record<string, unknown>;
}

/** The user's events and their customers' not acknowledged yet, oldest first. */
export async function pendingConversions(pool: Pool, userId: string): Promise<PendingConversion[]> {
  const r = await pool.query<PendingConversion>(
    `SELECT v.id, v.kind, v.customer_id, c.slug AS customer, v.created_at, v.value
           FROM conversions v LEFT JOIN customers c ON c.id = v.customer_id
          WHERE v.acked_at IS NULL
            AND (v.user_id = $1 OR v.customer_id IN (SELECT customer_id FROM memberships WHERE user_id = $1))
          ORDER BY v.created_at, v.id`,
    [userId],
  );
  return r.rows;
}

/** Acknowledges these events, of the user's own and their customers' only (others and repeats are ignored); returns how many. */
export async function ackConversions(pool: Pool, userId: string | undefined, ids: string[]): Promise<number> {
  const r = await pool.query(
    `UPDATE conversions SET acked_at = now(), acked_by = $1
          WHERE id = ANY($2::uuid[]) AND acked_at IS NULL
            AND (user_id = $1 OR customer_id IN (SELECT customer_id FROM memberships WHERE user_id = $1))`,
    [userId, ids],
  );
  return r.rowCount ?? 0;
}

/**
 * A customer's first machine: one `first_device` event per customer, ever (its dedup key), naming
 * the machine. A customer that has its event already gets nothing. Give one entry per customer.
 */
export async function recordFirstDevices(db: Pool | PoolClient, firsts: { customerId: string; machine: string }[]): Promise<void> {
  await db.query(
    `INSERT INTO conversions (kind, customer_id, dedup_key, value)
     SELECT 'first_device', cid, 'first_device:' || cid, jsonb_build_object('machine', slug)
       FROM unnest($1::uuid[], $2::text[]) AS t(cid, slug)
     ON CONFLICT (dedup_key) DO NOTHING`,
    [firsts.map((f) => f.customerId), firsts.map((f) => f.machine)],
  );
}
