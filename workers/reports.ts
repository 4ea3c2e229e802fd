// Turns the reports of a batch into what gets written: one entry per instance for Postgres (the
// newest of everything the batch says about it), and rows for ClickHouse. Pure functions; the
// effects live in apply-batch.ts.
import type { Report } from '../lib/contract/messages.js';
import type { Heartbeat, Diagnostics, Status } from '../lib/contract/schemas/ingest.js';

export interface InstanceUpdate {
  key: string;
  customerId: string;
  customer: string;
  machine: string;
  software: string;
  firstSeen: number;
  lastSeen: number;
  /** agentTs: the agent's `ts` when plausible (agentTime); skew: a `ts` was sent and is not. */
  heartbeat: { at: number; agentTs: number | null; skew: boolean; body: Heartbeat } | null;
  status: { at: number; body: Status } | null;
  lastWarning: number | null;
  /** Every report of the batch for this instance is a heartbeat (workers/heartbeat-state.ts may skip Postgres). */
  onlyHeartbeats: boolean;
}

export const instanceKey = (r: Pick<Report, 'customerId' | 'machine' | 'software'>) => `${r.customerId}|${r.machine}|${r.software}`;
export const machineKey = (customerId: string, machine: string) => `${customerId}|${machine}`;

/** ISO 8601 -> ms; null when absent or unreadable (the gateway already checked the format). */
export function parseTs(ts: unknown): number | null {
  if (typeof ts !== 'string') return null;
  const ms = Date.parse(ts);
  return Number.isFinite(ms) ? ms : null;
}

/** How far an agent's `ts` may lie from the receive time and still be stored (TS_PLAUSIBLE_*_S). */
export interface TsWindow {
  pastMs: number;
  futureMs: number;
}

/**
 * The agent's time of a report, as stored: its `ts` when within the window around the receive
 * time, else null with `skew` set (an agent whose clock says 1970, year 0000 or 9999 is still
 * alive: its report is kept, only its clock is not believed). Absent `ts`: null, no skew.
 */
export function agentTime(ts: unknown, receivedAt: number, w: TsWindow): { ms: number | null; skew: boolean } {
  const ms = parseTs(ts);
  if (ms === null) return { ms: null, skew: typeof ts === 'string' };
  if (ms < receivedAt - w.pastMs || ms > receivedAt + w.futureMs) return { ms: null, skew: true };
  return { ms, skew: false };
}

export { toInt } from '../lib/store/live-heartbeats.js';

/**
 * `suppressed`: per diagnostics report, the whitelist rule (or null) of each item; a suppressed
 * item never sets last_warning_at, so it does not colour the traffic light.
 */
export function summarise(reports: Report[], w: TsWindow, suppressed?: Map<Report, (string | null)[]>): Map<string, InstanceUpdate> {
  const out = new Map<string, InstanceUpdate>();
  for (const r of reports) {
    const key = instanceKey(r);
    let u = out.get(key);
    if (!u) {
      u = { key, customerId: r.customerId, customer: r.customer, machine: r.machine, software: r.software, firstSeen: r.receivedAt, lastSeen: r.receivedAt, heartbeat: null, status: null, lastWarning: null, onlyHeartbeats: true };
      out.set(key, u);
    }
    if (r.receivedAt < u.firstSeen) u.firstSeen = r.receivedAt;
    if (r.receivedAt > u.lastSeen) u.lastSeen = r.receivedAt;
    if (r.kind !== 'heartbeat') u.onlyHeartbeats = false;
    if (r.kind === 'heartbeat') {
      const b = r.body as Heartbeat;
      if (!u.heartbeat || r.receivedAt >= u.heartbeat.at) {
        const t = agentTime(b.ts, r.receivedAt, w);
        u.heartbeat = { at: r.receivedAt, agentTs: t.ms, skew: t.skew, body: b };
      }
    } else if (r.kind === 'status') {
      if (!u.status || r.receivedAt >= u.status.at) u.status = { at: r.receivedAt, body: r.body as Status };
    } else if (r.kind === 'diagnostics') {
      const items = (r.body as Diagnostics).items;
      const rules = suppressed?.get(r);
      if (items.some((it, i) => it.severity >= 1 && !rules?.[i]) && (u.lastWarning === null || r.receivedAt > u.lastWarning)) u.lastWarning = r.receivedAt;
    }
  }
  return out;
}
