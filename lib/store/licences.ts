// Licences: one per customer (created with it), a device limit (free start: 5), the device count
// (machines seen in the last 30 days), the limit status, and a grace period that starts the first
// time the count goes over the limit. After the grace period gateways refuse machines that are new
// to the customer (gateway/licence-gate.ts); known machines keep reporting, and nothing already
// accepted is dropped. Used by the api, the workers (what new machines do to a licence:
// workers/licences.ts, with the functions at the end), the CLI, and the gateway (`licenceCopy`).
import { withTx, type Pool, type PoolClient } from '../infra/postgres.js';
import type { SyncedSource } from '../infra/synced-map.js';
import { databaseNow } from './clock.js';

export type Tier = 'free' | 'paid';
export const TIERS: Tier[] = ['free', 'paid'];
export type LimitStatus = 'ok' | 'warning' | 'exceeded';

/** Machines seen within this window count as devices. */
export const DEVICE_WINDOW_DAYS = 30;
/** From this share of the limit on, the status is `warning`. */
export const WARNING_SHARE = 0.9;
const DAY_MS = 86_400_000;

type Db = Pool | PoolClient;

export interface LicenceRow {
  customer_id: string;
  customer: string;
  licence_key: string;
  tier: Tier;
  device_limit: number;
  grace_days: number;
  over_limit_since: Date | null;
  created_at: Date;
  updated_at: Date;
}

export function limitStatus(count: number, limit: number): LimitStatus {
  if (count > limit) return 'exceeded';
  if (count >= limit * WARNING_SHARE) return 'warning';
  return 'ok';
}

export interface Grace {
  days: number;
  started_at: string | null;
  ends_at: string | null;
  /** In the grace period: over the limit, new machines still accepted (and flagged). */
  active: boolean;
  /** The grace period is over: new machines are refused while the customer stays over the limit. */
  expired: boolean;
  days_left: number | null;
}

export function grace(overSince: Date | null, days: number, now = Date.now()): Grace {
  if (!overSince) return { days, started_at: null, ends_at: null, active: false, expired: false, days_left: null };
  const ends = overSince.getTime() + days * DAY_MS;
  return {
    days,
    started_at: overSince.toISOString(),
    ends_at: new Date(ends).toISOString(),
    active: now < ends,
    expired: now >= ends,
    days_left: Math.max(0, Math.ceil((ends - now) / DAY_MS)),
  };
}

const SELECT = `SELECT l.customer_id, c.slug AS customer, l.licence_key, l.tier, l.device_limit, l.grace_days, l.over_limit_since,
                       l.created_at, l.updated_at
                  FROM licences l JOIN customers c ON c.id = l.customer_id`;

export async function getLicence(db: Db, customerId: string): Promise<LicenceRow | null> {
  // Every customer has a licence (a trigger creates it); the insert covers customers made before.
  await db.query('INSERT INTO licences (customer_id) SELECT id FROM customers WHERE id = $1 ON CONFLICT DO NOTHING', [customerId]);
  const r = await db.query<LicenceRow>(`${SELECT} WHERE l.customer_id = $1`, [customerId]);
  return r.rows[0] ?? null;
}

// Retired machines (lib/store/decommission.ts) are not devices any more.
const COUNT = `SELECT count(*)::int AS n FROM machines WHERE customer_id = $1 AND retired_at IS NULL AND last_seen_at > now() - make_interval(days => ${DEVICE_WINDOW_DAYS})`;

export async function deviceCount(db: Db, customerId: string): Promise<number> {
  return (await db.query<{ n: number }>(COUNT, [customerId])).rows[0]!.n;
}

/** What the api shows about a licence (license-status, license-key). */
export function licenceView(l: LicenceRow, count: number, now = Date.now()) {
  const g = grace(l.over_limit_since, l.grace_days, now);
  return {
    customer_id: l.customer_id,
    customer: l.customer,
    tier: l.tier,
    device_limit: l.device_limit,
    device_count: count,
    usage_percent: l.device_limit > 0 ? Math.round((count / l.device_limit) * 1000) / 10 : count > 0 ? 100 : 0,
    limit_status: limitStatus(count, l.device_limit),
    window_days: DEVICE_WINDOW_DAYS,
    grace_period: g,
    new_machines_refused: g.expired,
  };
}

export interface LicenceChange {
  tier?: Tier;
  device_limit?: number;
  grace_days?: number;
}

/**
 * Changes a licence (system administrators: api or CLI). In the same transaction the grace period
 * is settled against the new limit: back within it -> cleared; over it -> started now unless it
 * already runs. Gateways pick the change up within CACHE_REFRESH_MS. A change to a paid tier is a
 * `licence_activated` conversion for the customer.
 */
