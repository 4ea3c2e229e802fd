// Decommissioning (docs/operations.md "Decommissioning"): an admin retires a machine (with all its
// instances) or one instance. The rows stay, marked `retired_at` (their ids keep answering for their
// history, commands and artifacts until retention removes those), but they leave the fleet: not
// listed, not counted, not a device of the licence, never judged by the traffic light again. Their
// open commands are cancelled, and their Redis state (heartbeat key, state hash, the flusher's due
// entry) goes. A report received after the retirement makes new rows (new ids, new first seen);
// one received before it and applied after it is dropped by the workers' upserts.
//
// Safe to repeat: retiring a retired machine or instance changes nothing in Postgres and clears
// its Redis state again, so a retirement whose Redis part failed is finished by running it again.
import type { Pool, PoolClient } from '../infra/postgres.js';
import { withTx } from '../infra/postgres.js';
import type { Redis } from '../infra/redis.js';
import { byGroup, redisKeys } from '../infra/redis.js';
import { notFound } from '../contract/errors.js';
import type { InstanceRef } from './commands.js';

export interface RetiredInstance {
  id: string;
  software: string;
}

export interface Retirement {
  kind: 'machine' | 'instance';
  /** The machine's or the instance's id. */
  id: string;
  machine_id: string;
  machine: string;
  /** When it was retired (the first retirement's time when it was retired before). */
  retired_at: Date;
  /** It was retired before this call: nothing changed in Postgres. */
  already_retired: boolean;
  /** The instances retired with it (a machine: all of them; an instance: itself). */
  instances: RetiredInstance[];
  /** Open commands (queued or delivered) this call cancelled. */
  cancelled_commands: number;
  /** The instances whose open commands changed (for the gateways' hint). */
  hints: InstanceRef[];
}

/** Cancels the open commands of these instances, each with its event; returns how many. */
async function cancelOpenCommands(c: PoolClient, instanceIds: string[], actor: string): Promise<number> {
  const r = await c.query(
    `WITH u AS (
       UPDATE commands SET state = 'cancelled', finished_at = clock_timestamp()
        WHERE id IN (SELECT id FROM commands WHERE instance_id = ANY($1::uuid[]) AND state IN ('queued', 'delivered') ORDER BY id FOR UPDATE)
          AND state IN ('queued', 'delivered')
        RETURNING id, finished_at
     ), e AS (
       INSERT INTO command_events (command_id, state, at, actor, detail)
       SELECT id, 'cancelled', finished_at, $2, 'instance retired' FROM u
       ON CONFLICT (command_id, state) DO NOTHING
     )
     SELECT id FROM u`,
    [instanceIds, actor],
  );
  return r.rowCount ?? 0;
}

const actorOf = (userId: string | null) => (userId ? `user:${userId}` : 'system');

/** A retired instance is never judged again: the sweep does not keep it among its candidates. */
const NO_RECHECK_SQL = 'UPDATE instance_lights SET recheck_at = NULL WHERE instance_id IN (SELECT id FROM instances WHERE machine_id = $1) AND recheck_at IS NOT NULL';

/**
 * Retires the customer's machine and every instance on it (404 if the machine is not the
 * customer's). Lock order: the machine row, then its instances in the ingest upsert's order, so it
 * cannot deadlock with a worker writing the same machine; a worker's upsert that waited for the
 * machine row sees the retirement once it commits.
 */
export async function retireMachine(pool: Pool, customerId: string, machineId: string, userId: string | null): Promise<Retirement> {
  return withTx(pool, async (c) => {
    const m = await c.query<{ slug: string; retired_at: Date | null }>(
      'SELECT slug, retired_at FROM machines WHERE customer_id = $1 AND id = $2 FOR UPDATE',
      [customerId, machineId],
    );
    const machine = m.rows[0];
    if (!machine) throw notFound('no such machine');
    if (machine.retired_at) {
      const all = await c.query<RetiredInstance>('SELECT id, software FROM instances WHERE machine_id = $1 ORDER BY software COLLATE "C"', [machineId]);
      return { kind: 'machine', id: machineId, machine_id: machineId, machine: machine.slug, retired_at: machine.retired_at, already_retired: true, instances: all.rows, cancelled_commands: 0, hints: [] };
    }
    const at = await c.query<{ retired_at: Date }>(
      'UPDATE machines SET retired_at = clock_timestamp(), retired_by = $2 WHERE id = $1 RETURNING retired_at',
      [machineId, userId],
    );
    const retiredAt = at.rows[0]!.retired_at;
    await c.query('SELECT 1 FROM instances WHERE machine_id = $1 AND retired_at IS NULL ORDER BY software COLLATE "C" FOR UPDATE', [machineId]);
    await c.query('UPDATE instances SET retired_at = $2, retired_by = $3 WHERE machine_id = $1 AND retired_at IS NULL', [machineId, retiredAt, userId]);
    await c.query(NO_RECHECK_SQL, [machineId]);
    const all = await c.query<RetiredInstance>('SELECT id, software FROM instances WHERE machine_id = $1 ORDER BY software COLLATE "C"', [machineId]);
    const cancelled = await cancelOpenCommands(c, all.rows.map((i) => i.id), actorOf(userId));
    return {
      kind: 'machine',
      id: machineId,
      machine_id: machineId,
      machine: machine.slug,
      retired_at: retiredAt,
      already_retired: false,
      instances: all.rows,
      cancelled_commands: cancelled,
      hints: all.rows.map((i) => ({ customerId, machine: machine.slug, software: i.software })),
    };
  });
}

