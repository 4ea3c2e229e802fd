// Timeout rules: how long each instance may stay silent before red, and when it turns late before
// that (docs/decisions.md "Timeouts per instance and late"; the tables: 0019-timeout-rules in
// lib/store/schema.ts).
//
//   rules        per customer: one for the whole customer, one per software pattern (a glob, `*`
//                any run of characters), one per instance. Each sets the timeout, the late share
//                (per cent of the timeout; 0: no late colour), or both. For each value the most
//                specific rule that sets it wins: instance, then the longest matching pattern,
//                then the customer's, then the defaults (HEARTBEAT_TIMEOUT_S,
//                HEARTBEAT_LATE_PERCENT, as the workers last applied them: `light_defaults`).
//   on the rows  every instance carries its rule's values (`timeout_s`, `late_percent`; NULL: the
//                default) and the times that follow from its last heartbeat: `deadline` (red) and
//                `late_at` (late; NULL: never). Every writer of last_heartbeat_at sets those two
//                (lib/store/instances.ts); the traffic light judges by them, and the sweep finds
//                its candidates through their indexes.
//   changes      a rule change recomputes the values of the instances it may touch (all of the
//                customer's, or the one instance), in chunks of RECOMPUTE_CHUNK rows locked in the
//                ingest upsert's order (never a deadlock with it, never a long lock). The change
//                first locks the customer's row: a new instance inserted meanwhile (its trigger
//                key-share locks that row, then reads the rules) is either seen by the recompute
//                or sees the new rule itself. A recompute that stops half-way (the api died) is
//                recorded in `timeout_recomputes` and finished by the light sweep.
//   the workers  keep each instance's rule with its id (workers/heartbeat-state.ts: its heartbeat
//                key's expiry and how often it reaches Postgres follow from it). After a change
//                the api tells them on core NATS (TimeoutRuleHints): each drops its copies of the
//                customer's rules at once. A hint lost (NATS away) leaves a copy at most 10 minutes
//                old; the sweep's repair keeps the colour right meanwhile.
import type { NatsConnection, Subscription } from 'nats';
import { withTx, type Pool, type PoolClient } from '../infra/postgres.js';
import { HintPublisher, listenHints } from '../infra/hints.js';
import { deadlineSql, lateAtSql } from '../domain/traffic-light.js';
import { globToLike } from '../domain/glob.js';
import { lockInstances, recheckNowSql } from './instances.js';

type Db = Pool | PoolClient;

export type TimeoutScope = 'customer' | 'software' | 'instance';

/** A rule as the api answers it. */
export interface TimeoutRuleRow {
  id: string;
  scope: TimeoutScope;
  software_pattern: string | null;
  instance_id: string | null;
  /** Scope instance: its machine's name and its software (one read with the rule, not one per rule). */
  machine: string | null;
  software: string | null;
  timeout_s: number | null;
  late_percent: number | null;
  description: string;
  created_at: Date;
  updated_at: Date;
}

const COLS = `id, scope, software_pattern, instance_id, timeout_s, late_percent, description, created_at, updated_at,
  (SELECT m.slug FROM instances ri JOIN machines m ON m.id = ri.machine_id WHERE ri.id = timeout_rules.instance_id) AS machine,
  (SELECT ri.software FROM instances ri WHERE ri.id = timeout_rules.instance_id) AS software`;

/** Rows per recompute transaction. */
export const RECOMPUTE_CHUNK = 1000;

export { globToLike };

/** The customer's rules: the customer's first, then patterns, then instances. */
export async function listTimeoutRules(db: Db, customerId: string): Promise<TimeoutRuleRow[]> {
  const r = await db.query<TimeoutRuleRow>(
    `SELECT ${COLS} FROM timeout_rules WHERE customer_id = $1
      ORDER BY CASE scope WHEN 'customer' THEN 0 WHEN 'software' THEN 1 ELSE 2 END, software_pattern COLLATE "C", created_at, id`,
    [customerId],
  );
  return r.rows;
}

export interface TimeoutRuleInput {
  scope: TimeoutScope;
  softwarePattern: string | null;
  instanceId: string | null;
  timeoutS: number | null;
  latePercent: number | null;
  description: string;
  createdBy: string | null;
}

