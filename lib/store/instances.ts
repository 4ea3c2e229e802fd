// Instances as the api reads them (Postgres `instances`), scoped to a customer: ownership ("does
// this instance belong to this customer", a 404 otherwise, never a 403 that would tell the id
// exists), the list with its filters, order and keyset paging (lib/store/instance-order.ts), one
// instance, and the counts per traffic-light colour. The colour is the stored one
// (`instance_lights`): the workers judge it from the newest receive time, in Postgres or in Redis,
// with every report, at every heartbeat key's expiry and in the sweep (lib/domain/traffic-light.ts,
// docs/decisions.md "Traffic light"); the api never derives it from Postgres's heartbeat times,
// which may be older than the newest heartbeat (workers/heartbeat-state.ts).
// At the end, the workers' side: the stored colour (counted, swept, the rows locked in the ingest
// order), the ingest upsert and the heartbeat flusher's write (the colour's own changes:
// lib/store/light-events.ts).
import { ISO_TIMES, type Pool, type PoolClient } from '../infra/postgres.js';
import { notFound } from '../contract/errors.js';
import { silentSql, overdueSql, silenceAtSql, deadlineSql, lateAtSql, waitingDeadlineSql, waitingLateAtSql, waitedParam, NO_WAITING, type LightColour, type WaitingHeartbeats } from '../domain/traffic-light.js';
import { instanceOrderBy, cursorColumns, afterSql, type OrderKey, type GroupKey } from './instance-order.js';
import type { InstanceTimes, HeartbeatFields } from './live-heartbeats.js';

type Db = Pool | PoolClient;

/** The instance's columns when it is the customer's; 404 otherwise. */
async function ownedColumns<T extends object>(db: Db, customerId: string, id: string, columns: string): Promise<T> {
  const r = await db.query<T>(`SELECT ${columns} FROM instances WHERE customer_id = $1 AND id = $2`, [customerId, id]);
  if (!r.rows[0]) throw notFound('no such instance');
  return r.rows[0];
}

/** 404 unless the instance is the customer's. */
export const ownedInstance = (db: Db, customerId: string, id: string) => ownedColumns<{ id: string }>(db, customerId, id, 'id');

/** The software of the customer's instance (404 otherwise). */
export const ownedInstanceSoftware = (db: Db, customerId: string, id: string) => ownedColumns<{ software: string }>(db, customerId, id, 'software');

/** The latest snapshot of the customer's instance (404 otherwise). */
export const ownedInstanceSnapshot = (db: Db, customerId: string, id: string) => ownedColumns<{ snapshot: unknown }>(db, customerId, id, 'snapshot');

/** The latest status of the customer's instance (404 otherwise). */
export const ownedInstanceStatus = (db: Db, customerId: string, id: string) =>
  ownedColumns<{ status: string | null; status_message: string | null; status_at: Date | null; snapshot: unknown }>(db, customerId, id, 'status, status_message, status_at, snapshot');

/** The list's filters other than the colour (a count serves every colour of a filter). */
export interface InstanceFilter {
  machine?: string;
  software?: string;
  group?: string;
  location?: string;
  q?: string;
}

