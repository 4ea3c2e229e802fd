// Changes of an instance's traffic-light colour, as the workers record and deliver them
// (docs/architecture.md "Traffic light"; when and by whom: workers/traffic-light.ts). This module
// owns the Postgres tables `instance_lights` and `light_outbox`, the statement that records a
// change, the workers' inserts into the ClickHouse table `light_events` (the api reads it through
// lib/store/history.ts) and the advisory lock of the sweep (workers/light-sweep.ts):
//   recording    one statement recomputes the colour of some instances with the rule of
//                lib/domain/traffic-light.ts, updates their rows of `instance_lights` (light,
//                light_since, light_reason, light_seq, light_judged_at) where the stored colour is
//                still the one it saw, and writes each change into `light_outbox`, in the caller's
//                transaction; the reason is kept current without a change of colour too (red for
//                status error, then for silence), since the api shows the stored row; it also stores when the colour may next change with no report
//                (recheck_at: the sweep's candidates), and keeps in `instances` their maintenance
//                end and the deadline and late time started again there (maintenance_until,
//                deadline, late_at), changed or not. The stored colour has a narrow table of its
//                own so that recording a change rewrites a short row and two index entries, not
//                the wide `instances` row and its 19 (bench/README.md "What one change of colour
//                costs");
//   the outbox   changes recorded and not delivered yet, one row per recording statement and
//                customer (the changes' fields as arrays; `light_outbox_changes` shows one row per
//                change): read oldest first, locked, and deleted once delivered;
//   light_events every change, keyed by instance and seq (a copy delivered twice collapses).
import { randomUUID } from 'node:crypto';
import { ISO_TIMES, type Pool, type PoolClient } from '../infra/postgres.js';
import { chTime, insertTsv, tsvRow, type ClickHouseClient } from '../infra/clickhouse.js';
import { lightSql, lightReasonSql, lightAtSql, recheckSql, lightEventId, deadlineSql, lateAtSql, waitingDeadlineSql, waitingLateAtSql, waitedParam, NO_WAITING, type LightCause, type LightColour, type LightEvent, type WaitingHeartbeats } from '../domain/traffic-light.js';
import { maintenanceFromSql, maintenanceUntilSql } from './maintenance.js';

type Db = Pool | PoolClient;

/** A change, as the recording statement returns it and the drain reads it from `light_outbox`. */
interface OutboxRow {
  instance_id: string;
  seq: number;
  customer_id: string;
  customer: string;
  machine_id: string;
  machine: string;
  software: string;
  from_light: LightColour;
  to_light: LightColour;
  reason: string;
  cause: LightCause;
  /** A Date, or already its ISO text where the query read times with ISO_TIMES. */
  at: Date | string;
  recorded_at: Date | string;
}

/**
 * An outbox row: the changes of one customer from one recording statement. Delivered together or
 * not at all; a delivery deletes exactly the rows it names (deleteFromOutbox).
 */
export interface OutboxKey {
  recording: string;
  customer_id: string;
}

/** Changes recorded, and the outbox rows that hold them until they are delivered. */
export interface RecordedChanges {
  events: LightEvent[];
  outbox: OutboxKey[];
}

/** Nothing recorded (shared: frozen, so that nobody adds to it). */
export const NO_CHANGES: RecordedChanges = Object.freeze({ events: Object.freeze([]), outbox: Object.freeze([]) }) as unknown as RecordedChanges;

/** The outbox rows of `events`, recorded together by the statement `recording`: one per customer. */
function keysOf(recording: string, events: readonly LightEvent[]): OutboxKey[] {
  const customers = new Set<string>();
  for (const e of events) customers.add(e.customer_id);
  return [...customers].map((customer_id) => ({ recording, customer_id }));
}

function toEvent(r: OutboxRow): LightEvent {
  return {
    id: lightEventId(r.instance_id, Number(r.seq)),
    seq: Number(r.seq),
    customer_id: r.customer_id,
    customer: r.customer,
    instance_id: r.instance_id,
    machine_id: r.machine_id,
    machine: r.machine,
    software: r.software,
    from: r.from_light,
    to: r.to_light,
    reason: r.reason,
    cause: r.cause,
    at: typeof r.at === 'string' ? r.at : r.at.toISOString(),
    recorded_at: typeof r.recorded_at === 'string' ? r.recorded_at : r.recorded_at.toISOString(),
  };
}

/**
 * The time the SQL judges silence at: the horizon ($4, ms since the epoch), but never before the
 * time the stored colour was judged at. A report applied again (a batch retried, or redelivered
 * after a crash) is still in the stream, so the horizon goes back to its receive time; judged
 * there, an instance the sweep already found silent would look alive and flip back to green (and
 * red again at the next sweep: a change that never happened). Judgement time only moves forward.
 */
