// Machines (Postgres `machines`) as the api asks about them: "does this machine belong to this
// customer", a 404 otherwise (never a 403, which would tell that the id exists); the machines the
// licence flagged over its device limit, and the flagging (workers/licences.ts). And as the
// gateway's licence gate knows them (gateway/licence-gate.ts): the slugs of customers past their
// grace period. At the end, the workers' writes: the ingest upsert, and last_seen_at moved
// forward by the heartbeat flusher.
import type { Pool, PoolClient } from '../infra/postgres.js';
import { notFound } from '../contract/errors.js';

/** 404 unless the machine is the customer's (retired or not). */
export async function ownedMachine(db: Pool | PoolClient, customerId: string, id: string): Promise<void> {
  const r = await db.query('SELECT 1 FROM machines WHERE customer_id = $1 AND id = $2', [customerId, id]);
  if (!r.rowCount) throw notFound('no such machine');
}

/** A machine the licence flagged: first seen while the customer was over its device limit. */
export interface FlaggedMachine {
  slug: string;
  first_seen_at: Date;
  last_seen_at: Date;
  over_limit_at: Date;
}

/** The customer's machines flagged over the licence's limit, newest flag first (at most 100). */
export async function listFlaggedMachines(pool: Pool, customerId: string): Promise<FlaggedMachine[]> {
  const r = await pool.query<FlaggedMachine>(
    `SELECT slug, first_seen_at, last_seen_at, over_limit_at FROM machines
        WHERE customer_id = $1 AND over_limit_at IS NOT NULL AND retired_at IS NULL ORDER BY over_limit_at DESC, slug LIMIT 100`,
    [customerId],
  );
  return r.rows;
}

/** A machine's slug with its customer. */
export interface MachineSlug {
  customer_id: string;
  slug: string;
}

/** Every machine of these customers (retired ones left out: a retired machine that reports again is new). */
export async function machineSlugsOf(pool: Pool, customerIds: string[]): Promise<MachineSlug[]> {
  return (await pool.query<MachineSlug>('SELECT customer_id, slug FROM machines WHERE customer_id = ANY($1::uuid[]) AND retired_at IS NULL', [customerIds])).rows;
}

/** The machines of these customers created after `since` (by `created_at`). */
export async function machineSlugsCreatedSince(pool: Pool, customerIds: string[], since: Date): Promise<MachineSlug[]> {
  return (await pool.query<MachineSlug>('SELECT customer_id, slug FROM machines WHERE customer_id = ANY($1::uuid[]) AND created_at > $2 AND retired_at IS NULL', [customerIds, since])).rows;
}

/**
 * Flags the `n` newest (first seen, then slug) of these machines as over the licence's device limit
 * (`over_limit_at` = now), in the caller's transaction (under the customer's licence lock).
 */
export async function flagOverLimit(db: Pool | PoolClient, machineIds: string[], n: number): Promise<void> {
  await db.query(
    `UPDATE machines SET over_limit_at = now()
      WHERE id IN (SELECT id FROM machines WHERE id = ANY($1::uuid[]) ORDER BY first_seen_at DESC, slug DESC LIMIT $2)`,
    [machineIds, n],
  );
}

// ---- the workers' writes (workers/apply-batch.ts, workers/heartbeat-state.ts) -----------------

/** A machine a batch reported: its first and last receive time in the batch (ms). */
export interface MachineSeen {
  customerId: string;
  slug: string;
  first: number;
  last: number;
}

/** A machine the upsert wrote; `inserted`: the batch created it. */
export interface UpsertedMachine {
  id: string;
  customer_id: string;
  slug: string;
  inserted: boolean;
}

/**
 * The ingest upsert of machines, in the transaction of `c`, in the order given (the caller's lock
 * order: customer id, then slug). First and last seen only widen. A retired machine is never
 * written: a report after its retirement makes a new row; one received before it is left out (no
 * row in the answer), and so are its instances (lib/store/instances.ts, RETIRED_AFTER).
 */
export async function upsertMachines(c: PoolClient, machines: MachineSeen[]): Promise<UpsertedMachine[]> {
  const r = await c.query<UpsertedMachine>(
    `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
     SELECT c, s, to_timestamp(f / 1000.0), to_timestamp(l / 1000.0)
       FROM unnest($1::uuid[], $2::text[], $3::float8[], $4::float8[]) WITH ORDINALITY AS t(c, s, f, l, n)
      WHERE NOT EXISTS (SELECT 1 FROM machines r WHERE r.customer_id = t.c AND r.slug = t.s
                           AND r.retired_at IS NOT NULL AND r.retired_at >= to_timestamp(t.l / 1000.0))
      ORDER BY n
     ON CONFLICT (customer_id, slug) WHERE retired_at IS NULL DO UPDATE
        SET first_seen_at = LEAST(machines.first_seen_at, EXCLUDED.first_seen_at),
            last_seen_at = GREATEST(machines.last_seen_at, EXCLUDED.last_seen_at)
     RETURNING id, customer_id, slug, (xmax = 0) AS inserted`,
    [machines.map((m) => m.customerId), machines.map((m) => m.slug), machines.map((m) => m.first), machines.map((m) => m.last)],
  );
  return r.rows;
}

/**
 * Deletes these machines (made by the caller's transaction) if no instance refers to them: a
 * retired machine re-made by a report received before its retirement, whose instances the upsert
 * left out (the retirement committed while the machine upsert waited for its row lock).
 */
export async function dropMachinesWithoutInstances(c: PoolClient, machineIds: string[]): Promise<void> {
  await c.query(`DELETE FROM machines m WHERE m.id = ANY($1::uuid[]) AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.machine_id = m.id)`, [machineIds]);
}

/**
 * Moves each machine's last_seen_at forward to `lastSeenMs[k]` (never back), one statement taking
 * the rows' locks in the ingest upsert's order (customer id, slug).
 */
export async function advanceMachinesLastSeen(db: Pool | PoolClient, machineIds: string[], lastSeenMs: number[]): Promise<void> {
  await db.query(
    `UPDATE machines SET last_seen_at = GREATEST(machines.last_seen_at, to_timestamp(d.ms / 1000.0))
         FROM (SELECT m.id, t.ms FROM machines m JOIN unnest($1::uuid[], $2::float8[]) AS t(id, ms) ON m.id = t.id
                ORDER BY m.customer_id, m.slug COLLATE "C" FOR UPDATE OF m) d
        WHERE machines.id = d.id AND machines.retired_at IS NULL`,
    [machineIds, lastSeenMs],
  );
}
