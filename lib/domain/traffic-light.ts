// The traffic light (docs/decisions.md "Traffic light"), derived from what Postgres holds about an
// instance: the last heartbeat's receive time, the latest status, the last unsuppressed warning.
// The api computes it in SQL at read time, so what it shows is right even when no event fired.
//
//   grey    never sent a heartbeat, or latest status `stopped`
//   red     no heartbeat for more than HEARTBEAT_TIMEOUT_S, or latest status `error`
//   yellow  latest status `degraded`, or an unsuppressed warning/error within WARNING_WINDOW_S
//   green   otherwise

/**
 * SQL: row `i` has sent no heartbeat for more than $timeout (seconds) at `now`, the red rule's
 * silence; a row that never sent one is not silent (grey). Every query that asks "silent?" (the
 * colour, its reason and time here, the workers' sweep and expiry in lib/store/instances.ts) uses
 * this one.
 */
export function silentSql(alias: string, timeoutParam: string, now = 'now()'): string {
  return `${alias}.last_heartbeat_at < ${now} - make_interval(secs => ${timeoutParam})`;
}

/**
 * SQL for the colour of `instances` row alias `i`; $timeout and $window are interval parameters in
 * seconds. `now`: the time to judge silence and warnings at; the workers pass their horizon (the
 * receive time up to which every report has been applied: workers/traffic-light.ts), so that a
 * backlog in the queue is never taken for silence.
 */
export function lightSql(alias: string, timeoutParam: string, windowParam: string, now = 'now()'): string {
  const i = alias;
  return `CASE
    WHEN ${i}.last_heartbeat_at IS NULL OR ${i}.status = 'stopped' THEN 'grey'
    WHEN ${silentSql(i, timeoutParam, now)} OR ${i}.status = 'error' THEN 'red'
    WHEN ${i}.status = 'degraded' OR ${i}.last_warning_at > ${now} - make_interval(secs => ${windowParam}) THEN 'yellow'
    ELSE 'green' END`;
}

/**
 * SQL that every row whose colour (lightSql) is `light` satisfies, in terms an index answers
 * (status, last_heartbeat_at, last_warning_at: indexes of 0009-read-path): a list filtered to a
 * colour other than green reads the few rows that may have it, not every row of the customer.
 * Only a pre-filter: the colour itself is still compared. Green is most rows: null (no pre-filter).
 */
export function lightCandidateSql(alias: string, light: string, timeoutParam: string, windowParam: string, now = 'now()'): string | null {
  const i = alias;
  if (light === 'grey') return `(${i}.last_heartbeat_at IS NULL OR ${i}.status = 'stopped')`;
  if (light === 'red') return `(${i}.status = 'error' OR ${silentSql(i, timeoutParam, now)})`;
  if (light === 'yellow') return `(${i}.status = 'degraded' OR ${i}.last_warning_at > ${now} - make_interval(secs => ${windowParam}))`;
  return null;
}

/** SQL for a short human reason for that colour. */
export function lightReasonSql(alias: string, timeoutParam: string, windowParam: string, now = 'now()'): string {
  const i = alias;
  return `CASE
    WHEN ${i}.last_heartbeat_at IS NULL THEN 'no heartbeat yet'
    WHEN ${i}.status = 'stopped' THEN 'status stopped'
    WHEN ${silentSql(i, timeoutParam, now)} THEN 'no heartbeat for more than ' || ${timeoutParam} || ' s'
    WHEN ${i}.status = 'error' THEN 'status error'
    WHEN ${i}.status = 'degraded' THEN 'status degraded'
    WHEN ${i}.last_warning_at > ${now} - make_interval(secs => ${windowParam}) THEN 'warning or error diagnostic in the last ' || (${windowParam} / 60)::int || ' min'
    ELSE 'ok' END`;
}

/**
 * SQL for when the colour of row `i` changed to `newLight` (an expression), given that the stored
 * colour `i.light` differs: a silence turned red at last heartbeat + timeout; yellow turned green
 * when the last warning ran out or the status that ended `degraded` arrived, whichever is later;
 * anything else changed with the newest report. Never before the stored colour's own start, never
 * in the future.
 */
export function lightAtSql(alias: string, newLight: string, timeoutParam: string, windowParam: string, now = 'now()'): string {
  const i = alias;
  const timeout = `make_interval(secs => ${timeoutParam})`;
  const window = `make_interval(secs => ${windowParam})`;
  return `GREATEST(${i}.light_since, LEAST(now(), CASE
    WHEN ${newLight} = 'red' AND ${silentSql(i, timeoutParam, now)} THEN ${i}.last_heartbeat_at + ${timeout}
    WHEN ${newLight} = 'green' AND ${i}.light = 'yellow' THEN GREATEST(${i}.last_warning_at + ${window}, ${i}.status_at)
    ELSE ${i}.last_seen_at END))`;
}

/** SQL for since when row `i` has the colour the API shows (derived), whether or not a worker recorded it yet. */
export function lightSinceSql(alias: string, timeoutParam: string, windowParam: string): string {
  const derived = `(${lightSql(alias, timeoutParam, windowParam)})`;
  return `CASE WHEN ${derived} = ${alias}.light THEN COALESCE(${alias}.light_since, ${alias}.first_seen_at)
    ELSE ${lightAtSql(alias, derived, timeoutParam, windowParam)} END`;
}

export const LIGHTS = ['green', 'yellow', 'red', 'grey'] as const;
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

/** A change that concerns red (to or from): what the webhooks are told about. */
export const touchesRed = (e: Pick<LightEvent, 'from' | 'to'>) => e.from === 'red' || e.to === 'red';