const H = (alias: string) =>
  `GREATEST(LEAST(now(), to_timestamp($4::float8 / 1000)), COALESCE(${alias}.light_judged_at, '-infinity'::timestamptz))`;

// base: the rows as stored, with the receive time of a newer heartbeat still waiting in Redis
// ($7, lined up with $1; NULL or absent: none) taken as if written: the last heartbeat, last seen,
// deadline and late time it gives (as the flusher's write computes them: lib/store/instances.ts
// FLUSH_SQL). The expiry listener and the sweep pass those times (workers/heartbeat-state.ts
// HeartbeatState.waiting), so silence is judged from the newest heartbeat without writing 100,000
// heartbeats at the moment a fleet falls silent; the flusher writes them when they come due, and a
// judgement then finds the same times (bench/README.md "Judged from Redis's times"). The `stored_`
// deadline and late time include it, so `times` below never writes them for it; mwc: the batch's customers with an occurrence ending after its
// earliest judgement time, the only ones whose instances can be in a window (the chain below is a
// recursive query per instance: run for every one, it was a tenth of the statement's time when
// 100,000 instances without a window fell silent; bench/README.md "The maintenance chain only
// where a window can apply"); mw: the end of the latest maintenance, in progress at the judgement
// time (from the occurrences: lib/store/maintenance.ts) or past (as stored); cur: once it is past,
// the deadline and late time started again at that end (not before: a window deleted early ends
// sooner), and for a row entering maintenance when that began (its window's start: the change's
// time); judged: the colour; next: its recheck time; chg: rows whose colour, reason, times or recheck time
// change; upd: their `instance_lights` rows; times: their `instances` times, where those changed
// (a maintenance that ended; rare); rec: the recording's time (one for all its changes); ob: the
// changes into the outbox, one row per customer of the recording ($6), each field an array
// (the aggregates of one group read its rows in one order, so the arrays line up).
// The ids come in as a set to join (unnest), not as `id = ANY($1)`: the statement is named, and
// after five runs Postgres may keep a generic plan, where the array is a parameter, not a
// constant, so ANY is not hashed but compared element by element for every row it scans: a batch
// of 5,000 took 7-8 s instead of 0.35 s, from the sixth batch on, when 100,000 instances fell
// silent together. Each id is one probe of each table's primary key in every plan: a LATERAL
// subquery with LIMIT is never flattened into the join (joined plainly, instances and
// instance_lights were both scanned and hashed for a batch of 5,000 of 40,000:
// test/servers/light-plan.test.ts).
// Every step is MATERIALIZED: inlined, each reference to a column of mw or cur copied its whole
// expression (the recursive subquery and its InitPlans) into every CASE of the colour, its reason
// and its time, and planning alone took up to a second per report, under the instance's row lock,
// so concurrent reports of one instance queued behind it (the concurrency stack test).
export const TRANSITION_SQL = `
  WITH base AS MATERIALIZED (
    SELECT i.id, i.customer_id, c.slug AS customer, i.machine_id, i.machine, i.software, l.light, l.light_since, l.light_reason AS stored_reason, l.recheck_at AS stored_recheck,
           GREATEST(i.last_heartbeat_at, w.at) AS last_heartbeat_at, i.last_warning_at, GREATEST(i.last_seen_at, w.at) AS last_seen_at, i.status, i.status_at, i.timeout_s, i.late_percent,
           ${waitingDeadlineSql('i', 'w.at')} AS stored_deadline,
           ${waitingLateAtSql('i', 'w.at')} AS stored_late_at,
           i.maintenance_until AS stored_mu, ${H('l')} AS judged_at
      FROM unnest($1::uuid[], $7::float8[]) AS k(id, waited_ms)
      CROSS JOIN LATERAL (SELECT to_timestamp(k.waited_ms / 1000.0) AS at) w
      CROSS JOIN LATERAL (SELECT * FROM instances x WHERE x.id = k.id AND x.retired_at IS NULL LIMIT 1) i
      CROSS JOIN LATERAL (SELECT * FROM instance_lights y WHERE y.instance_id = k.id LIMIT 1) l
      JOIN customers c ON c.id = i.customer_id
  ), mwc AS MATERIALIZED (
    SELECT c.customer_id FROM (SELECT DISTINCT customer_id FROM base) c
     WHERE EXISTS (SELECT 1 FROM maintenance_occurrences o WHERE o.customer_id = c.customer_id AND o.ends_at > (SELECT min(judged_at) FROM base))
  ), mw AS MATERIALIZED (
    SELECT b.*, CASE WHEN b.customer_id IN (SELECT customer_id FROM mwc) THEN GREATEST(b.stored_mu, ${maintenanceUntilSql('b', 'b.judged_at')}) ELSE b.stored_mu END AS maintenance_until
      FROM base b
  ), cur AS MATERIALIZED (
    SELECT w.*,
           CASE WHEN w.maintenance_until <= w.judged_at THEN GREATEST(w.stored_deadline, ${deadlineSql('w.maintenance_until', 'w.timeout_s')})
                ELSE w.stored_deadline END AS deadline,
           CASE WHEN w.maintenance_until <= w.judged_at THEN GREATEST(w.stored_late_at, ${lateAtSql('w.maintenance_until', 'w.timeout_s', 'w.late_percent')})
                ELSE w.stored_late_at END AS late_at,
           CASE WHEN w.maintenance_until > w.judged_at AND w.light <> 'maintenance' THEN ${maintenanceFromSql('w', 'w.judged_at')} END AS maintenance_from
      FROM mw w
  ), judged AS MATERIALIZED (
    SELECT cur.*, cur.light AS old_light, ${lightSql('cur', '$2::float8', 'cur.judged_at')} AS new_light,
           ${lightReasonSql('cur', '$2::float8', 'cur.judged_at')} AS reason
      FROM cur
  ), next AS MATERIALIZED (
    SELECT j.*, j.new_light <> j.old_light AS changed, ${recheckSql('j', 'j.new_light', '$2::float8', '$5::float8')} AS recheck,
           j.maintenance_until IS DISTINCT FROM j.stored_mu OR j.deadline IS DISTINCT FROM j.stored_deadline
             OR j.late_at IS DISTINCT FROM j.stored_late_at AS times_changed
      FROM judged j
  ), chg AS (
    SELECT n.*, ${lightAtSql('n', 'n.new_light', '$2::float8', 'n.judged_at', 'COALESCE(n.maintenance_from, n.judged_at)')} AS at
      FROM next n
     WHERE n.changed OR n.times_changed OR n.recheck IS DISTINCT FROM n.stored_recheck OR n.reason IS DISTINCT FROM n.stored_reason
  ), upd AS (
    UPDATE instance_lights l
       SET light = chg.new_light,
           light_since = CASE WHEN chg.changed THEN chg.at ELSE l.light_since END,
           light_reason = chg.reason,
           light_seq = l.light_seq + CASE WHEN chg.changed THEN 1 ELSE 0 END,
           light_judged_at = CASE WHEN chg.changed THEN chg.judged_at ELSE l.light_judged_at END,
           recheck_at = chg.recheck
      FROM chg
     WHERE l.instance_id = chg.id AND l.light = chg.old_light
    RETURNING chg.changed, chg.times_changed, l.instance_id, l.light_seq AS seq, chg.customer_id, chg.customer, chg.machine_id, chg.machine, chg.software,
              chg.old_light AS from_light, chg.new_light AS to_light, chg.reason, chg.at, chg.maintenance_until, chg.deadline, chg.late_at
  ), times AS (
    UPDATE instances i SET maintenance_until = upd.maintenance_until, deadline = upd.deadline, late_at = upd.late_at
      FROM upd
     WHERE i.id = upd.instance_id AND upd.times_changed
  ), rec AS MATERIALIZED (
    SELECT clock_timestamp() AS recorded_at
  ), ob AS (
    INSERT INTO light_outbox (recording, customer_id, customer, cause, recorded_at, instance_ids, seqs, machine_ids, machines, softwares, from_lights, to_lights, reasons, ats)
    SELECT $6::uuid, customer_id, min(customer), $3::text, (SELECT recorded_at FROM rec), array_agg(instance_id), array_agg(seq), array_agg(machine_id),
           array_agg(machine), array_agg(software), array_agg(from_light), array_agg(to_light), array_agg(reason), array_agg(at)
      FROM upd WHERE changed GROUP BY customer_id
  )
  SELECT instance_id, seq, customer_id, customer, machine_id, machine, software, from_light, to_light, reason, $3::text AS cause, at,
         (SELECT recorded_at FROM rec) AS recorded_at
    FROM upd WHERE changed`;

