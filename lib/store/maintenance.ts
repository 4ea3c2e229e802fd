// Maintenance windows of a customer (Postgres `maintenance_windows`) and their occurrences
// (`maintenance_occurrences`), as the api manages them, as the worker job keeps the occurrences up
// to date (the job `maintenance-occurrences`, workers/main.ts), and the SQL fragments the traffic light asks them with (at the
// end: the seam). When occurrences fall is lib/domain/maintenance.ts; docs/api.md "Maintenance
// windows" and docs/operations.md "Maintenance windows" say what a window does.
//
// Occurrences are materialised so that SQL can use them: every occurrence of every window that
// overlaps [now - 8 days, now + 8 days]. The api writes a window's with the window (one
// transaction); the job, hourly, extends the horizon, rewrites what a window's definition gives
// now (a tz database update may move an occurrence) and drops occurrences that ended more than 8
// days ago. Both are safe to repeat: the rows are keyed by (window, start).
import { withTx, type Pool, type PoolClient } from '../infra/postgres.js';
import type { Config } from '../infra/config.js';
import { loadQuotas } from './quotas.js';
import { recheckNowSql } from './instances.js';
import type { MaintenanceWindow } from '../contract/schemas/maintenance.js';
import {
  OCCURRENCE_HORIZON_MS,
  WEEKDAYS,
  currentOrNext,
  globToLike,
  occurrencesBetween,
  type Occurrence,
  type WindowTimes,
} from '../domain/maintenance.js';

export type MaintenanceScope = 'customer' | 'machine' | 'software' | 'instance';

/** A window as stored, with its machine's slug and its instance's software for the reader. */
export interface MaintenanceWindowRow {
  id: string;
  scope: MaintenanceScope;
  machine_id: string | null;
  /** The slug of the machine (scope machine or instance). */
  machine: string | null;
  instance_id: string | null;
  /** The software of the instance (scope instance). */
  software: string | null;
  software_pattern: string | null;
  kind: 'once' | 'recurring';
  starts_at: Date | null;
  ends_at: Date | null;
  time_zone: string | null;
  start_minute: number | null;
  duration_minutes: number | null;
  days: number[] | null;
  valid_from: Date | null;
  valid_until: Date | null;
  description: string;
  created_at: Date;
  created_by: string | null;
}

const SELECT = `SELECT w.id, w.scope, COALESCE(w.machine_id, i.machine_id) AS machine_id, m.slug AS machine, w.instance_id, i.software,
                       w.software_pattern, w.kind, w.starts_at, w.ends_at, w.time_zone, w.start_minute, w.duration_minutes,
                       w.days::int[] AS days, w.valid_from, w.valid_until, w.description, w.created_at, w.created_by
                  FROM maintenance_windows w
                  LEFT JOIN instances i ON i.id = w.instance_id
                  LEFT JOIN machines m ON m.id = COALESCE(w.machine_id, i.machine_id)`;

/** `HH:MM` <-> minutes after midnight. */
export const minuteOf = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));
export const hhmmOf = (minute: number): string => `${String(Math.floor(minute / 60)).padStart(2, '0')}:${String(minute % 60).padStart(2, '0')}`;

/** The times of a stored window, as lib/domain/maintenance.ts computes with them. */
export function windowTimesOf(r: Pick<MaintenanceWindowRow, 'kind' | 'starts_at' | 'ends_at' | 'time_zone' | 'start_minute' | 'duration_minutes' | 'days' | 'valid_from' | 'valid_until'>): WindowTimes {
  if (r.kind === 'once') return { kind: 'once', startsAt: r.starts_at!, endsAt: r.ends_at! };
  return {
    kind: 'recurring',
    timeZone: r.time_zone!,
    startTime: hhmmOf(r.start_minute!),
    durationMinutes: r.duration_minutes!,
    days: [...r.days!].sort((a, b) => a - b).map((d) => WEEKDAYS[d - 1]!),
    validFrom: r.valid_from,
    validUntil: r.valid_until,
  };
}

