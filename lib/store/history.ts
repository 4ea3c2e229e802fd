// The history tables of ClickHouse as the api reads them, always one instance's or one machine's
// rows of one customer: diagnostics, status history, traffic-light changes (light_events) and host
// metrics. Whether the instance or machine is the customer's is asked before, in Postgres
// (lib/store/instances.ts, lib/store/machines.ts): an id of another customer is a 404.
// At the end, the rows the workers insert into heartbeats, diagnostics and status_history
// (workers/apply-batch.ts).
import { queryRows, insertTsv, tsvRow, type ClickHouseClient, type TsvRows } from '../infra/clickhouse.js';
import { chStr, chInt } from '../infra/clickhouse-sql.js';
import type { Report } from '../contract/messages.js';
import type { Heartbeat, DiagnosticItem, Status } from '../contract/schemas/ingest.js';
import { toInt } from './live-heartbeats.js';

/** The conditions that select one instance's rows. */
const instanceRows = (customerId: string, instanceId: string) => [`customer_id = ${chStr(customerId)}`, `instance_id = ${chStr(instanceId)}`];

type Row = Record<string, string | number>;

export interface DiagnosticsFilter {
  /** Suppressed (whitelisted) diagnostics are kept, but hidden unless asked for. */
  suppressed?: 'exclude' | 'include' | 'only';
  code?: number;
  /** Milliseconds since the epoch, inclusive. */
  fromMs?: number;
  toMs?: number;
  /** At least this severity. */
  severity?: number;
  limit: number;
}

/** An instance's diagnostics, newest first. */
export async function listDiagnostics(ch: ClickHouseClient, customerId: string, instanceId: string, f: DiagnosticsFilter): Promise<Row[]> {
  const cond = instanceRows(customerId, instanceId);
  if ((f.suppressed ?? 'exclude') === 'exclude') cond.push('suppressed = 0');
  else if (f.suppressed === 'only') cond.push('suppressed = 1');
  if (f.code !== undefined) cond.push(`code = ${chInt(f.code)}`);
  if (f.fromMs !== undefined) cond.push(`received_ms >= ${chInt(f.fromMs)}`);
  if (f.toMs !== undefined) cond.push(`received_ms <= ${chInt(f.toMs)}`);
  if (f.severity !== undefined) cond.push(`severity >= ${chInt(f.severity)}`);
  return queryRows<Row>(
    ch,
    `SELECT report_id, item, received_ms, ts_ms, code, severity, message, suppressed, rule_id
           FROM diagnostics FINAL WHERE ${cond.join(' AND ')}
          ORDER BY received_ms DESC, report_id, item LIMIT ${chInt(f.limit)}`,
  );
}

/** An instance's reports of status, newest first; with their snapshot (JSON text) or without. */
export async function listStatusHistory(
  ch: ClickHouseClient,
  customerId: string,
  instanceId: string,
  f: { fromMs: number | null; toMs: number | null; withSnapshot: boolean; limit: number },
): Promise<Row[]> {
  const cond = instanceRows(customerId, instanceId);
  if (f.fromMs !== null) cond.push(`received_ms >= ${chInt(Math.max(0, f.fromMs))}`);
  if (f.toMs !== null) cond.push(`received_ms <= ${chInt(Math.max(0, f.toMs))}`);
  return queryRows<Row>(
    ch,
    `SELECT report_id, received_ms, status, message${f.withSnapshot ? ', snapshot' : ''}
           FROM status_history FINAL WHERE ${cond.join(' AND ')}
          ORDER BY received_ms DESC, report_id LIMIT ${chInt(f.limit)}`,
  );
}

/** An instance's changes of colour, newest first. */
export async function listLightEvents(ch: ClickHouseClient, customerId: string, instanceId: string, f: { fromMs?: number; toMs?: number; limit: number }): Promise<Row[]> {
  const cond = instanceRows(customerId, instanceId);
  if (f.fromMs !== undefined) cond.push(`at_ms >= ${chInt(f.fromMs)}`);
  if (f.toMs !== undefined) cond.push(`at_ms <= ${chInt(f.toMs)}`);
  return queryRows<Row>(
    ch,
    `SELECT instance_id, machine_id, machine, software, seq, from_light, to_light, reason, cause, at_ms, recorded_ms
           FROM light_events FINAL WHERE ${cond.join(' AND ')}
          ORDER BY seq DESC LIMIT ${chInt(f.limit)}`,
  );
}

/** The conditions that select one machine's host metrics in [fromMs, toMs). */
function metricRows(customerId: string, machineId: string, fromMs: number, toMs: number): string[] {
  return [
    `customer_id = ${chStr(customerId)}`,
    `machine_id = ${chStr(machineId)}`,
    // The partition key is the month of ts: these two let ClickHouse skip other months (a day
    // wider than the range, in case the server's time zone is not UTC; ts_ms is exact).
    `ts >= toDateTime(${chInt(Math.max(0, Math.floor(fromMs / 1000) - 86_400))})`,
    `ts <= toDateTime(${chInt(Math.min(4_294_967_295, Math.ceil(toMs / 1000) + 86_400))})`,
    `ts_ms >= ${chInt(Math.max(0, fromMs))}`,
    `ts_ms < ${chInt(Math.max(0, toMs))}`,
  ];
}