/**
 * How the recording statement is planned: the batch's instances read by probes of the primary key,
 * whatever the size of the fleet. With the default random_page_cost (4, a spinning disk's)
 * Postgres read a batch of 5,000 by scanning and hashing the whole `instances` table (spilling to
 * disk at 100,000), so a change cost more the larger the fleet: 90 µs per change at 100,000
 * instances, 64 µs planned with 1.1 (the statement alone; bench/light-change-cost.ts,
 * bench/README.md "What one change of colour costs"). And its UPDATE of the batch's
 * `instance_lights` rows joins them by probes too: with a merge join Postgres read the table's
 * whole primary-key index for every batch (99,976 rows for a batch of 5,000 of 100,000: 45 of the
 * batch's 141 ms), since it believed few rows change; so merge and hash joins are off for it (every
 * join of the statement is a probe of a primary key or of a small table). Set for the expiry
 * listener's and the sweep's statement only (SET LOCAL, then back to the default), so no other
 * plan changes.
 */
export const TRANSITION_PLANNING = {
  set: 'SET LOCAL random_page_cost = 1.1; SET LOCAL enable_mergejoin = off; SET LOCAL enable_hashjoin = off',
  reset: 'SET LOCAL random_page_cost TO DEFAULT; SET LOCAL enable_mergejoin TO DEFAULT; SET LOCAL enable_hashjoin TO DEFAULT',
} as const;