/** The customer's windows, oldest first, each with its occurrence in progress at `now` or its next one (null: none left). */
export async function listWindows(pool: Pool, customerId: string): Promise<{ now: Date; items: (MaintenanceWindowRow & { next: Occurrence | null })[] }> {
  const r = await pool.query<MaintenanceWindowRow & { now: Date }>(`SELECT x.*, clock_timestamp() AS now FROM (${SELECT} WHERE w.customer_id = $1) x ORDER BY x.created_at, x.id`, [customerId]);
  const now = r.rows[0]?.now ?? new Date();
  return {
    now,
    items: r.rows.map(({ now: _n, ...w }) => ({ ...w, next: currentOrNext(windowTimesOf(w), now) })),
  };
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/** A stored window as the api (and the CLI) answers it. */
export function windowView(w: MaintenanceWindowRow & { next: Occurrence | null }, now: Date): MaintenanceWindow {
  const t = windowTimesOf(w);
  return {
    id: w.id,
    scope: w.scope,
    machine_id: w.machine_id,
    machine: w.machine,
    instance_id: w.instance_id,
    software: w.software,
    software_pattern: w.software_pattern,
    kind: w.kind,
    starts_at: iso(w.starts_at),
    ends_at: iso(w.ends_at),
    recurrence:
      t.kind === 'recurring'
        ? { time_zone: t.timeZone, start_time: t.startTime, duration_minutes: t.durationMinutes, days: t.days, valid_from: iso(t.validFrom), valid_until: iso(t.validUntil) }
        : null,
    description: w.description,
    created_at: w.created_at.toISOString(),
    next: w.next ? { starts_at: w.next.startsAt.toISOString(), ends_at: w.next.endsAt.toISOString(), in_progress: w.next.startsAt <= now && now < w.next.endsAt } : null,
  };
}

export type WindowScopeInput =
  | { scope: 'customer' }
  | { scope: 'machine'; machineId: string }
  | { scope: 'software'; softwarePattern: string }
  | { scope: 'instance'; instanceId: string };

export type CreateWindowResult =
  | { created: MaintenanceWindowRow & { next: Occurrence | null } }
  | { full: { count: number; max: number } }
  /** The machine or instance named is not one of the customer's. */
  | { missing: 'machine' | 'instance' };

/**
 * A new window with its occurrences in the horizon, in one transaction; unless the customer holds
 * its quota of windows (`full`) or the machine or instance is not its own (`missing`). One
 * creation at a time per customer (its row locked), so the quota holds under concurrent requests.
 * `times` must have passed windowTimesProblem (lib/domain/maintenance.ts).
 */
export async function createWindow(
  pool: Pool,
  cfg: Pick<Config, 'quotas'>,
  customerId: string,
  w: { scope: WindowScopeInput; times: WindowTimes; description: string; createdBy: string | null },
): Promise<CreateWindowResult> {
  return withTx(pool, async (c) => {
    await c.query('SELECT 1 FROM customers WHERE id = $1 FOR UPDATE', [customerId]);
    const s = w.scope;
    if (s.scope === 'machine' && !(await c.query('SELECT 1 FROM machines WHERE customer_id = $1 AND id = $2', [customerId, s.machineId])).rows[0]) return { missing: 'machine' };
    if (s.scope === 'instance' && !(await c.query('SELECT 1 FROM instances WHERE customer_id = $1 AND id = $2', [customerId, s.instanceId])).rows[0]) return { missing: 'instance' };
    const max = (await loadQuotas(c, cfg, customerId)).maintenance_windows;
    const n = (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM maintenance_windows WHERE customer_id = $1', [customerId])).rows[0]!.n;
    if (n >= max) return { full: { count: n, max } };
    const t = w.times;
    const rec = t.kind === 'recurring' ? t : null;
    const id = (
      await c.query<{ id: string }>(
        `INSERT INTO maintenance_windows (customer_id, scope, machine_id, instance_id, software_pattern, software_like, kind, starts_at, ends_at,
                                          time_zone, start_minute, duration_minutes, days, valid_from, valid_until, description, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::smallint[], $14, $15, $16, $17) RETURNING id`,
        [
          customerId,
          s.scope,
          s.scope === 'machine' ? s.machineId : null,
          s.scope === 'instance' ? s.instanceId : null,
          s.scope === 'software' ? s.softwarePattern : null,
          s.scope === 'software' ? globToLike(s.softwarePattern) : null,
          t.kind,
          t.kind === 'once' ? t.startsAt : null,
          t.kind === 'once' ? t.endsAt : null,
          rec?.timeZone ?? null,
          rec ? minuteOf(rec.startTime) : null,
          rec?.durationMinutes ?? null,
          rec ? rec.days.map((d) => WEEKDAYS.indexOf(d) + 1) : null,
          rec?.validFrom ?? null,
          rec?.validUntil ?? null,
          w.description,
          w.createdBy,
        ],
      )
    ).rows[0]!.id;
    const now = (await c.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now;
    await syncOccurrences(c, [{ id, times: t }], now);
    const row = (await c.query<MaintenanceWindowRow>(`${SELECT} WHERE w.id = $1`, [id])).rows[0]!;
    return { created: { ...row, next: currentOrNext(t, now) } };
  });
}

/** Deletes one of the customer's windows, and its occurrences with it; false when it has none of that id. */
export async function deleteWindow(pool: Pool, customerId: string, id: string): Promise<boolean> {
  return withTx(pool, async (c) => {
    const r = await c.query('DELETE FROM maintenance_windows WHERE customer_id = $1 AND id = $2', [customerId, id]);
    if (r.rowCount === 0) return false;
    // The customer's instances in maintenance now: those no other window covers end it now (the
    // sweep judges them again: lib/store/light-events.ts), the others keep the end of what covers
    // them (its occurrences are gone already, with their window).
    await c.query(
      `WITH u AS (
         UPDATE instances i SET maintenance_until = COALESCE(${maintenanceUntilSql('i', 'now()')}, now())
          WHERE i.customer_id = $1 AND i.maintenance_until > now()
         RETURNING i.id
       ) ${recheckNowSql('SELECT id FROM u')}`,
      [customerId],
    );
    return true;
  });
}

/**
 * Makes the stored occurrences of these windows within [now - 8 days, now + 8 days] what their
 * definitions give: adds the missing, moves an end that changed, deletes those no longer given.
 * Occurrences outside the horizon are left alone. In the caller's transaction.
 */
async function syncOccurrences(c: PoolClient, windows: { id: string; times: WindowTimes }[], now: Date): Promise<{ inserted: number; deleted: number }> {
  const from = new Date(now.getTime() - OCCURRENCE_HORIZON_MS);
  const to = new Date(now.getTime() + OCCURRENCE_HORIZON_MS);
  const ids: string[] = [];
  const starts: string[] = [];
  const ends: string[] = [];
  for (const w of windows) {
    for (const o of occurrencesBetween(w.times, from, to)) {
      ids.push(w.id);
      starts.push(o.startsAt.toISOString());
      ends.push(o.endsAt.toISOString());
    }
  }
  const del = await c.query(
    `DELETE FROM maintenance_occurrences m
      WHERE m.window_id = ANY($1::uuid[]) AND m.ends_at > $4 AND m.starts_at < $5
        AND NOT EXISTS (SELECT 1 FROM unnest($2::uuid[], $3::timestamptz[]) AS o(id, s) WHERE o.id = m.window_id AND o.s = m.starts_at)`,
    [windows.map((w) => w.id), ids, starts, from, to],
  );
  const ins = await c.query(
    `INSERT INTO maintenance_occurrences (window_id, customer_id, machine_id, instance_id, software_like, starts_at, ends_at)
     SELECT w.id, w.customer_id, w.machine_id, w.instance_id, w.software_like, o.s, o.e
       FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[]) AS o(id, s, e) JOIN maintenance_windows w ON w.id = o.id
     ON CONFLICT (window_id, starts_at) DO UPDATE SET ends_at = EXCLUDED.ends_at WHERE maintenance_occurrences.ends_at <> EXCLUDED.ends_at`,
    [ids, starts, ends],
  );
  return { inserted: ins.rowCount ?? 0, deleted: del.rowCount ?? 0 };
}

/**
 * The job's run (queue maintenance-occurrences, workers/main.ts): every window's occurrences brought up to date for the
 * horizon around the database's now, `batch` windows per transaction (each locked FOR KEY SHARE
 * meanwhile, so that a window deleted at the same moment waits and takes its rows with it), then
 * the occurrences that ended more than 8 days ago deleted. Safe to repeat and to run beside the api.
 */
export async function refreshOccurrences(pool: Pool, o: { batch?: number } = {}): Promise<{ windows: number; inserted: number; deleted: number; pruned: number }> {
  const batch = o.batch ?? 500;
  const out = { windows: 0, inserted: 0, deleted: 0, pruned: 0 };
  let after = '00000000-0000-0000-0000-000000000000';
  for (;;) {
    const done = await withTx(pool, async (c) => {
      const rows = (
        await c.query<MaintenanceWindowRow & { now: Date }>(
          `SELECT id, kind, starts_at, ends_at, time_zone, start_minute, duration_minutes, days::int[] AS days, valid_from, valid_until, clock_timestamp() AS now
             FROM maintenance_windows WHERE id > $1 ORDER BY id LIMIT $2 FOR KEY SHARE`,
          [after, batch],
        )
      ).rows;
      if (rows.length === 0) return true;
      const r = await syncOccurrences(c, rows.map((w) => ({ id: w.id, times: windowTimesOf(w) })), rows[0]!.now);
      out.windows += rows.length;
      out.inserted += r.inserted;
      out.deleted += r.deleted;
      after = rows[rows.length - 1]!.id;
      return rows.length < batch;
    });
    if (done) break;
  }
  const pruned = await pool.query(`DELETE FROM maintenance_occurrences WHERE ends_at < clock_timestamp() - make_interval(secs => $1::double precision)`, [OCCURRENCE_HORIZON_MS / 1000]);
  out.pruned = pruned.rowCount ?? 0;
  return out;
}

// ---- the seam: SQL fragments over an `instances` row ------------------------------------------
//
// Each takes the alias of an `instances` row in the caller's query (its id, customer_id,
// machine_id and software are read) and SQL expressions for instants (`now()`, `$3`,
// `i.last_heartbeat_at`), and gives an expression of the caller's row. Occurrences are known for
// [now - 8 days, now + 8 days]: ask about instants within it. In particular maintenanceEndSql
// forgets a window that ended more than 8 days ago, so a silence timeout longer than 8 days would
// not see its deadline start again: keep timeouts shorter, or widen OCCURRENCE_HORIZON_MS
// (lib/domain/maintenance.ts) with them. Served by the index maintenance_occurrences (customer_id, ends_at).

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

function ident(alias: string): string {
  if (!IDENT.test(alias)) throw new Error(`not an SQL alias: ${JSON.stringify(alias)}`);
  return alias;
}

/** An occurrence `o` applies to the instance `i`: same customer, and its machine, instance or software pattern (whichever it has) matches. */
function applies(o: string, i: string): string {
  return `${o}.customer_id = ${i}.customer_id
     AND (${o}.machine_id IS NULL OR ${o}.machine_id = ${i}.machine_id)
     AND (${o}.instance_id IS NULL OR ${o}.instance_id = ${i}.id)
     AND (${o}.software_like IS NULL OR ${i}.software LIKE ${o}.software_like)`;
}

/** boolean: an occurrence applying to the instance covers the instant `at` (starts_at <= at < ends_at). */
export function inMaintenanceSql(alias: string, atSqlExpr: string): string {
  const i = ident(alias);
  return `EXISTS (SELECT 1 FROM maintenance_occurrences mw_o
     WHERE ${applies('mw_o', i)} AND mw_o.ends_at > (${atSqlExpr}) AND mw_o.starts_at <= (${atSqlExpr}))`;
}

/**
 * timestamptz or NULL: the latest end of an occurrence applying to the instance with
 * after < ends_at <= at. With `after` the last heartbeat and `at` now: when the last window that
 * ended since then ended, from which the instance's deadline starts again.
 */
export function maintenanceEndSql(alias: string, afterSqlExpr: string, atSqlExpr: string): string {
  const i = ident(alias);
  return `(SELECT max(mw_o.ends_at) FROM maintenance_occurrences mw_o
     WHERE ${applies('mw_o', i)} AND mw_o.ends_at > (${afterSqlExpr}) AND mw_o.ends_at <= (${atSqlExpr}))`;
}

/**
 * timestamptz or NULL (not in maintenance at `at`): when the instance's maintenance in progress at
 * `at` ends: the end of the union of the occurrences covering `at` and of those overlapping or
 * touching them, chained (one from 02:00 to 04:00 and one from 03:00 (or 04:00) to 06:00: 06:00).
 */
export function maintenanceUntilSql(alias: string, atSqlExpr: string): string {
  return chainSql(alias, atSqlExpr, 'forward');
}

/**
 * timestamptz or NULL (not in maintenance at `at`): when the instance's maintenance in progress at
 * `at` began: the start of the union of the occurrences covering `at` and of those before them
 * that overlap or touch them, chained backwards (one from 02:00 to 04:00 and one from 03:00 to
 * 06:00, at 05:00: 02:00). A change into maintenance is recorded at this time, not when a worker
 * noticed it (lib/store/light-events.ts).
 */
export function maintenanceFromSql(alias: string, atSqlExpr: string): string {
  return chainSql(alias, atSqlExpr, 'backward');
}

/**
 * The chain of the occurrences covering `at` and of those that overlap or touch them, followed
 * forward (its latest end) or backward (its earliest start); alias prefixes mw_ and mf_, so both
 * can stand in one statement.
 */
function chainSql(alias: string, atSqlExpr: string, way: 'forward' | 'backward'): string {
  const i = ident(alias);
  const [p, col, agg] = way === 'forward' ? (['mw', 'ends_at', 'max'] as const) : (['mf', 'starts_at', 'min'] as const);
  const next = `${p}_n`;
  const step =
    way === 'forward'
      ? `${next}.starts_at <= ${p}_chain.ends_at AND ${next}.ends_at > ${p}_chain.ends_at`
      : `${next}.ends_at >= ${p}_chain.starts_at AND ${next}.starts_at < ${p}_chain.starts_at`;
  return `(WITH RECURSIVE ${p}_chain(${col}) AS (
       SELECT ${p}_o.${col} FROM maintenance_occurrences ${p}_o
        WHERE ${applies(`${p}_o`, i)} AND ${p}_o.ends_at > (${atSqlExpr}) AND ${p}_o.starts_at <= (${atSqlExpr})
       UNION
       SELECT ${next}.${col} FROM ${p}_chain JOIN maintenance_occurrences ${next} ON ${applies(next, i)} AND ${step}
     ) SELECT ${agg}(${col}) FROM ${p}_chain)`;
}

// ---- the sweep's side (workers/light-sweep.ts): instances whose window began ----------------

export interface ActiveOccurrence {
  window_id: string;
  starts_at: Date;
}

/**
 * Occurrences in progress at `horizonMs` whose instances the sweep has not judged yet (entered_at
 * NULL), oldest first.
 */
export async function occurrencesToEnter(db: Pool | PoolClient, horizonMs: number, limit = 100): Promise<ActiveOccurrence[]> {
  const r = await db.query<ActiveOccurrence>(
    `SELECT window_id, starts_at FROM maintenance_occurrences
      WHERE entered_at IS NULL AND starts_at <= to_timestamp($1::float8 / 1000) AND ends_at > to_timestamp($1::float8 / 1000)
      ORDER BY starts_at LIMIT $2`,
    [horizonMs, limit],
  );
  return r.rows;
}

/**
 * Up to `limit` instances (not retired) the occurrence applies to whose stored maintenance does not
 * reach its end yet: judged, they take it (or a later end) and are not returned again.
 */
export async function instancesEnteringMaintenance(db: Pool | PoolClient, o: ActiveOccurrence, limit: number): Promise<string[]> {
  const r = await db.query<{ id: string }>(
    `SELECT i.id FROM maintenance_occurrences o JOIN instances i ON ${applies('o', 'i')}
      WHERE o.window_id = $1 AND o.starts_at = $2 AND i.retired_at IS NULL
        AND (i.maintenance_until IS NULL OR i.maintenance_until < o.ends_at)
      LIMIT $3`,
    [o.window_id, o.starts_at, limit],
  );
  return r.rows.map((x) => x.id);
}

/** Every instance of the occurrence judged: not asked again. */
export async function markEntered(db: Pool | PoolClient, o: ActiveOccurrence): Promise<void> {
  await db.query('UPDATE maintenance_occurrences SET entered_at = now() WHERE window_id = $1 AND starts_at = $2', [o.window_id, o.starts_at]);
}