export async function setLicence(c: PoolClient, customerId: string, ch: LicenceChange): Promise<LicenceRow> {
  if (ch.tier !== undefined && !TIERS.includes(ch.tier)) throw new Error(`unknown tier ${ch.tier}: use ${TIERS.join(', ')}`);
  if (ch.device_limit !== undefined && (!Number.isInteger(ch.device_limit) || ch.device_limit < 0)) throw new Error('device limit must be an integer >= 0');
  if (ch.grace_days !== undefined && (!Number.isInteger(ch.grace_days) || ch.grace_days < 0)) throw new Error('grace days must be an integer >= 0');
  const before = await getLicence(c, customerId);
  if (!before) throw new Error('no such customer');
  await c.query('SELECT 1 FROM licences WHERE customer_id = $1 FOR UPDATE', [customerId]);
  const count = await deviceCount(c, customerId);
  const r = await c.query<{ tier: Tier; device_limit: number }>(
    `UPDATE licences SET tier = COALESCE($2, tier), device_limit = COALESCE($3, device_limit), grace_days = COALESCE($4, grace_days),
            over_limit_since = CASE WHEN $5::int > COALESCE($3, device_limit) THEN COALESCE(over_limit_since, now()) ELSE NULL END
      WHERE customer_id = $1 RETURNING tier, device_limit`,
    [customerId, ch.tier ?? null, ch.device_limit ?? null, ch.grace_days ?? null, count],
  );
  const after = r.rows[0]!;
  if (after.tier !== 'free' && (after.tier !== before.tier || after.device_limit !== before.device_limit)) {
    await c.query(
      `INSERT INTO conversions (kind, customer_id, dedup_key, value) VALUES ('licence_activated', $1, $2, $3) ON CONFLICT DO NOTHING`,
      [customerId, `licence_activated:${customerId}:${after.tier}:${after.device_limit}`, JSON.stringify({ tier: after.tier, device_limit: after.device_limit })],
    );
  }
  return (await getLicence(c, customerId))!;
}

/**
 * Re-checks every licence against its device count: starts the grace period of a customer that is
 * over its limit without one (a machine came back after 30 days), ends it for one that is back
 * within (machines aged out of the window). Candidates are found without locks; each is then
 * settled under its licence row's lock with a fresh count, the same lock workers take when a new
 * machine arrives, so the two never undo each other.
 */
export async function reconcileLicences(pool: Pool): Promise<number> {
  const candidates = await pool.query<{ customer_id: string }>(
    `SELECT l.customer_id FROM licences l
       LEFT JOIN (SELECT customer_id, count(*) AS n FROM machines
                   WHERE retired_at IS NULL AND last_seen_at > now() - make_interval(days => ${DEVICE_WINDOW_DAYS}) GROUP BY customer_id) m USING (customer_id)
      WHERE (COALESCE(m.n, 0) > l.device_limit) <> (l.over_limit_since IS NOT NULL)`,
  );
  let changed = 0;
  for (const { customer_id } of candidates.rows) {
    await withTx(pool, async (c) => {
      const l = await c.query<{ device_limit: number; over: boolean }>(
        'SELECT device_limit, over_limit_since IS NOT NULL AS over FROM licences WHERE customer_id = $1 FOR UPDATE',
        [customer_id],
      );
      const n = await deviceCount(c, customer_id);
      const row = l.rows[0];
      if (row && n > row.device_limit !== row.over) {
        await c.query(`UPDATE licences SET over_limit_since = CASE WHEN $2 THEN now() ELSE NULL END WHERE customer_id = $1`, [customer_id, n > row.device_limit]);
        changed++;
      }
    });
  }
  return changed;
}

// ---- the gateway's copy of every licence (gateway/licence-gate.ts) ---------------------------

/** What the gateway's licence gate needs of a licence. */
export interface LicenceCopyRow {
  customer_id: string;
  device_limit: number;
  grace_days: number;
  over_limit_since: Date | null;
  updated_at: Date;
}

const COPY = `SELECT customer_id, device_limit, grace_days, over_limit_since, updated_at FROM licences`;

export async function allLicenceCopyRows(pool: Pool): Promise<LicenceCopyRow[]> {
  return (await pool.query<LicenceCopyRow>(COPY)).rows;
}

export async function licenceCopyRowsChangedSince(pool: Pool, since: Date): Promise<LicenceCopyRow[]> {
  return (await pool.query<LicenceCopyRow>(`${COPY} WHERE updated_at > $1`, [since])).rows;
}

/** What the gateway's SyncedMap of licences reads. */
export const licenceCopy: SyncedSource<LicenceCopyRow> = { now: databaseNow, all: allLicenceCopyRows, changedSince: licenceCopyRowsChangedSince };
/**
 * Locks the licence rows of these customers (FOR UPDATE, in customer order: the same lock the
 * licence sweep and licence changes take) and returns their device limits.
 */
export async function lockLicences(c: PoolClient, customerIds: string[]): Promise<{ customer_id: string; device_limit: number }[]> {
  const r = await c.query<{ customer_id: string; device_limit: number }>(
    'SELECT customer_id, device_limit FROM licences WHERE customer_id = ANY($1::uuid[]) ORDER BY customer_id FOR UPDATE',
    [customerIds],
  );
  return r.rows;
}

/** The device counts (machines seen in the last DEVICE_WINDOW_DAYS) of these customers; none: not in the map. */
export async function deviceCounts(db: Db, customerIds: string[]): Promise<Map<string, number>> {
  const r = await db.query<{ customer_id: string; n: number }>(
    `SELECT customer_id, count(*)::int AS n FROM machines
      WHERE customer_id = ANY($1::uuid[]) AND retired_at IS NULL AND last_seen_at > now() - make_interval(days => ${DEVICE_WINDOW_DAYS})
      GROUP BY customer_id`,
    [customerIds],
  );
  return new Map(r.rows.map((x) => [x.customer_id, x.n]));
}

/** Starts the grace period of these customers now, unless it already runs (under their licence lock). */
export async function startGracePeriods(db: Db, customerIds: string[]): Promise<void> {
  await db.query('UPDATE licences SET over_limit_since = now() WHERE customer_id = ANY($1::uuid[]) AND over_limit_since IS NULL', [customerIds]);
}