/**
 * Retires one of the customer's instances (404 if it is not the customer's); its machine stays.
 * Takes the machine row's lock first, like retireMachine, for the same reason.
 */
export async function retireInstance(pool: Pool, customerId: string, instanceId: string, userId: string | null): Promise<Retirement> {
  return withTx(pool, async (c) => {
    const found = await c.query<{ machine_id: string }>('SELECT machine_id FROM instances WHERE customer_id = $1 AND id = $2', [customerId, instanceId]);
    if (!found.rows[0]) throw notFound('no such instance');
    const machineId = found.rows[0].machine_id;
    await c.query('SELECT 1 FROM machines WHERE id = $1 FOR NO KEY UPDATE', [machineId]);
    const r = await c.query<{ machine: string; software: string; retired_at: Date | null }>(
      'SELECT machine, software, retired_at FROM instances WHERE id = $1 FOR UPDATE',
      [instanceId],
    );
    const inst = r.rows[0]!;
    const base = { kind: 'instance' as const, id: instanceId, machine_id: machineId, machine: inst.machine, instances: [{ id: instanceId, software: inst.software }] };
    if (inst.retired_at) return { ...base, retired_at: inst.retired_at, already_retired: true, cancelled_commands: 0, hints: [] };
    const at = await c.query<{ retired_at: Date }>(
      'UPDATE instances SET retired_at = clock_timestamp(), retired_by = $2 WHERE id = $1 RETURNING retired_at',
      [instanceId, userId],
    );
    await c.query('UPDATE instance_lights SET recheck_at = NULL WHERE instance_id = $1', [instanceId]);
    const cancelled = await cancelOpenCommands(c, [instanceId], actorOf(userId));
    return {
      ...base,
      retired_at: at.rows[0]!.retired_at,
      already_retired: false,
      cancelled_commands: cancelled,
      hints: [{ customerId, machine: inst.machine, software: inst.software }],
    };
  });
}

/** The customer's machine by slug, retired or not (the newest row first): for the CLI. */
export async function machineIdBySlug(db: Pool | PoolClient, customerId: string, slug: string): Promise<string | null> {
  const r = await db.query<{ id: string }>(
    'SELECT id FROM machines WHERE customer_id = $1 AND slug = $2 ORDER BY retired_at IS NULL DESC, retired_at DESC LIMIT 1',
    [customerId, slug],
  );
  return r.rows[0]?.id ?? null;
}

/** The customer's instance by machine slug and software, retired or not (the live one first): for the CLI. */
export async function instanceIdBySlugs(db: Pool | PoolClient, customerId: string, machine: string, software: string): Promise<string | null> {
  const r = await db.query<{ id: string }>(
    'SELECT id FROM instances WHERE customer_id = $1 AND machine = $2 AND software = $3 ORDER BY retired_at IS NULL DESC, retired_at DESC LIMIT 1',
    [customerId, machine, software],
  );
  return r.rows[0]?.id ?? null;
}

/**
 * Removes the Redis state of these instances: heartbeat key, state hash, and the flusher's due
 * entry. Without it nothing turns red either (the workers leave retired rows alone, and the
 * flusher drops the state of an instance Postgres does not write), but a heartbeat key left
 * behind would let one worker skip the next report of a running agent for up to one flush.
 */
export async function clearInstanceState(redis: Redis, prefix: string, instanceIds: string[]): Promise<void> {
  if (instanceIds.length === 0) return;
  const keys = redisKeys(prefix, redis);
  // Per group: an instance's keys and its group's due set share a slot in a cluster.
  await Promise.all(
    byGroup(instanceIds, keys.groups, (id) => id).flatMap(([g, ids]) => [
      redis.del(...ids.flatMap((id) => [keys.heartbeat(id), keys.heartbeatState(id)])),
      redis.zrem(keys.heartbeatDueOf(g), ...ids),
    ]),
  );
}