/** WHERE conditions over `instances i` for these filters; `param` adds a value, returns its placeholder. */
function filterSql(customerParam: string, f: InstanceFilter, param: (v: unknown) => string): string[] {
  // Retired instances (lib/store/decommission.ts) are no longer the fleet: not listed, not counted.
  const where = [`i.customer_id = ${customerParam}`, 'i.retired_at IS NULL'];
  if (f.machine !== undefined) where.push(`i.machine = ${param(f.machine)}`);
  if (f.software !== undefined) where.push(`i.software = ${param(f.software)}`);
  if (f.group !== undefined) where.push(`i.group_name = ${param(f.group)}`);
  if (f.location !== undefined) where.push(`i.location = ${param(f.location)}`);
  // Substring of the machine's name, any case; LIKE's own characters match themselves.
  if (f.q) where.push(`i.machine ILIKE ${param(`%${f.q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)}`);
  return where;
}

export type LightCountsValue = Record<LightColour, number>;

/** Counts per stored colour of the customer's instances matching the filter (every matching row is read). */
export async function countLights(pool: Pool, customerId: string, filter: InstanceFilter): Promise<LightCountsValue> {
  const params: unknown[] = [customerId];
  const where = filterSql('$1', filter, (v) => `$${params.push(v)}`);
  const r = await pool.query<{ light: LightColour; n: number }>(
    `SELECT l.light, count(*)::int AS n FROM instances i JOIN instance_lights l ON l.instance_id = i.id WHERE ${where.join(' AND ')} GROUP BY l.light`,
    params,
  );
  const out: LightCountsValue = { green: 0, yellow: 0, late: 0, red: 0, grey: 0, maintenance: 0 };
  for (const row of r.rows) out[row.light] = row.n;
  return out;
}

// A retired instance (only GET /api/instances/{id} still answers it) is grey, reason `retired`,
// since its retirement: it is never silent, so never red (docs/operations.md "Decommissioning").
// A row no judgement has written yet (an instance created a moment ago whose first judgement is
// still in its transaction) is grey: no heartbeat yet.
function instanceSelect(extra = ''): string {
  return `SELECT i.id, i.machine_id, i.machine, i.software,
                 CASE WHEN i.retired_at IS NOT NULL THEN 'grey' ELSE l.light END AS light,
                 CASE WHEN i.retired_at IS NOT NULL THEN 'retired' ELSE COALESCE(l.light_reason, 'no heartbeat yet') END AS light_reason,
                 CASE WHEN i.retired_at IS NOT NULL THEN i.retired_at ELSE COALESCE(l.light_since, i.first_seen_at) END AS light_since,
                 i.first_seen_at, i.last_seen_at, i.last_heartbeat_at, i.version, i.uptime_seconds, i.pid,
                 COALESCE(i.ip_addresses, '{}') AS ip_addresses, i.group_name, i.location, i.group_priority, i.sort_priority,
                 i.status, i.status_message, i.status_at, i.agent_ts, i.clock_skew,
                 COALESCE(i.timeout_s, d.timeout_s) AS timeout_s, COALESCE(i.late_percent, d.late_percent) AS late_percent,
                 CASE WHEN i.retired_at IS NULL THEN GREATEST(i.deadline, ${deadlineSql('i.maintenance_until', 'i.timeout_s')}) END AS deadline,
                 CASE WHEN i.retired_at IS NULL THEN GREATEST(i.late_at, ${lateAtSql('i.maintenance_until', 'i.timeout_s', 'i.late_percent')}) END AS late_at,
                 CASE WHEN i.retired_at IS NULL AND i.maintenance_until > now() THEN i.maintenance_until END AS maintenance_until ${extra}
            FROM instances i JOIN instance_lights l ON l.instance_id = i.id
           CROSS JOIN (SELECT timeout_s, late_percent FROM light_defaults WHERE id = 1) d`;
}

/** An instance row as the api answers it (the column group_name is the field `group`). */
export type InstanceRow = InstanceTimes & Record<string, unknown>;

/** The customer's instance with its snapshot (also when retired: `retired_at`); 404 otherwise. */
export async function getInstance(pool: Pool, customerId: string, id: string): Promise<InstanceRow> {
  const r = await pool.query<InstanceRow>({
    text: `${instanceSelect(', i.snapshot, i.retired_at')} WHERE i.customer_id = $1 AND i.id = $2`,
    values: [customerId, id],
    types: ISO_TIMES,
  });
  if (!r.rows[0]) throw notFound('no such instance');
  return r.rows[0];
}

export interface InstancePage {
  filter: InstanceFilter;
  light?: LightColour;
  /** The validated `sort` (lib/store/instance-order.ts) and its keys (orderKeys). */
  sort: string | undefined;
  keys: OrderKey[];
  groupBy?: GroupKey;
  /** The order's values of the previous page's last row (checked with cursorFits). */
  after?: (string | null)[];
  /** Rows to read (the page plus one, to tell whether there is a next page). */
  limit: number;
  offset: number;
  /**
   * The customer has few instances of `light` (at most COLOUR_FIRST_MAX, from the cached counts):
   * read those first and sort them, instead of walking the order's index and probing each row's
   * colour, which assumes the colour is spread evenly over the order. It is not: the degraded and
   * the silent bunch up by last seen, and a page of yellow by last seen read 9,000-41,000 rows
   * (bench/README.md, "The list of one colour"). Not with group_by.
   */
  colourFirst?: boolean;
}

/** At most this many instances of the colour asked for: the list reads them all and sorts them. */
export const COLOUR_FIRST_MAX = 5000;

/** A page of the customer's instances; each row also has the order's values as `_c0`, `_c1`, … (the cursor). */
export async function listInstances(pool: Pool, customerId: string, page: InstancePage): Promise<InstanceRow[]> {
  const params: unknown[] = [customerId];
  const param = (v: unknown) => `$${params.push(v)}`;
  const where = filterSql('$1', page.filter, param);
  const outer: string[] = [];
  // The customer's entries of that colour in instance_lights_customer_light (the customer named
  // on the stored row too, or Postgres cannot use the index for it).
  const light = page.light ? param(page.light) : null;
  const filtered = [...where];
  if (light) where.push(`l.customer_id = $1`, `l.light = ${light}`);
  // Keyset paging: the rows after the previous page's last row (an index walk from there).
  if (page.after !== undefined) outer.push(afterSql(page.keys, page.after, param));
  const orderBy = instanceOrderBy(page.sort, page.groupBy);
  const outerWhere = outer.length ? `WHERE ${outer.join(' AND ')}` : '';
  if (light && page.colourFirst && !page.groupBy) {
    // Few instances of this colour: read them all (instance_lights_customer_light), choose the
    // page from the columns the order needs, and build the full rows of that page only (building
    // them for every row of the colour before the sort cost about 6 µs each). The page's rows are
    // sorted again by the same order, which ends in the id: the same rows in the same order as the
    // statement below. (With group_by the order holds a window over all rows: not taken here.)
    const sql = `WITH lit AS MATERIALIZED (SELECT instance_id FROM instance_lights WHERE customer_id = $1 AND light = ${light}),
                      page AS MATERIALIZED (SELECT x.id FROM (${orderColumns(light)} WHERE ${filtered.join(' AND ')} AND i.id IN (SELECT instance_id FROM lit)) x
                                             ${outerWhere} ${orderBy} LIMIT ${param(page.limit)} OFFSET ${param(page.offset)})
                 SELECT x.*, ${cursorColumns(page.keys)} FROM (${instanceSelect()} WHERE i.id IN (SELECT id FROM page)) x ${orderBy}`;
    return (await pool.query<InstanceRow>({ text: sql, values: params, types: ISO_TIMES })).rows;
  }
  const sql = `SELECT x.*, ${cursorColumns(page.keys)} FROM (${instanceSelect()} WHERE ${where.join(' AND ')}) x
                    ${outerWhere}
                    ${orderBy} LIMIT ${param(page.limit)} OFFSET ${param(page.offset)}`;
  return (await pool.query<InstanceRow>({ text: sql, values: params, types: ISO_TIMES })).rows;
}

/**
 * The columns the list's orders read (lib/store/instance-order.ts: x.<column>), under the names
 * instanceSelect gives them, for instances not retired whose stored colour is `light` (a
 * placeholder): the colour is that one, so instance_lights is not read again per row.
 */
function orderColumns(light: string): string {
  return `SELECT i.id, i.machine, i.software, ${light}::text AS light, i.status, i.first_seen_at, i.last_seen_at,
                 i.group_name, i.location, i.group_priority, i.sort_priority
            FROM instances i`;
}

/** HEARTBEAT_TIMEOUT_S and HEARTBEAT_LATE_PERCENT as the workers last applied them (lib/store/timeout-rules.ts). */
export async function lightDefaults(db: Db): Promise<{ timeout_s: number; late_percent: number }> {
  const r = await db.query<{ timeout_s: number; late_percent: number }>('SELECT timeout_s, late_percent FROM light_defaults WHERE id = 1');
  return r.rows[0]!;
}

// ---- the workers' side: the stored colour (`light`, recorded by workers/traffic-light.ts) -----

/** Instances per stored colour, all customers, retired ones left out (`n`: a bigint count, as text): one scan of the table. */
export async function countStoredLights(db: Db): Promise<{ light: string; n: string }[]> {
  const r = await db.query<{ light: string; n: string }>(
    `SELECT l.light, count(*) AS n FROM instances i JOIN instance_lights l ON l.instance_id = i.id WHERE i.retired_at IS NULL GROUP BY l.light`,
  );
  return r.rows;
}

/**
 * Locks these instances' rows in the transaction of `c`, in the order the ingest upsert takes
 * them (machine, software), so that whoever else writes them first cannot deadlock with it.
 */
export async function lockInstances(c: PoolClient, instanceIds: string[]): Promise<void> {
  await c.query(`SELECT 1 FROM instances WHERE id = ANY($1::uuid[]) ORDER BY machine_id, software COLLATE "C" FOR UPDATE`, [instanceIds]);
}

// A batch of instance ids ($1) read by probes of the primary keys, one per id, whatever the
// planner believes: written as `id = ANY($1)` (or joined plainly), Postgres scanned the whole of
// `instances` and `instance_lights` for each batch of the expiry listener and the sweep once a
// batch was a few per cent of the fleet (100,000 silent at once: 40-60 ms a batch, a third of
// Postgres's time for the light; bench/README.md "The light's own statements"), so a batch cost
// more the larger the fleet. A LATERAL subquery with LIMIT is never flattened into a join, so each
// id is one probe (test/servers/light-plan.test.ts).
const BATCH_IDS = '(SELECT DISTINCT u.id FROM unnest($1::uuid[]) AS u(id)) b';
const storedLight = (id: string) => `(SELECT light FROM instance_lights WHERE instance_id = ${id} LIMIT 1)`;
/**
 * A batch of ids ($1) with the receive time (ms, $2, lined up; NULL or absent: none) of a newer
 * heartbeat each may have waiting in Redis, and each instance's row with that heartbeat taken as
 * if written (its deadline and late time as the flusher's write computes them), as the recording
 * statement judges it (lib/store/light-events.ts TRANSITION_SQL `base`).
 */
const BATCH_WAITING = '(SELECT DISTINCT u.id, u.waited_ms FROM unnest($1::uuid[], $2::float8[]) AS u(id, waited_ms)) b';
const waitingRow = (b: string) => `(SELECT x.id, x.retired_at, x.timeout_s, x.late_percent, x.maintenance_until,
    ${waitingDeadlineSql('x', 'w.at')} AS deadline, ${waitingLateAtSql('x', 'w.at')} AS late_at
    FROM instances x CROSS JOIN LATERAL (SELECT to_timestamp(${b}.waited_ms / 1000.0) AS at) w WHERE x.id = ${b}.id LIMIT 1)`;

/**
 * Locks those of these instances' rows that no other transaction holds, in the transaction of
 * `c`, and returns their ids; the others are skipped, never waited for (so no order is needed:
 * nothing here waits, nothing can deadlock). The expiry listener and the sweep judge many rows at
 * once and often the same ones at the same moment (100,000 instances silent together): each takes
 * what the other does not hold, instead of queueing behind the other's whole batch.
 */
export async function lockFreeInstances(c: PoolClient, instanceIds: string[]): Promise<string[]> {
  const r = await c.query<{ id: string }>(
    `SELECT i.id FROM ${BATCH_IDS} CROSS JOIN LATERAL (SELECT id FROM instances WHERE id = b.id LIMIT 1 FOR UPDATE SKIP LOCKED) i`,
    [instanceIds],
  );
  return r.rows.map((x) => x.id);
}

/**
 * The sweep's candidates (workers/light-sweep.ts): live instances whose stored colour may have
 * changed by the horizon (`horizonMs`, never after now) with no report: `recheck_at` passed (their
 * deadline, late time, warning or maintenance ended: lib/domain/traffic-light.ts recheckSql), or a
 * timeout rule or a deleted window asked for a new judgement (recheckNow). Earliest first, at most
 * `limit`, from the one partial index instance_lights_recheck. (Instances entering a window are
 * found from the window's side: lib/store/maintenance.ts instancesEnteringMaintenance.)
 */
export async function instancesDueForSweep(db: Db, limit: number, horizonMs: number): Promise<string[]> {
  const r = await db.query<{ id: string }>(
    `SELECT l.instance_id AS id FROM instance_lights l JOIN instances i ON i.id = l.instance_id
      WHERE l.recheck_at < LEAST(now(), to_timestamp($2::float8 / 1000)) AND i.retired_at IS NULL
      ORDER BY l.recheck_at LIMIT $1`,
    [limit, horizonMs],
  );
  return r.rows.map((x) => x.id);
}

/**
 * SQL: the instances that `idsQuery` (a SELECT of one uuid column) returns are judged again by the
 * next sweep: something other than the recording statement moved a time their colour depends on
 * (a timeout rule, the defaults, a deleted maintenance window). Never moves a recheck later.
 */
export function recheckNowSql(idsQuery: string): string {
  return `UPDATE instance_lights SET recheck_at = now() WHERE instance_id IN (${idsQuery}) AND (recheck_at IS NULL OR recheck_at > now())`;
}

/**
 * Of these instances, those whose stored colour is not red (the expiry listener's first look: an
 * instance already red, most often because the sweep judged it first, cannot change for silence,
 * so it is neither repaired nor judged again). A read without locks: a report that turns one
 * green meanwhile also sets its new heartbeat key, whose own expiry brings it back.
 */
export async function notRed(db: Db, instanceIds: string[]): Promise<string[]> {
  if (instanceIds.length === 0) return [];
  const r = await db.query<{ id: string }>(`SELECT b.id FROM ${BATCH_IDS} CROSS JOIN LATERAL ${storedLight('b.id')} l WHERE l.light <> 'red'`, [instanceIds]);
  return r.rows.map((x) => x.id);
}

/**
 * Of these instances, those stored green or yellow (the colours whose heartbeats may wait in Redis),
 * with when their silence first changes their colour by what Postgres holds (the first of their
 * deadline and late time, each started again at the end of a maintenance; ms): after a judgement,
 * the sweep's exact candidate time in Redis (workers/light-sweep.ts), where the stored recheck time
 * is later by Postgres's possible lag.
 */
export async function silenceTimes(db: Db, instanceIds: string[], waiting: WaitingHeartbeats = NO_WAITING): Promise<{ id: string; at: number }[]> {
  if (instanceIds.length === 0) return [];
  const r = await db.query<{ id: string; at: number | null }>(
    `SELECT i.id, (extract(epoch FROM ${silenceAtSql('i')}) * 1000)::float8 AS at
       FROM ${BATCH_WAITING} CROSS JOIN LATERAL ${storedLight('b.id')} l CROSS JOIN LATERAL ${waitingRow('b')} i
      WHERE l.light IN ('green', 'yellow') AND i.retired_at IS NULL`,
    [instanceIds, waitedParam(instanceIds, waiting)],
  );
  return r.rows.filter((x): x is { id: string; at: number } => x.at !== null);
}

/**
 * Of these instances, those whose stored colour is behind their deadline or late time by the wall
 * clock (silent but not red, or overdue but green or yellow), with when that time came (`due`, ms
 * since the epoch).
 */
export async function silentButLit(db: Db, instanceIds: string[], waiting: WaitingHeartbeats = NO_WAITING): Promise<{ id: string; due: number }[]> {
  const r = await db.query<{ id: string; due: number }>(
    `SELECT i.id, (extract(epoch FROM CASE WHEN ${silentSql('i')} THEN i.deadline ELSE i.late_at END) * 1000)::float8 AS due
         FROM ${BATCH_WAITING} CROSS JOIN LATERAL ${storedLight('b.id')} l CROSS JOIN LATERAL ${waitingRow('b')} i WHERE i.retired_at IS NULL
          AND ((l.light IN ('green', 'yellow', 'late') AND ${silentSql('i')}) OR (l.light IN ('green', 'yellow') AND ${overdueSql('i')}))`,
    [instanceIds, waitedParam(instanceIds, waiting)],
  );
  return r.rows;
}

// ---- the workers' writes: the ingest upsert (workers/apply-batch.ts) and the heartbeat flusher
// (workers/heartbeat-state.ts), both newest-wins on receive times, so a batch applied twice leaves
// what it left once --------------------------------------------------------------------------

/**
 * The lookup behind findInstanceIds: for each key, one probe of machines' unique live slug and one
 * of instances' unique live software, whatever the planner believes about the tables. Written as a
 * plain three-way join, it was planned from the statistics, and with those of a table that had
 * grown since its last analysis (a few hundred rows believed to be three) Postgres hashed every
 * live instance on its software name (every instance runs the same agent), joined each key to all
 * of them and then scanned the customer's machines for each pair: keys x instances x machines,
 * 25 s for 480 keys over 1,200 instances, while every customer's reports waited behind it. A
 * LATERAL subquery with LIMIT is never flattened into the join, so each key is looked up on its
 * own (the unique indexes make LIMIT 1 exact).
 */
export const FIND_INSTANCE_IDS_SQL = `SELECT k.customer_id, k.slug, k.software, m.id AS machine_id, i.id AS instance_id, i.timeout_s, i.late_percent
     FROM unnest($1::uuid[], $2::text[], $3::text[]) AS k(customer_id, slug, software)
     CROSS JOIN LATERAL (SELECT id FROM machines
                          WHERE customer_id = k.customer_id AND slug = k.slug AND retired_at IS NULL LIMIT 1) m
     CROSS JOIN LATERAL (SELECT id, timeout_s, late_percent FROM instances
                          WHERE machine_id = m.id AND software = k.software AND retired_at IS NULL LIMIT 1) i`;

/** Ids and rules (lib/store/timeout-rules.ts) of existing instances (not retired), by (customer id, machine slug, software): one read for many. */
export async function findInstanceIds(
  db: Db,
  customerIds: string[],
  machines: string[],
  software: string[],
): Promise<{ customer_id: string; slug: string; software: string; machine_id: string; instance_id: string; timeout_s: number | null; late_percent: number | null }[]> {
  const r = await db.query<{ customer_id: string; slug: string; software: string; machine_id: string; instance_id: string; timeout_s: number | null; late_percent: number | null }>(
    FIND_INSTANCE_IDS_SQL,
    [customerIds, machines, software],
  );
  return r.rows;
}

/**
 * SET clauses for fields that belong to one kind of report: take the incoming value when that
 * report is at least as new as the stored one. `keepOld`: a field the newest report leaves out
 * keeps its stored value (heartbeat fields); otherwise the newest report replaces all (status).
 * `src`: the alias of the incoming row. Shared by the ingest upsert and the flusher.
 */
function newest(timeCol: string, fields: string[], keepOld = true, src = 'EXCLUDED'): string {
  const newer = `${src}.${timeCol} IS NOT NULL AND (instances.${timeCol} IS NULL OR ${src}.${timeCol} >= instances.${timeCol})`;
  return fields
    .map((f) => `${f} = CASE WHEN ${newer} THEN ${keepOld ? `COALESCE(${src}.${f}, instances.${f})` : `${src}.${f}`} ELSE instances.${f} END`)
    .join(',\n        ');
}

const HEARTBEAT_FIELD_COLUMNS = ['agent_ts', 'version', 'uptime_seconds', 'pid', 'ip_addresses', 'group_name', 'location', 'group_priority', 'sort_priority'];

/**
 * SET clauses for the deadline and late time (lib/store/timeout-rules.ts) that follow the row's new
 * last heartbeat `hb` (an expression over the old row and the incoming one) and its rule.
 */
const DEADLINES = (hb: string) =>
  `deadline = ${deadlineSql(hb, 'instances.timeout_s')}, late_at = ${lateAtSql(hb, 'instances.timeout_s', 'instances.late_percent')}`;

/** Receive time of a row's last heartbeat in ms (exact: timestamptz keeps microseconds). */
const PG_MS = (col: string) => `round(extract(epoch FROM ${col}) * 1000)::float8`;

/**
 * The ingest upsert's input: one array per column, one element per instance, in lock order
 * (machine id, then software). Times in ms since the epoch; null: the batch says nothing of it.
 * Text already sanitised for Postgres (pgText, pgJson); `ipAddresses` and `snapshot` JSON text.
 */
export type InstanceUpsertColumns = [
  customerId: string[],
  machineId: string[],
  software: string[],
  firstSeenMs: number[],
  lastSeenMs: number[],
  heartbeatMs: (number | null)[],
  agentTsMs: (number | null)[],
  version: (string | null)[],
  uptimeSeconds: (number | null)[],
  pid: (number | null)[],
  ipAddresses: (string | null)[],
  group: (string | null)[],
  location: (string | null)[],
  groupPriority: (number | null)[],
  sortPriority: (number | null)[],
  status: (string | null)[],
  statusMessage: (string | null)[],
  statusMs: (number | null)[],
  snapshot: (string | null)[],
  lastWarningMs: (number | null)[],
  clockSkew: (boolean | null)[],
  machine: string[],
];

/** An instance the upsert wrote, and the receive time (ms) of the heartbeat it holds now. */
export interface UpsertedInstance {
  id: string;
  machine_id: string;
  software: string;
  pg_ms: number | null;
  /** The instance's rule (lib/store/timeout-rules.ts; null: the default). */
  timeout_s: number | null;
  late_percent: number | null;
  /** The upsert inserted the row (a new instance). */
  inserted: boolean;
}

/**
 * A report received before its instance was retired (or its machine: the instances go with it) and
 * applied after it: it brings nothing back (docs/operations.md "Decommissioning"). Over `t`, the
 * incoming rows; `last_ms` is the newest receive time of the instance's reports in the batch.
 */
const RETIRED_AFTER = `SELECT 1 FROM instances r WHERE r.customer_id = t.customer_id AND r.machine = t.machine AND r.software = t.software
                          AND r.retired_at IS NOT NULL AND r.retired_at >= to_timestamp(t.last_ms / 1000.0)`;

const UPSERT_SQL = `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, agent_ts,
                            version, uptime_seconds, pid, ip_addresses, group_name, location, group_priority, sort_priority,
                            status, status_message, status_at, snapshot, last_warning_at, clock_skew, machine, deadline, late_at)
     SELECT customer_id, machine_id, software, to_timestamp(first_ms / 1000.0), to_timestamp(last_ms / 1000.0),
            to_timestamp(hb_ms / 1000.0), to_timestamp(agent_ms / 1000.0),
            version, uptime_seconds, pid, (SELECT array_agg(x) FROM jsonb_array_elements_text(ips::jsonb) x),
            group_name, location, group_priority, sort_priority,
            status, status_message, to_timestamp(status_ms / 1000.0), snapshot::jsonb, to_timestamp(warn_ms / 1000.0), COALESCE(skew, false), machine,
            ${deadlineSql('to_timestamp(hb_ms / 1000.0)', 'NULL::int')}, ${lateAtSql('to_timestamp(hb_ms / 1000.0)', 'NULL::int', 'NULL::int')}
       FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::float8[], $5::float8[], $6::float8[], $7::float8[],
                   $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::text[], $13::text[], $14::bigint[], $15::bigint[],
                   $16::text[], $17::text[], $18::float8[], $19::text[], $20::float8[], $21::bool[], $22::text[]) WITH ORDINALITY
            AS t(customer_id, machine_id, software, first_ms, last_ms, hb_ms, agent_ms, version, uptime_seconds, pid, ips,
                 group_name, location, group_priority, sort_priority, status, status_message, status_ms, snapshot, warn_ms, skew, machine, n)
      WHERE NOT EXISTS (${RETIRED_AFTER})
      ORDER BY n
     ON CONFLICT (machine_id, software) WHERE retired_at IS NULL DO UPDATE SET
        first_seen_at = LEAST(instances.first_seen_at, EXCLUDED.first_seen_at),
        last_seen_at = GREATEST(instances.last_seen_at, EXCLUDED.last_seen_at),
        last_heartbeat_at = GREATEST(instances.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
        ${newest('last_heartbeat_at', HEARTBEAT_FIELD_COLUMNS)},
        ${newest('last_heartbeat_at', ['clock_skew'], false)},
        status_at = GREATEST(instances.status_at, EXCLUDED.status_at),
        ${newest('status_at', ['status', 'status_message', 'snapshot'], false)},
        last_warning_at = GREATEST(instances.last_warning_at, EXCLUDED.last_warning_at),
        ${DEADLINES('GREATEST(instances.last_heartbeat_at, EXCLUDED.last_heartbeat_at)')}
     RETURNING id, machine_id, software, ${PG_MS('instances.last_heartbeat_at')} AS pg_ms, timeout_s, late_percent, (xmax = 0) AS inserted`;

/**
 * The ingest upsert, in the transaction of `c` (race-safe: concurrent first reports of an instance
 * make one row). Times only move forward; heartbeat fields and the latest status come from the
 * newest report only, a heartbeat's fields it leaves out keep their stored values. A retired row is
 * never written: a report after the retirement makes a new row (a new id and first seen); one
 * received before it is left out (RETIRED_AFTER), so an instance absent from the answer was not written.
 */
export async function upsertInstances(c: PoolClient, columns: InstanceUpsertColumns): Promise<UpsertedInstance[]> {
  const r = await c.query<UpsertedInstance>(UPSERT_SQL, columns);
  // A new row's rule is set by its insert trigger, after RETURNING: read it (new instances are few).
  const fresh = r.rows.filter((x) => x.inserted).map((x) => x.id);
  const rules = new Map<string, { timeout_s: number | null; late_percent: number | null }>();
  if (fresh.length) {
    const q = await c.query<{ id: string; timeout_s: number | null; late_percent: number | null }>(
      'SELECT id, timeout_s, late_percent FROM instances WHERE id = ANY($1::uuid[])',
      [fresh],
    );
    for (const x of q.rows) rules.set(x.id, x);
  }
  return r.rows.map((x) => ({ ...x, ...rules.get(x.id) }));
}

const FLUSH_SQL = `UPDATE instances SET
            last_seen_at = GREATEST(instances.last_seen_at, d.last_heartbeat_at),
            last_heartbeat_at = GREATEST(instances.last_heartbeat_at, d.last_heartbeat_at),
            ${newest('last_heartbeat_at', HEARTBEAT_FIELD_COLUMNS, true, 'd')},
            ${newest('last_heartbeat_at', ['clock_skew'], false, 'd')},
            ${DEADLINES('GREATEST(instances.last_heartbeat_at, d.last_heartbeat_at)')}
           FROM (SELECT id, to_timestamp(hb_ms / 1000.0) AS last_heartbeat_at, to_timestamp(agent_ms / 1000.0) AS agent_ts,
                        version, uptime_seconds, pid, (SELECT array_agg(x) FROM jsonb_array_elements_text(ips::jsonb) x) AS ip_addresses,
                        group_name, location, group_priority, sort_priority, skew AS clock_skew
                   FROM unnest($1::uuid[], $2::float8[], $3::float8[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::text[],
                               $9::text[], $10::bigint[], $11::bigint[], $12::bool[])
                        AS t(id, hb_ms, agent_ms, version, uptime_seconds, pid, ips, group_name, location, group_priority, sort_priority, skew)) d
          WHERE instances.id = d.id AND instances.retired_at IS NULL
          RETURNING instances.id, ${PG_MS('instances.last_heartbeat_at')} AS pg_ms`;

/**
 * The flusher's write, in the transaction of `c`: the heartbeat `fields[k]` for instance
 * `instanceIds[k]`, with the ingest upsert's newest-wins rules. Returns each instance written and
 * the receive time (ms) of the heartbeat it holds now; an instance Postgres no longer has, or retired, is absent.
 */
export async function writeHeartbeats(c: PoolClient, instanceIds: string[], fields: HeartbeatFields[]): Promise<{ id: string; pg_ms: number }[]> {
  const f = fields;
  const r = await c.query<{ id: string; pg_ms: number }>(FLUSH_SQL, [
    instanceIds,
    f.map((x) => x.at),
    f.map((x) => x.agentTs),
    f.map((x) => x.version),
    f.map((x) => x.uptime),
    f.map((x) => x.pid),
    f.map((x) => x.ips),
    f.map((x) => x.group),
    f.map((x) => x.location),
    f.map((x) => x.groupPriority),
    f.map((x) => x.sortPriority),
    f.map((x) => x.skew),
  ]);
  return r.rows;
}
