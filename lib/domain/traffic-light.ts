// The traffic light (docs/decisions.md "Traffic light"), derived from what Postgres holds about an
// instance: the last heartbeat's receive time and the deadline and late time computed from it
// (`deadline`, `late_at`: lib/store/timeout-rules.ts, per instance), the latest status, the last
// unsuppressed warning. The workers judge it with this SQL whenever it may change (a report, a
// heartbeat key's expiry, the sweep at each stored recheck time: workers/traffic-light.ts),
// after writing any newer heartbeat Redis holds, and store it (`instance_lights`); the api shows
// what is stored, so the list, its counts, the events and the webhooks always agree.
//
//   grey    never sent a heartbeat, or latest status `stopped`
//   maintenance  in a maintenance window (`maintenance_until` after now: lib/store/maintenance.ts);
//           when it ends, the deadline and late time start again from its end
//   red     no heartbeat since its deadline (last heartbeat + the instance's timeout), or latest status `error`
//   late    no heartbeat since its late time (a share of the timeout; only where a rule or
//           HEARTBEAT_LATE_PERCENT asks for it)
//   yellow  latest status `degraded`, or an unsuppressed warning/error within WARNING_WINDOW_S
//   green   otherwise

/** SQL: HEARTBEAT_TIMEOUT_S and HEARTBEAT_LATE_PERCENT as the workers applied them (one row; an InitPlan, read once per statement). */
const DEFAULT_TIMEOUT = '(SELECT ld.timeout_s FROM light_defaults ld WHERE ld.id = 1)';
const DEFAULT_LATE = '(SELECT ld.late_percent FROM light_defaults ld WHERE ld.id = 1)';

/**
 * SQL: the deadline that follows a last heartbeat `hb` under a rule's timeout `timeout` (an
 * expression, NULL: the default). The same as the SQL function light_deadline (0019-timeout-rules),
 * which the insert trigger uses; here without a function call per row (the ingest upsert).
 */
export function deadlineSql(hb: string, timeout: string): string {
  return `${hb} + make_interval(secs => COALESCE(${timeout}, ${DEFAULT_TIMEOUT}))`;
}

/** SQL: the late time that follows `hb` (NULL: never late), like light_late_at. */
export function lateAtSql(hb: string, timeout: string, latePercent: string): string {
  return `CASE WHEN COALESCE(${latePercent}, ${DEFAULT_LATE}) > 0
    THEN ${hb} + make_interval(secs => COALESCE(${timeout}, ${DEFAULT_TIMEOUT}) * COALESCE(${latePercent}, ${DEFAULT_LATE}) / 100.0) END`;
}

/**
 * A heartbeat that waits in Redis for the flusher (workers/heartbeat-state.ts HeartbeatState.waiting),
 * taken as if written when silence is judged: instance id -> its receive time (ms).
 */
export type WaitingHeartbeats = ReadonlyMap<string, number>;
export const NO_WAITING: WaitingHeartbeats = new Map();

/** The statements' parameter for `waiting`: receive times lined up with `ids` (null: none); empty when none waits. */
export function waitedParam(ids: readonly string[], waiting: WaitingHeartbeats): (number | null)[] {
  return waiting.size > 0 ? ids.map((id) => waiting.get(id) ?? null) : [];
}

/**
 * SQL: row `i`'s deadline and late time with a waiting heartbeat received at `at` (a timestamptz
 * expression, NULL: none) taken as if written, as the flusher's write computes them (never earlier
 * than the stored ones).
 */
export function waitingDeadlineSql(alias: string, at: string): string {
  return `GREATEST(${alias}.deadline, ${deadlineSql(at, `${alias}.timeout_s`)})`;
}
export function waitingLateAtSql(alias: string, at: string): string {
  return `GREATEST(${alias}.late_at, ${lateAtSql(at, `${alias}.timeout_s`, `${alias}.late_percent`)})`;
}

/**
 * SQL: row `i` has sent no heartbeat since its deadline at `now`, the red rule's silence; a row
 * that never sent one is not silent (grey). The deadline starts again at the end of its latest
 * maintenance (`maintenance_until`), whether or not a worker recorded that yet. Every query that
 * asks "silent?" (the colour, its reason and time here, the workers' sweep and expiry in
 * lib/store/instances.ts) uses this one.
 */
export function silentSql(alias: string, now = 'now()'): string {
  const i = alias;
  return `GREATEST(${i}.deadline, ${deadlineSql(`${i}.maintenance_until`, `${i}.timeout_s`)}) < ${now}`;
}

/** SQL: row `i` is past its late time at `now` (false where it has none), started again like the deadline. */
export function overdueSql(alias: string, now = 'now()'): string {
  const i = alias;
  return `GREATEST(${i}.late_at, ${lateAtSql(`${i}.maintenance_until`, `${i}.timeout_s`, `${i}.late_percent`)}) < ${now}`;
}