export type CreateOutcome =
  | { created: TimeoutRuleRow; recomputed: number }
  | { full: { count: number; max: number } }
  | { exists: string }
  | { noInstance: true };

/**
 * A new rule, unless the customer holds its quota of rules, already has a rule for that target
 * (`exists`: its id), or the instance is not the customer's. Then the values of the instances it
 * may touch are recomputed (`recomputed`: how many changed).
 */
export async function createTimeoutRule(pool: Pool, customerId: string, input: TimeoutRuleInput, max: number): Promise<CreateOutcome> {
  const out = await withTx(pool, async (c): Promise<CreateOutcome> => {
    await lockCustomer(c, customerId);
    if (input.instanceId) {
      const owned = await c.query('SELECT 1 FROM instances WHERE customer_id = $1 AND id = $2', [customerId, input.instanceId]);
      if (!owned.rows[0]) return { noInstance: true };
    }
    const same = await c.query<{ id: string }>(
      `SELECT id FROM timeout_rules WHERE customer_id = $1 AND scope = $2
          AND software_pattern IS NOT DISTINCT FROM $3 AND instance_id IS NOT DISTINCT FROM $4::uuid`,
      [customerId, input.scope, input.softwarePattern, input.instanceId],
    );
    if (same.rows[0]) return { exists: same.rows[0].id };
    const n = (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM timeout_rules WHERE customer_id = $1', [customerId])).rows[0]!.n;
    if (n >= max) return { full: { count: n, max } };
    const r = await c.query<TimeoutRuleRow>(
      `INSERT INTO timeout_rules (customer_id, scope, software_pattern, software_like, instance_id, timeout_s, late_percent, description, created_by)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING ${COLS}`,
      [
        customerId,
        input.scope,
        input.softwarePattern,
        input.softwarePattern === null ? null : globToLike(input.softwarePattern),
        input.instanceId,
        input.timeoutS,
        input.latePercent,
        input.description,
        input.createdBy,
      ],
    );
    await markRecompute(c, customerId);
    return { created: r.rows[0]!, recomputed: 0 };
  });
  if (!('created' in out)) return out;
  return { created: out.created, recomputed: await recomputeCustomer(pool, customerId, scopeIds(out.created)) };
}

export interface TimeoutRulePatch {
  timeoutS?: number | null;
  latePercent?: number | null;
  description?: string;
}

/**
 * Changes a rule's values (null clears one; a rule must keep at least one: `empty`), then
 * recomputes. Null when the customer has no such rule.
 */
export async function updateTimeoutRule(
  pool: Pool,
  customerId: string,
  id: string,
  patch: TimeoutRulePatch,
): Promise<{ updated: TimeoutRuleRow; recomputed: number } | { empty: true } | null> {
  const out = await withTx(pool, async (c) => {
    await lockCustomer(c, customerId);
    const cur = (await c.query<TimeoutRuleRow>(`SELECT ${COLS} FROM timeout_rules WHERE customer_id = $1 AND id = $2`, [customerId, id])).rows[0];
    if (!cur) return null;
    const timeoutS = patch.timeoutS === undefined ? cur.timeout_s : patch.timeoutS;
    const latePercent = patch.latePercent === undefined ? cur.late_percent : patch.latePercent;
    if (timeoutS === null && latePercent === null) return { empty: true as const };
    const r = await c.query<TimeoutRuleRow>(
      `UPDATE timeout_rules SET timeout_s = $3, late_percent = $4, description = $5, updated_at = now()
        WHERE customer_id = $1 AND id = $2 RETURNING ${COLS}`,
      [customerId, id, timeoutS, latePercent, patch.description ?? cur.description],
    );
    await markRecompute(c, customerId);
    return { updated: r.rows[0]!, recomputed: 0 };
  });
  if (!out || 'empty' in out) return out;
  return { updated: out.updated, recomputed: await recomputeCustomer(pool, customerId, scopeIds(out.updated)) };
}

/** Deletes a rule and recomputes; null when the customer has no such rule. */
export async function deleteTimeoutRule(pool: Pool, customerId: string, id: string): Promise<{ recomputed: number } | null> {
  const gone = await withTx(pool, async (c) => {
    await lockCustomer(c, customerId);
    const r = await c.query<TimeoutRuleRow>(`DELETE FROM timeout_rules WHERE customer_id = $1 AND id = $2 RETURNING ${COLS}`, [customerId, id]);
    if (!r.rows[0]) return null;
    await markRecompute(c, customerId);
    return r.rows[0];
  });
  if (!gone) return null;
  return { recomputed: await recomputeCustomer(pool, customerId, scopeIds(gone)) };
}

/** The instances a rule can touch: its instance, or (null) all of the customer's. */
const scopeIds = (r: Pick<TimeoutRuleRow, 'scope' | 'instance_id'>) => (r.scope === 'instance' && r.instance_id ? [r.instance_id] : null);

/** Locks the customer's row FOR UPDATE: see the top of this file. */
async function lockCustomer(c: PoolClient, customerId: string): Promise<void> {
  await c.query('SELECT 1 FROM customers WHERE id = $1 FOR UPDATE', [customerId]);
}

/** Records that the customer's instances need a recompute (finished by recomputeCustomer, or the sweep). */
async function markRecompute(c: PoolClient, customerId: string): Promise<void> {
  await c.query(
    `INSERT INTO timeout_recomputes (customer_id, requested_at) VALUES ($1, now())
     ON CONFLICT (customer_id) DO UPDATE SET requested_at = now()`,
    [customerId],
  );
}

/** SET clauses that give row `instances` the rule `r` and the times that follow. */
const APPLY = `timeout_s = r.timeout_s, late_percent = r.late_percent,
       deadline = ${deadlineSql('instances.last_heartbeat_at', 'r.timeout_s')},
       late_at = ${lateAtSql('instances.last_heartbeat_at', 'r.timeout_s', 'r.late_percent')}`;

/**
 * Gives these instances (ids, locked by the caller) their rules where they changed; returns how
 * many changed.
 */
async function applyRules(c: PoolClient, ids: string[]): Promise<number> {
  // Their deadlines and late times moved (either way): the sweep judges them again.
  const r = await c.query<{ n: number }>(
    `WITH u AS (
       UPDATE instances SET ${APPLY}
         FROM (SELECT i.id, x.timeout_s, x.late_percent
                 FROM instances i CROSS JOIN LATERAL timeout_rule_for(i.customer_id, i.software, i.id) x
                WHERE i.id = ANY($1::uuid[])) r
        WHERE instances.id = r.id
          AND (instances.timeout_s IS DISTINCT FROM r.timeout_s OR instances.late_percent IS DISTINCT FROM r.late_percent)
       RETURNING instances.id
     ), again AS (${recheckNowSql('SELECT id FROM u')})
     SELECT count(*)::int AS n FROM u`,
    [ids],
  );
  return r.rows[0]!.n;
}

/**
 * Recomputes the rules of the customer's instances (`only`: just these), chunk by chunk, then
 * clears its mark unless a newer change set it again meanwhile. Returns how many instances changed.
 * Safe to repeat; a failure half-way leaves the mark for the sweep.
 */
export async function recomputeCustomer(pool: Pool, customerId: string, only: string[] | null = null): Promise<number> {
  const started = (await pool.query<{ at: Date }>('SELECT now() AS at')).rows[0]!.at;
  let changed = 0;
  if (only) {
    changed += await withTx(pool, async (c) => {
      await lockInstances(c, only);
      return applyRules(c, only);
    });
  } else {
    // Keyset over the index (customer_id, machine, software, id): each chunk reads its own rows.
    let after: [string, string, string] | null = null;
    for (;;) {
      const page: { id: string; machine: string; software: string }[] = (
        await pool.query<{ id: string; machine: string; software: string }>(
          `SELECT id, machine, software FROM instances WHERE customer_id = $1
              ${after ? 'AND (machine, software, id) > ($3, $4, $5::uuid)' : ''}
            ORDER BY machine, software, id LIMIT $2`,
          after ? [customerId, RECOMPUTE_CHUNK, ...after] : [customerId, RECOMPUTE_CHUNK],
        )
      ).rows;
      if (page.length === 0) break;
      const ids = page.map((x) => x.id);
      changed += await withTx(pool, async (c) => {
        await lockInstances(c, ids);
        return applyRules(c, ids);
      });
      const last = page[page.length - 1]!;
      after = [last.machine, last.software, last.id];
      if (page.length < RECOMPUTE_CHUNK) break;
    }
  }
  await pool.query('DELETE FROM timeout_recomputes WHERE customer_id = $1 AND requested_at <= $2', [customerId, started]);
  return changed;
}

/** Customers whose recompute was asked for more than `olderThanS` ago and never finished. */
export async function unfinishedRecomputes(db: Db, olderThanS: number, limit = 100): Promise<string[]> {
  const r = await db.query<{ customer_id: string }>(
    `SELECT customer_id FROM timeout_recomputes WHERE requested_at < now() - make_interval(secs => $1::float8) ORDER BY requested_at LIMIT $2`,
    [olderThanS, limit],
  );
  return r.rows.map((x) => x.customer_id);
}

/**
 * Makes `light_defaults` say these defaults, and the deadlines and late times of every instance
 * that uses a default follow (chunks of RECOMPUTE_CHUNK, in the ingest lock order). Nothing to do
 * (false) when they already say so and no earlier run stopped half-way (`pending`). Every worker
 * calls it at start-up; workers started with different values leave the last one's in force.
 */
export async function applyLightDefaults(pool: Pool, timeoutS: number, latePercent: number): Promise<boolean> {
  const todo = await withTx(pool, async (c) => {
    const cur = (await c.query<{ timeout_s: number; late_percent: number; pending: boolean }>('SELECT timeout_s, late_percent, pending FROM light_defaults WHERE id = 1 FOR UPDATE'))
      .rows[0];
    if (cur && cur.timeout_s === timeoutS && cur.late_percent === latePercent && !cur.pending) return false;
    await c.query(
      `INSERT INTO light_defaults (id, timeout_s, late_percent, pending, applied_at) VALUES (1, $1, $2, true, now())
       ON CONFLICT (id) DO UPDATE SET timeout_s = $1, late_percent = $2, pending = true, applied_at = now()`,
      [timeoutS, latePercent],
    );
    return true;
  });
  if (!todo) return false;
  let after = '00000000-0000-0000-0000-000000000000';
  for (;;) {
    const ids = (
      await pool.query<{ id: string }>(
        `SELECT id FROM instances WHERE id > $1 AND (timeout_s IS NULL OR late_percent IS NULL) AND last_heartbeat_at IS NOT NULL ORDER BY id LIMIT $2`,
        [after, RECOMPUTE_CHUNK],
      )
    ).rows.map((x) => x.id);
    if (ids.length === 0) break;
    await withTx(pool, async (c) => {
      await lockInstances(c, ids);
      await c.query(
        `UPDATE instances SET deadline = ${deadlineSql('last_heartbeat_at', 'timeout_s')}, late_at = ${lateAtSql('last_heartbeat_at', 'timeout_s', 'late_percent')}
          WHERE id = ANY($1::uuid[])`,
        [ids],
      );
      await c.query(recheckNowSql('SELECT unnest($1::uuid[])'), [ids]);
    });
    after = ids[ids.length - 1]!;
    if (ids.length < RECOMPUTE_CHUNK) break;
  }
  await pool.query('UPDATE light_defaults SET pending = false WHERE id = 1 AND timeout_s = $1 AND late_percent = $2', [timeoutS, latePercent]);
  return true;
}

/**
 * "The timeout rules of customer X changed" on `${SUBJECT_PREFIX}.control.timeout-rules` (the
 * customer id as the message): the api publishes it after each change (lib/infra/hints.ts: best
 * effort), the workers drop their copies of X's rules; copies also expire after 10 minutes.
 */
export class TimeoutRuleHints extends HintPublisher<string> {
  constructor(subject: string, onError?: (e: unknown) => void) {
    super(subject, (customerId) => [customerId], onError);
  }

  /** The workers' side: `changed` with each customer id published. */
  static listen(nc: NatsConnection, subject: string, changed: (customerId: string) => void): Subscription {
    return listenHints(nc, subject, (data) => Buffer.from(data).toString('utf8') || null, changed);
  }
}