/**
 * Recomputes the colour of `instanceIds`, judging silence and warnings at `horizonMs` (never before
 * a row's last judgement), and records every change: the instance's light columns, only where the
 * stored colour is still the one the statement saw (of several workers racing on one change,
 * exactly one records it), and its outbox row. In the transaction of `c`; the rows' locks are the
 * caller's business (lockInstances, lib/store/instances.ts). A retired instance never changes
 * colour again (no event, no webhook): a retirement committed first leaves it out, whichever path
 * (report, expiry, sweep) asks.
 */
export async function recordLightChanges(
  c: PoolClient,
  instanceIds: string[],
  cause: LightCause,
  warningWindowS: number,
  horizonMs: number,
  /** How far Postgres's last heartbeat may lag the newest (s): lib/domain/traffic-light.ts recheckSql. */
  recheckSlackS = 0,
  /**
   * Instance id -> receive time (ms) of its newest heartbeat, still waiting in Redis for the
   * flusher (workers/heartbeat-state.ts HeartbeatState.waiting): judged as if Postgres held it.
   */
  waiting: WaitingHeartbeats = NO_WAITING,
): Promise<RecordedChanges> {
  // Named: each connection parses it once, and Postgres may keep a generic plan (planning it is a
  // good part of its cost for one instance; see TRANSITION_SQL). The expiry listener and the sweep
  // record silence over batches of thousands: planned, every time, with the setting of
  // TRANSITION_PLANNING (under a name of their own, so that no plan kept for one is used for the
  // other), and the transaction's own setting put back after it (a failed statement ends the
  // transaction, and the setting with it). A report's batch, inside the ingest transaction, is
  // planned as before.
  const recording = randomUUID();
  const values = [instanceIds, warningWindowS, cause, horizonMs, recheckSlackS, recording, waitedParam(instanceIds, waiting)];
  // The times as ISO text straight from Postgres's (ISO_TIMES), as the events carry them.
  let rows: OutboxRow[];
  if (cause === 'report') rows = (await c.query<OutboxRow>({ name: 'light-transition', text: TRANSITION_SQL, values, types: ISO_TIMES })).rows;
  else {
    await c.query(TRANSITION_PLANNING.set);
    rows = (await c.query<OutboxRow>({ name: 'light-transition-silence', text: TRANSITION_SQL, values, types: ISO_TIMES })).rows;
    await c.query(TRANSITION_PLANNING.reset);
  }
  if (rows.length === 0) return NO_CHANGES;
  const events = rows.map(toEvent);
  return { events, outbox: keysOf(recording, events) };
}

/** The changes of outbox rows, one per change, in the order of their arrays (the view light_outbox_changes, from the table). */
const OUTBOX_CHANGES = `o.recording, o.customer_id, o.customer, o.cause, o.recorded_at, e.instance_id, e.seq, e.machine_id, e.machine, e.software,
         e.from_light, e.to_light, e.reason, e.at
    FROM light_outbox o
   CROSS JOIN LATERAL unnest(o.instance_ids, o.seqs, o.machine_ids, o.machines, o.softwares, o.from_lights, o.to_lights, o.reasons, o.ats)
         AS e(instance_id, seq, machine_id, machine, software, from_light, to_light, reason, at)`;

/**
 * The changes of the outbox rows recorded more than `olderThanMs` ago, oldest rows first, locked in
 * the transaction of `c` (rows another transaction holds are skipped): whole rows of at most
 * `limit` changes together, but always the oldest row, however many it holds. `more`: rows were
 * left for the next call.
 */