/** SQL: row `i` is in a maintenance window at `now`. */
export function inMaintenanceSql(alias: string, now = 'now()'): string {
  return `${alias}.maintenance_until > ${now}`;
}

/**
 * SQL for the colour of `instances` row alias `i`; $window is an interval parameter in seconds.
 * `now`: the time to judge silence and warnings at; the workers pass their horizon (the receive
 * time up to which every report has been applied: workers/traffic-light.ts), so that a backlog in
 * the queue is never taken for silence.
 */
export function lightSql(alias: string, windowParam: string, now = 'now()'): string {
  const i = alias;
  return `CASE
    WHEN ${i}.last_heartbeat_at IS NULL OR ${i}.status = 'stopped' THEN 'grey'
    WHEN ${inMaintenanceSql(i, now)} THEN 'maintenance'
    WHEN ${silentSql(i, now)} OR ${i}.status = 'error' THEN 'red'
    WHEN ${overdueSql(i, now)} THEN 'late'
    WHEN ${i}.status = 'degraded' OR ${i}.last_warning_at > ${now} - make_interval(secs => ${windowParam}) THEN 'yellow'
    ELSE 'green' END`;
}

/** SQL: when row `i`'s silence first changes its colour: the first of its deadline and late time, each started again at the end of its maintenance. */
export function silenceAtSql(alias: string): string {
  const i = alias;
  const deadline = `GREATEST(${i}.deadline, ${deadlineSql(`${i}.maintenance_until`, `${i}.timeout_s`)})`;
  const lateAt = `GREATEST(${i}.late_at, ${lateAtSql(`${i}.maintenance_until`, `${i}.timeout_s`, `${i}.late_percent`)})`;
  return `LEAST(${deadline}, ${lateAt})`;
}

/**
 * SQL: when colour `newLight` (an expression) of row `i`, judged at some time t, may next change
 * with no report: the first of the times whose passing changes it (its deadline, late time, the end
 * of its warning, of its maintenance), each after t because the colour says it has not passed
 * yet; NULL where only a report, a timeout rule or a maintenance window changes it (grey, red).
 * The recording statement stores it (`instance_lights.recheck_at`), and the sweep takes its
 * candidates from it (lib/store/instances.ts instancesDueForSweep). It must follow lightSql: a
 * time too late here is a change the sweep finds late; one too early only costs a judgement.
 *
 * `slackParam` (seconds, an expression): how far Postgres's last heartbeat may lag the newest one
 * while the instance's heartbeats wait in Redis (workers/heartbeat-state.ts), added to the times
 * a heartbeat moves (deadline, late time) while green or yellow, the colours whose heartbeats may
 * wait: an instance that is alive is written by the flusher, and judged again, before its time
 * plus the slack, so the sweep does not take every live instance for a candidate at its stale
 * Postgres deadline. Its silence is found on time by the heartbeat keys' expiry and the sweep's
 * second source, Redis's silence times (workers/light-sweep.ts); this time is the backstop for a
 * Redis that lost them. Late is never slackened: no heartbeat waits while an instance is late.
 */
export function recheckSql(alias: string, newLight: string, windowParam: string, slackParam = '0'): string {
  const i = alias;
  const deadline = `GREATEST(${i}.deadline, ${deadlineSql(`${i}.maintenance_until`, `${i}.timeout_s`)})`;
  const slack = `make_interval(secs => ${slackParam})`;
  return `CASE ${newLight}
    WHEN 'green' THEN ${silenceAtSql(i)} + ${slack}
    WHEN 'yellow' THEN LEAST(${silenceAtSql(i)} + ${slack},
      CASE WHEN ${i}.status IS DISTINCT FROM 'degraded' THEN ${i}.last_warning_at + make_interval(secs => ${windowParam}) END)
    WHEN 'late' THEN ${deadline}
    WHEN 'maintenance' THEN ${i}.maintenance_until
    END`;
}

/** SQL: the instance's timeout in whole seconds (its rule's, else the default). */
const timeoutOf = (i: string) => `COALESCE(${i}.timeout_s, ${DEFAULT_TIMEOUT})`;
/** SQL: its late time's offset in whole seconds. */
const lateOf = (i: string) => `round(${timeoutOf(i)} * COALESCE(${i}.late_percent, ${DEFAULT_LATE}) / 100.0)::bigint`;

/** SQL for a short human reason for that colour. */
export function lightReasonSql(alias: string, windowParam: string, now = 'now()'): string {
  const i = alias;
  return `CASE
    WHEN ${i}.last_heartbeat_at IS NULL THEN 'no heartbeat yet'
    WHEN ${i}.status = 'stopped' THEN 'status stopped'
    WHEN ${inMaintenanceSql(i, now)} THEN 'maintenance window'
    WHEN ${silentSql(i, now)} THEN 'no heartbeat for more than ' || ${timeoutOf(i)} || ' s'
    WHEN ${i}.status = 'error' THEN 'status error'
    WHEN ${overdueSql(i, now)} THEN 'heartbeat late: none for more than ' || ${lateOf(i)} || ' s of ' || ${timeoutOf(i)} || ' s'
    WHEN ${i}.status = 'degraded' THEN 'status degraded'
    WHEN ${i}.last_warning_at > ${now} - make_interval(secs => ${windowParam}) THEN 'warning or error diagnostic in the last ' || (${windowParam} / 60)::int || ' min'
    ELSE 'ok' END`;
}

