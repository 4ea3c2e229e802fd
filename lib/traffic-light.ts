// The traffic light (decisions.md "Traffic light"), derived from what Postgres holds about an
// instance: the last heartbeat's receive time, the latest status, the last unsuppressed warning.
// The api computes it in SQL at read time, so what it shows is right even when no event fired.
//
//   grey    never sent a heartbeat, or latest status `stopped`
//   red     no heartbeat for more than HEARTBEAT_TIMEOUT_S, or latest status `error`
//   yellow  latest status `degraded`, or an unsuppressed warning/error within WARNING_WINDOW_S
//   green   otherwise

/** SQL for the colour of `instances` row alias `i`; $timeout and $window are interval parameters in seconds. */
export function lightSql(alias: string, timeoutParam: string, windowParam: string): string {
  const i = alias;
  return `CASE
    WHEN ${i}.last_heartbeat_at IS NULL OR ${i}.status = 'stopped' THEN 'grey'
    WHEN ${i}.last_heartbeat_at < now() - make_interval(secs => ${timeoutParam}) OR ${i}.status = 'error' THEN 'red'
    WHEN ${i}.status = 'degraded' OR ${i}.last_warning_at > now() - make_interval(secs => ${windowParam}) THEN 'yellow'
    ELSE 'green' END`;
}

/** SQL for a short human reason for that colour. */
export function lightReasonSql(alias: string, timeoutParam: string, windowParam: string): string {
  const i = alias;
  return `CASE
    WHEN ${i}.last_heartbeat_at IS NULL THEN 'no heartbeat yet'
    WHEN ${i}.status = 'stopped' THEN 'status stopped'
    WHEN ${i}.last_heartbeat_at < now() - make_interval(secs => ${timeoutParam}) THEN 'no heartbeat for more than ' || ${timeoutParam} || ' s'
    WHEN ${i}.status = 'error' THEN 'status error'
    WHEN ${i}.status = 'degraded' THEN 'status degraded'
    WHEN ${i}.last_warning_at > now() - make_interval(secs => ${windowParam}) THEN 'warning or error diagnostic in the last ' || (${windowParam} / 60)::int || ' min'
    ELSE 'ok' END`;
}