export async function lockOutboxOlderThan(c: PoolClient, olderThanMs: number, limit: number): Promise<RecordedChanges & { more: boolean }> {
  // The keys and sizes first, locked: each row holds at least one change, so `limit` rows are
  // enough to fill `limit` changes.
  const due = await c.query<{ recording: string; customer_id: string; n: number }>(
    `SELECT recording, customer_id, cardinality(instance_ids) AS n FROM light_outbox
      WHERE recorded_at < now() - make_interval(secs => $1::float8)
      ORDER BY recorded_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
    [olderThanMs / 1000, limit],
  );
  const outbox: OutboxKey[] = [];
  let changes = 0;
  for (const r of due.rows) {
    if (outbox.length > 0 && changes + r.n > limit) break;
    outbox.push({ recording: r.recording, customer_id: r.customer_id });
    changes += r.n;
  }
  if (outbox.length === 0) return { events: [], outbox, more: false };
  const rows = await c.query<OutboxRow>({
    text: `SELECT ${OUTBOX_CHANGES}
      WHERE (o.recording, o.customer_id) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))
      ORDER BY o.recorded_at`,
    values: [outbox.map((k) => k.recording), outbox.map((k) => k.customer_id)],
    types: ISO_TIMES,
  });
  return { events: rows.rows.map(toEvent), outbox, more: outbox.length < due.rows.length || due.rows.length === limit };
}

/**
 * Outbox rows recorded more than `olderThanS` ago (`rows`; `changes`: the changes they hold): the
 * sweep delivers a row within seconds, so any here means deliveries fail (ClickHouse away, a bug).
 * They are never deleted for their age (an undelivered change would be lost); the retention job
 * reports them (workers/retention.ts).
 */
export async function stuckOutbox(db: Db, olderThanS: number): Promise<{ rows: number; changes: number; oldest: Date | null }> {
  const r = await db.query<{ rows: number; changes: number; oldest: Date | null }>(
    `SELECT count(*)::int AS rows, COALESCE(sum(cardinality(instance_ids)), 0)::int AS changes, min(recorded_at) AS oldest
       FROM light_outbox WHERE recorded_at < now() - make_interval(secs => $1::float8)`,
    [olderThanS],
  );
  return r.rows[0]!;
}

/** Delivered: these rows leave the outbox (each a whole recording's changes of one customer). */
export async function deleteFromOutbox(db: Db, outbox: readonly OutboxKey[]): Promise<void> {
  if (outbox.length === 0) return;
  await db.query(`DELETE FROM light_outbox o USING unnest($1::uuid[], $2::uuid[]) AS d(r, c) WHERE o.recording = d.r AND o.customer_id = d.c`, [
    outbox.map((k) => k.recording),
    outbox.map((k) => k.customer_id),
  ]);
}

/** Column order of the rows insertLightEvents writes (TabSeparated, as the report tables: lib/infra/clickhouse.ts tsvRow). */
const LIGHT_EVENT_COLS = ['at', 'at_ms', 'recorded_ms', 'customer_id', 'customer', 'machine_id', 'machine', 'software', 'instance_id', 'seq', 'from_light', 'to_light', 'reason', 'cause'] as const;

/**
 * Changes into the history of colours (a copy of a row already there collapses into it). As
 * TabSeparated text, not JSONEachRow: an object and its JSON per change were a tenth of a worker's
 * CPU while 100,000 instances turned red (bench/README.md "The light's delivery").
 */
export async function insertLightEvents(ch: ClickHouseClient, events: readonly LightEvent[]): Promise<void> {
  const rows = events.map((e) => {
    const at = Date.parse(e.at);
    return tsvRow([chTime(at), at, Date.parse(e.recorded_at), e.customer_id, e.customer, e.machine_id, e.machine, e.software, e.instance_id, e.seq, e.from, e.to, e.reason, e.cause]);
  });
  await insertTsv(ch, 'light_events', LIGHT_EVENT_COLS, rows);
}

const SWEEP_LOCK = 7_401_134; // advisory lock key: "traffic-light sweep" (per database)

/** The sweep's session lock on the connection `c`: true when taken, false while another session holds it. */
export async function tryLightSweepLock(c: PoolClient): Promise<boolean> {
  const got = await c.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [SWEEP_LOCK]);
  return got.rows[0]!.ok;
}

/** Releases the sweep's lock taken on `c` by tryLightSweepLock. */
export async function releaseLightSweepLock(c: PoolClient): Promise<void> {
  await c.query('SELECT pg_advisory_unlock($1)', [SWEEP_LOCK]);
}