/** The names of host metrics a machine reported in [fromMs, toMs), each record counted once. */
export async function listMetricNames(ch: ClickHouseClient, customerId: string, machineId: string, fromMs: number, toMs: number) {
  return queryRows<{ name: string; points: string; first: string; last: string }>(
    ch,
    `SELECT name, uniqExact(client_metric_id) AS points, min(ts_ms) AS first, max(ts_ms) AS last
             FROM host_metrics WHERE ${metricRows(customerId, machineId, fromMs, toMs).join(' AND ')}
            GROUP BY name ORDER BY name LIMIT 10000`,
  );
}

/** One host metric of a machine in [fromMs, toMs), per step (avg, min, max, count); every record once (its first copy's values). */
export async function metricSeries(ch: ClickHouseClient, customerId: string, machineId: string, fromMs: number, toMs: number, name: string, stepMs: number) {
  const step = chInt(stepMs);
  return queryRows<{ t: string; avg: number; min: number; max: number; n: string }>(
    ch,
    `SELECT intDiv(t0, ${step}) * ${step} AS t, avg(v) AS avg, min(v) AS min, max(v) AS max, count() AS n
           FROM (SELECT client_metric_id, argMax(ts_ms, ver) AS t0, argMax(value, ver) AS v
                   FROM host_metrics
                  WHERE ${metricRows(customerId, machineId, fromMs, toMs).join(' AND ')} AND name = ${chStr(name)}
                  GROUP BY client_metric_id)
          GROUP BY t ORDER BY t`,
  );
}

// ---- the workers' inserts: TabSeparated rows (lib/infra/clickhouse.ts), one per report (per item
// of a diagnostics report), keyed by report id (and item), so a row inserted twice collapses ---

/** The tables of reports the workers insert into. */
export type ReportTable = 'heartbeats' | 'diagnostics' | 'status_history';

/** Column order of the rows below. */
const BASE_COLS = ['received_at', 'received_ms', 'customer_id', 'customer', 'machine_id', 'machine', 'software', 'instance_id', 'report_id'];
const REPORT_COLS: Record<ReportTable, readonly string[]> = {
  heartbeats: [...BASE_COLS, 'ts_ms', 'version', 'uptime_seconds', 'pid', 'ip_addresses', 'group_name', 'location', 'group_priority', 'sort_priority', 'clock_skew', 'agent_ts'],
  diagnostics: [...BASE_COLS, 'ts_ms', 'item', 'code', 'severity', 'message', 'suppressed', 'rule_id'],
  status_history: [...BASE_COLS, 'status', 'message', 'snapshot'],
};

/** The columns every report's row starts with; `receivedAt`: r.receivedAt as ClickHouse DateTime text. */
export function reportRowStart(receivedAt: string, r: Report, machineId: string, instanceId: string): string {
  return tsvRow([receivedAt, r.receivedAt, r.customerId, r.customer, machineId, r.machine, r.software, instanceId, r.id]);
}

/** A heartbeat's row: `tsMs` its time as stored (the agent's where believed, else the receive time), `skew` a `ts` not believed. */
export function heartbeatRow(start: string, b: Heartbeat, tsMs: number, skew: boolean): string {
  return (
    start +
    '\t' +
    tsvRow([
      tsMs,
      b.version ?? '',
      b.uptime_seconds ?? null,
      b.pid ?? null,
      b.ip_addresses ?? [],
      b.group ?? '',
      b.location ?? '',
      toInt(b.group_priority),
      toInt(b.sort_priority),
      skew ? 1 : 0,
      typeof b.ts === 'string' ? b.ts : '',
    ])
  );
}

/** Item `item` of a diagnostics report received at `receivedMs`; `ruleId`: the whitelist rule that suppressed it, or null. */
export function diagnosticRow(start: string, receivedMs: number, item: number, it: DiagnosticItem, ruleId: string | null): string {
  return start + '\t' + tsvRow([receivedMs, item, it.code, it.severity, it.message ?? '', ruleId ? 1 : 0, ruleId ?? '']);
}

/** A status report's row (the snapshot as JSON text, '' without one). */
export function statusRow(start: string, b: Status): string {
  return start + '\t' + tsvRow([b.status, b.message ?? '', b.snapshot === undefined ? '' : JSON.stringify(b.snapshot)]);
}

/** One insert of rows built above into `table`. */
export async function insertReportRows(ch: ClickHouseClient, table: ReportTable, rows: readonly string[] | TsvRows): Promise<void> {
  await insertTsv(ch, table, REPORT_COLS[table], rows);
}
