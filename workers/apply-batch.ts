// Applies one batch of reports: Postgres (race-safe upserts of machines and instances, newest wins)
// for what changed, then ClickHouse rows and Redis heartbeat keys and state. A heartbeat that
// changes nothing skips Postgres (workers/heartbeat-state.ts). Every effect is idempotent, so a
// batch applied twice (a worker died before acking) leaves the same state as once:
//   Postgres    upserts with GREATEST / newest-wins comparisons on receive times;
//   ClickHouse  ReplacingMergeTree rows keyed by report id (and item number);
//   Redis       keys whose expiry is an absolute time (receive time + timeout), only ever extended;
//               state hashes whose times only move forward.
// A batch that fails half-way is applied again later: every write is waited for (settled) before
// the failure is thrown, and the ClickHouse rows that did land are told to `rows` (RowLedger),
// which the next apply asks, so each report's rows are inserted once (workers/outages.ts).
// The statements and the ClickHouse rows' layouts are the store's: lib/store/machines.ts,
// instances.ts (upserts), history.ts (heartbeats, diagnostics, status_history), rejections.ts.
import type { Report, RejectionRecord } from '../lib/contract/messages.js';
import type { Pool, PoolClient } from '../lib/infra/postgres.js';
import { withTx, pgText, pgJson } from '../lib/infra/postgres.js';
import { chTime, TsvRows, type ClickHouseClient } from '../lib/infra/clickhouse.js';
import type { Redis } from '../lib/infra/redis.js';
import { redisKeys } from '../lib/infra/redis.js';
import type { Heartbeat, Diagnostics, Status } from '../lib/contract/schemas/ingest.js';
import { writeMetrics } from './metrics.js';
import { writeArtifacts } from './artifacts.js';
import type { ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { Logger } from '../lib/infra/log.js';
import { NO_CHANGES, type RecordedChanges } from '../lib/store/light-events.js';
import type { ReportLights } from './traffic-light.js';
import { applyCommandReports, type CommandDeps } from './commands.js';
import { summarise, agentTime, instanceKey, machineKey, type InstanceUpdate, type TsWindow } from './reports.js';
import { heartbeatFields } from '../lib/store/live-heartbeats.js';
import { applyHelpTexts } from './help-texts.js';
import type { WhitelistCache, Suppression } from './whitelist-cache.js';
import { noteNewMachines } from './licences.js';
import type { HeartbeatState, Resolved } from './heartbeat-state.js';
import { upsertMachines, dropMachinesWithoutInstances, type MachineSeen } from '../lib/store/machines.js';
import { upsertInstances } from '../lib/store/instances.js';
import type { TableGrowth } from '../lib/store/table-growth.js';
import { reportRowStart, heartbeatRow, diagnosticRow, statusRow, insertReportRows, type ReportTable } from '../lib/store/history.js';
import { rejectionRow, insertRejectionRows } from '../lib/store/rejections.js';
import { recordMilestones } from './onboarding.js';
import type { LiveCustomers } from './live-customers.js';

export interface ApplyDeps extends CommandDeps {
  pool: Pool;
  ch: ClickHouseClient;
  redis: Redis;
  redisPrefix: string;
  /** Heartbeat keys and state, and which heartbeats skip Postgres (workers/heartbeat-state.ts). */
  heartbeats: HeartbeatState;
  idempotencyTtlS: number;
  /** Where an agent's `ts` is believed (docs/api.md "Agent clocks"). */
  tsWindow: TsWindow;
  /** Diagnostics whitelist; without it nothing is suppressed. */
  whitelist?: WhitelistCache;
  /** Traffic light: changes of colour caused by the batch (workers/traffic-light.ts). */
  lights?: ReportLights;
  /** Reservations against the quota artifact_bytes, settled once an artifact is stored (lib/store/artifact-usage.ts); without it none are. */
  artifactUsage?: ArtifactUsage;
  log?: Logger;
  /** Which reports' ClickHouse rows landed already (a retried batch's); none: insert everything. */
  rows?: RowLedger;
  /** Customers whose reports are applied (not being deleted); without it every report is (workers/live-customers.ts). */
  customers?: LiveCustomers;
  /** Told how many machines and instances the upsert inserted: analyses them after fast growth (lib/store/table-growth.ts). */
  growth?: TableGrowth;
}

/** ClickHouse rows that landed before, per table and report id (workers/outages.ts LandedRows). */
export interface RowLedger {
  /** The rows of report `id` are in `table` already: not inserted again. */
  landed(table: string, id: string): boolean;
  /** An insert into `table` succeeded with the rows of these reports. */
  inserted(table: string, ids: readonly string[]): void;
}

/** Every promise settled; then the first failure, if any, is thrown. */
async function settled(ps: (Promise<unknown> | null)[]): Promise<void> {
  const results = await Promise.allSettled(ps.filter((p): p is Promise<unknown> => p !== null));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

export type { Resolved };

export async function applyBatch(d: ApplyDeps, all: Report[], rejections: RejectionRecord[]): Promise<Map<string, Resolved>> {
  await settleIdempotencyKeys(d, all);
  // Help uploads describe a software, not an instance: their own table (workers/help-texts.ts).
  const reports = all.filter((r) => r.kind !== 'help');
  const suppressed: Suppression = d.whitelist ? d.whitelist.classify(reports) : new Map();
  const updates = summarise(reports, d.tsWindow, suppressed);
  // Heartbeats that change nothing: their keys are extended now, Postgres gets them later.
  const ids = await d.heartbeats.skip(updates.values());
  const toWrite = [...updates.values()].filter((u) => !ids.has(u.key));
  let lightChanges: RecordedChanges = NO_CHANGES;
  const written =
    toWrite.length > 0
      ? await withTx(d.pool, async (c) => {
          const w = await upsertMachinesAndInstances(c, toWrite, d.growth);
          // Judged from the newest heartbeat, also where only Redis holds it (workers/heartbeat-state.ts).
          await d.heartbeats.catchUp(c, w);
          if (d.lights) lightChanges = await d.lights.inTransaction(c, [...w.values()].map((x) => x.instanceId));
          return w;
        })
      : new Map<string, Resolved & { pgAt: number | null }>();
  for (const [k, v] of written) ids.set(k, v);
  // Committed changes of colour go out (never throws), even if the rest of the batch is retried.
  const lightsDelivered = d.lights?.afterCommit(lightChanges);
  try {
    // Settled, not raced: a write still in flight when another failed could land unnoticed, and
    // its rows would be inserted again by the retry.
    const metrics = reports.filter((r) => r.kind === 'metrics' && !d.rows?.landed('host_metrics', r.id));
    await settled([
      writeClickHouse(d, reports, rejections, ids, suppressed),
      d.heartbeats.written(toWrite.flatMap((u) => (written.has(u.key) ? [{ u, id: written.get(u.key)!, pgAt: written.get(u.key)!.pgAt }] : []))),
      reports.length < all.length ? applyHelpTexts(d.pool, all) : null,
      recordMilestones(d.pool, all),
      metrics.length > 0 ? writeMetrics(d.ch, metrics, ids).then(() => d.rows?.inserted('host_metrics', metrics.map((r) => r.id))) : null,
      writeArtifacts(d.pool, reports, ids, d.artifactUsage ? { usage: d.artifactUsage, log: d.log } : undefined),
      applyCommandReports(d, reports),
    ]);
  } finally {
    await lightsDelivered;
  }
  return ids;
}

/**
 * A report sent again with the same Idempotency-Key (within IDEMPOTENCY_TTL_S) has the same id;
 * here it also takes the first copy's receive time, so every row it produces is identical to the
 * first copy's rows and collapses into them. The key is written before the effects, so a crash
 * in between still gives the retry the same receive time.
 */
async function settleIdempotencyKeys(d: ApplyDeps, reports: Report[]): Promise<void> {
  const keyed = reports.filter((r) => r.idempotencyKey !== undefined);
  if (keyed.length === 0) return;
  const keys = redisKeys(d.redisPrefix, d.redis);
  // One command per key (the connection pipelines them by itself; in a cluster, per node).
  const results = await Promise.all(keyed.map((r) => d.redis.set(keys.idempotency(r.id), String(r.receivedAt), 'EX', d.idempotencyTtlS, 'NX', 'GET')));
  keyed.forEach((r, i) => {
    const prev = results[i];
    if (typeof prev === 'string' && Number(prev) > 0) r.receivedAt = Number(prev);
  });
  // Two copies in this very batch: both now carry the first receive time; the rows collapse.
}

const ms = (v: number | null | undefined) => (v === null || v === undefined ? null : v);

/** Machines then instances, in key order (consistent lock order across concurrent workers). */
async function upsertMachinesAndInstances(c: PoolClient, updates: InstanceUpdate[], growth?: TableGrowth): Promise<Map<string, Resolved & { pgAt: number | null }>> {
  const machines = new Map<string, MachineSeen>();
  for (const u of updates) {
    const k = machineKey(u.customerId, u.machine);
    const m = machines.get(k);
    if (!m) machines.set(k, { customerId: u.customerId, slug: u.machine, first: u.firstSeen, last: u.lastSeen });
    else {
      m.first = Math.min(m.first, u.firstSeen);
      m.last = Math.max(m.last, u.lastSeen);
    }
  }
  const ms_ = [...machines.values()].sort((a, b) => (a.customerId + a.slug < b.customerId + b.slug ? -1 : 1));
  const mrows = await upsertMachines(c, ms_);
  const machineIds = new Map(mrows.map((r) => [machineKey(r.customer_id, r.slug), r.id]));

  // A machine the upsert left out was retired after these reports were received: they are dropped
  // (docs/operations.md "Decommissioning"); so are the instances the instance upsert leaves out.
  const rows = updates
    .flatMap((u) => {
      const machineId = machineIds.get(machineKey(u.customerId, u.machine));
      return machineId ? [{ u, machineId }] : [];
    })
    .sort((a, b) => (a.machineId + a.u.software < b.machineId + b.u.software ? -1 : 1));
  const col = <T>(f: (u: InstanceUpdate) => T) => rows.map((r) => f(r.u));
  const hbf = new Map(updates.flatMap((u) => (u.heartbeat ? [[u, heartbeatFields(u.heartbeat.at, u.heartbeat.agentTs, u.heartbeat.skew, u.heartbeat.body as Heartbeat)] as const] : [])));
  const hb = (u: InstanceUpdate) => hbf.get(u);
  const st = (u: InstanceUpdate) => u.status?.body as Status | undefined;
  const irows = await upsertInstances(c, [
    col((u) => u.customerId),
    rows.map((r) => r.machineId),
    col((u) => u.software),
    col((u) => u.firstSeen),
    col((u) => u.lastSeen),
    col((u) => ms(u.heartbeat?.at)),
    col((u) => ms(u.heartbeat?.agentTs)),
    col((u) => hb(u)?.version ?? null),
    col((u) => hb(u)?.uptime ?? null),
    col((u) => hb(u)?.pid ?? null),
    col((u) => hb(u)?.ips ?? null),
    col((u) => hb(u)?.group ?? null),
    col((u) => hb(u)?.location ?? null),
    col((u) => hb(u)?.groupPriority ?? null),
    col((u) => hb(u)?.sortPriority ?? null),
    col((u) => st(u)?.status ?? null),
    col((u) => (u.status ? pgText(st(u)!.message ?? '') : null)),
    col((u) => ms(u.status?.at)),
    col((u) => (st(u)?.snapshot !== undefined ? pgJson(st(u)!.snapshot) : null)),
    col((u) => u.lastWarning),
    col((u) => u.heartbeat?.skew ?? null),
    col((u) => u.machine),
  ]);
  growth?.note('machines', mrows.filter((r) => r.inserted).length);
  growth?.note('instances', irows.filter((r) => r.inserted).length);
  // A machine made now that has no instance: retired while this upsert waited for its lock.
  const kept = new Set(irows.map((r) => r.machine_id));
  const orphans = mrows.filter((r) => r.inserted && !kept.has(r.id)).map((r) => r.id);
  if (orphans.length) await dropMachinesWithoutInstances(c, orphans);
  // Licence limits, grace period and first-device conversions (workers/licences.ts).
  await noteNewMachines(c, mrows.filter((r) => r.inserted && kept.has(r.id)));
  const out = new Map<string, Resolved & { pgAt: number | null }>();
  const byMachine = new Map(rows.map((r) => [`${r.machineId}|${r.u.software}`, r.u.key]));
  for (const r of irows) {
    out.set(byMachine.get(`${r.machine_id}|${r.software}`)!, {
      machineId: r.machine_id,
      instanceId: r.id,
      pgAt: r.pg_ms === null ? null : Number(r.pg_ms),
      timeoutS: r.timeout_s,
      latePercent: r.late_percent,
    });
  }
  return out;
}

async function writeClickHouse(d: ApplyDeps, reports: Report[], rejections: RejectionRecord[], ids: Map<string, Resolved>, suppressed: Suppression): Promise<void> {
  // Rows joined as they come (lib/infra/clickhouse.ts TsvRows): a batch's rows are not held as concatenations.
  const heartbeats = new TsvRows();
  const diagnostics = new TsvRows();
  const statuses = new TsvRows();
  // The reports whose rows each insert holds (for the ledger).
  const of: Record<ReportTable, string[]> = { heartbeats: [], diagnostics: [], status_history: [] };
  for (const r of reports) {
    if (r.kind !== 'heartbeat' && r.kind !== 'diagnostics' && r.kind !== 'status') continue;
    const id = ids.get(instanceKey(r));
    if (!id) continue;
    const table = r.kind === 'heartbeat' ? 'heartbeats' : r.kind === 'diagnostics' ? 'diagnostics' : 'status_history';
    if (d.rows?.landed(table, r.id)) continue;
    of[table].push(r.id);
    const start = reportRowStart(chTime(r.receivedAt), r, id.machineId, id.instanceId);
    if (r.kind === 'heartbeat') {
      const b = r.body as Heartbeat;
      const t = agentTime(b.ts, r.receivedAt, d.tsWindow);
      heartbeats.push(heartbeatRow(start, b, t.ms ?? r.receivedAt, t.skew));
    } else if (r.kind === 'diagnostics') {
      const rules = suppressed.get(r);
      (r.body as Diagnostics).items.forEach((it, i) => {
        diagnostics.push(diagnosticRow(start, r.receivedAt, i, it, rules?.[i] ?? null));
      });
    } else {
      statuses.push(statusRow(start, r.body as Status));
    }
  }
  const rejected = rejections.filter((x) => !d.rows?.landed('ingest_rejections', x.id));
  const rej = rejected.map((x) => rejectionRow(chTime(x.at), x));
  const insert = async (table: ReportTable, rows: TsvRows, reportIds: readonly string[]) => {
    if (rows.length === 0) return;
    await insertReportRows(d.ch, table, rows);
    d.rows?.inserted(table, reportIds);
  };
  await settled([
    insert('heartbeats', heartbeats, of.heartbeats),
    insert('diagnostics', diagnostics, of.diagnostics),
    insert('status_history', statuses, of.status_history),
    rej.length > 0 ? insertRejectionRows(d.ch, rej).then(() => d.rows?.inserted('ingest_rejections', rejected.map((x) => x.id))) : null,
  ]);
}