/**
 * SQL for when the colour of row `i` changed to `newLight` (an expression), given that the stored
 * colour `i.light` differs: maintenance began at `maintenanceFrom` (the recording statement gives
 * its window's start; else when it was judged) and ended with its window (unless a report came
 * after); a silence turned red at
 * its deadline and late at its late time; yellow
 * turned green when the last warning ran out or the status that ended `degraded` arrived,
 * whichever is later; red or late that no report ended (a timeout rule moved the deadline) ended
 * when it was judged; anything else changed with the newest report. Never before the stored
 * colour's own start, never in the future.
 */
export function lightAtSql(alias: string, newLight: string, windowParam: string, now = 'now()', maintenanceFrom = now, stored = alias): string {
  const i = alias;
  const s = stored;
  const window = `make_interval(secs => ${windowParam})`;
  const deadline = `GREATEST(${i}.deadline, ${deadlineSql(`${i}.maintenance_until`, `${i}.timeout_s`)})`;
  const lateAt = `GREATEST(${i}.late_at, ${lateAtSql(`${i}.maintenance_until`, `${i}.timeout_s`, `${i}.late_percent`)})`;
  return `GREATEST(${s}.light_since, LEAST(now(), CASE
    WHEN ${newLight} = 'maintenance' THEN ${maintenanceFrom}
    WHEN ${newLight} = 'red' AND ${silentSql(i, now)} THEN ${deadline}
    WHEN ${newLight} = 'late' AND ${overdueSql(i, now)} AND ${lateAt} > ${i}.last_seen_at THEN ${lateAt}
    WHEN ${s}.light = 'maintenance' AND ${i}.maintenance_until > ${i}.last_seen_at THEN ${i}.maintenance_until
    WHEN ${newLight} = 'green' AND ${s}.light = 'yellow' THEN GREATEST(${i}.last_warning_at + ${window}, ${i}.status_at)
    WHEN ${s}.light IN ('red', 'late') AND ${i}.last_seen_at <= ${s}.light_since THEN ${now}
    ELSE ${i}.last_seen_at END))`;
}

export const LIGHTS = ['green', 'yellow', 'late', 'red', 'grey', 'maintenance'] as const;
export type LightColour = (typeof LIGHTS)[number];

/** What recorded a change: a report (heartbeat, status, diagnostics), a Redis expiry event, the sweep. */
export type LightCause = 'report' | 'expiry' | 'sweep';

/**
 * One change of an instance's colour, as it travels from the worker that recorded it to ClickHouse,
 * NATS (the api's live stream) and the webhooks. `id` = `<instance_id>.<seq>` identifies it: a
 * copy delivered twice is the same event.
 */
export interface LightEvent {
  id: string;
  seq: number;
  customer_id: string;
  customer: string;
  instance_id: string;
  machine_id: string;
  machine: string;
  software: string;
  from: LightColour;
  to: LightColour;
  reason: string;
  cause: LightCause;
  /** ISO 8601: when the colour changed. */
  at: string;
  /** ISO 8601: when a worker recorded the change. */
  recorded_at: string;
}

export const lightEventId = (instanceId: string, seq: number) => `${instanceId}.${seq}`;

/** What leaves the service of an event (the dashboard's live stream, webhooks): no customer id. */
export function publicLightEvent(e: LightEvent) {
  return {
    id: e.id,
    instance_id: e.instance_id,
    machine_id: e.machine_id,
    machine: e.machine,
    software: e.software,
    seq: e.seq,
    from: e.from,
    to: e.to,
    reason: e.reason,
    cause: e.cause,
    at: e.at,
    recorded_at: e.recorded_at,
  };
}

/** The live-stream message on core NATS `${SUBJECT_PREFIX}.control.light.<customer id>`. */
export interface LightMessage {
  v: 1;
  events: LightEvent[];
}

/**
 * A change that concerns red or late: what the webhooks are told about. Late exists only where a
 * customer asks for it (a timeout rule's late share), so a customer without it gets exactly the
 * red changes it always got. A change into maintenance is not told (a window is planned silence:
 * red that a window began is over for now, and nothing fires during it); out of it, only a change
 * to red or late.
 */
export const notifiesWebhooks = (e: Pick<LightEvent, 'from' | 'to'>) =>
  e.to === 'red' || e.to === 'late' || ((e.from === 'red' || e.from === 'late') && e.to !== 'maintenance');
