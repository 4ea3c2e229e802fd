// The newest heartbeat of an instance, as Postgres stores it and as Redis holds it between two
// Postgres writes (docs/architecture.md "Where an instance's state lives").
//
// A heartbeat that changes none of an instance's fields and none of its colour is not written to
// Postgres at once (workers/heartbeat-state.ts): its receive time, uptime and agent time go to the
// instance's state hash in Redis, and Postgres gets them at most PG_HEARTBEAT_INTERVAL_S later.
// The api merges that hash into what it answers (`mergeLatest`), so the times it shows are exact.
import { createHash } from 'node:crypto';
import type { Redis } from '../infra/redis.js';
import { byGroup, chunks, luaCommand, redisKeys } from '../infra/redis.js';

const READ_CHUNK = 1000;
import { pgText, pgJson } from '../infra/postgres.js';
import type { Heartbeat } from '../contract/schemas/ingest.js';

/** The columns of `instances` a heartbeat sets, normalised as Postgres stores them (null: absent). */
export interface HeartbeatFields {
  /** Receive time, ms since the epoch. */
  at: number;
  /** The agent's `ts` where believed (ms), else null; `skew`: a `ts` was sent and not believed. */
  agentTs: number | null;
  skew: boolean;
  version: string | null;
  uptime: number | null;
  pid: number | null;
  /** JSON text of the address list (Postgres text[] built from it). */
  ips: string | null;
  group: string | null;
  location: string | null;
  groupPriority: number | null;
  sortPriority: number | null;
}

export function toInt(v: unknown): number | null {
  if (typeof v === 'number' && Number.isInteger(v)) return v;
  if (typeof v === 'string' && /^-?[0-9]{1,15}$/.test(v)) return Number(v);
  return null;
}

export function heartbeatFields(at: number, agentTs: number | null, skew: boolean, b: Heartbeat): HeartbeatFields {
  return {
    at,
    agentTs,
    skew,
    version: pgText(b.version),
    uptime: b.uptime_seconds ?? null,
    pid: b.pid ?? null,
    ips: b.ip_addresses ? pgJson(b.ip_addresses) : null,
    group: pgText(b.group),
    location: pgText(b.location),
    groupPriority: toInt(b.group_priority),
    sortPriority: toInt(b.sort_priority),
  };
}

/**
 * What a heartbeat says that is worth a Postgres write when it changes: everything but the receive
 * time, the uptime and the agent's time (which change with every heartbeat). 16 bytes of SHA-1,
 * base64: the state hash holds this, not the fields.
 */
export function fingerprint(f: HeartbeatFields): string {
  const key = JSON.stringify([f.version, f.pid, f.ips, f.group, f.location, f.groupPriority, f.sortPriority, f.skew]);
  return createHash('sha1').update(key).digest('base64').slice(0, 22);
}

/** Compact JSON of the fields, as the state hash holds the newest heartbeat (`hb`). */
export function encodeFields(f: HeartbeatFields): string {
  return JSON.stringify([f.at, f.agentTs, f.skew ? 1 : 0, f.version, f.uptime, f.pid, f.ips, f.group, f.location, f.groupPriority, f.sortPriority]);
}

export function decodeFields(json: string): HeartbeatFields | null {
  try {
    const a = JSON.parse(json) as unknown[];
    if (!Array.isArray(a) || a.length !== 11 || typeof a[0] !== 'number') return null;
    return {
      at: a[0],
      agentTs: a[1] as number | null,
      skew: a[2] === 1,
      version: a[3] as string | null,
      uptime: a[4] as number | null,
      pid: a[5] as number | null,
      ips: a[6] as string | null,
      group: a[7] as string | null,
      location: a[8] as string | null,
      groupPriority: a[9] as number | null,
      sortPriority: a[10] as number | null,
    };
  } catch {
    return null;
  }
}

/** KEYS: state hashes. Returns each one's `hb` field (false where it has none). */
const readHb = luaCommand<(string | null)[]>(
  'fleetReadLatest',
  `local out = {}
   for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], 'hb') end
   return out`,
);

/**
 * The newest heartbeat Redis holds for each of these instances (only those it has). One script
 * call per key group (one on a single Redis; in a cluster each group's keys share a slot) instead
 * of one HGET per instance: 0.2-0.6 ms less api CPU per list page (bench/README.md [A2]).
 */
export async function readLatest(redis: Redis, prefix: string, instanceIds: string[], layout: { isCluster: boolean } = redis): Promise<Map<string, HeartbeatFields>> {
  const out = new Map<string, HeartbeatFields>();
  if (instanceIds.length === 0) return out;
  const keys = redisKeys(prefix, layout);
  // At most READ_CHUNK keys a call: a worker's batch may hold 60,000 instances (lib/infra/redis.ts LUA_MAX_ARGS).
  await Promise.all(
    byGroup(instanceIds, keys.groups, (id) => id).flatMap(([, all]) => chunks(all, READ_CHUNK)).map(async (ids) => {
      const res = await readHb(redis, ids.length, ...ids.map((id) => keys.heartbeatState(id)));
      res.forEach((v, i) => {
        if (typeof v !== 'string') return;
        const f = decodeFields(v);
        if (f) out.set(ids[i]!, f);
      });
    }),
  );
  return out;
}

/** An instance row as the api reads it from Postgres (the columns a heartbeat sets). */
export interface InstanceTimes {
  id: string;
  last_seen_at: Date | string;
  last_heartbeat_at: Date | string | null;
  agent_ts?: Date | string | null;
  clock_skew?: boolean;
  version?: string | null;
  uptime_seconds?: number | null;
  pid?: number | null;
  ip_addresses?: string[] | null;
  /** The deadline and late time follow the newest heartbeat (lib/store/timeout-rules.ts). */
  deadline?: Date | string | null;
  late_at?: Date | string | null;
  /** The instance's timeout (s) and late share (%) in force (its rule's, else the defaults): where given, the merged deadline and late time are exact. */
  timeout_s?: number | null;
  late_percent?: number | null;
  group_name?: string | null;
  location?: string | null;
  group_priority?: number | null;
  sort_priority?: number | null;
}

const ms = (d: Date | string | null | undefined) => (d === null || d === undefined ? null : d instanceof Date ? d.getTime() : Date.parse(d));

/**
 * Rows with the newest heartbeat Redis holds merged in, where it is newer than Postgres's: the
 * times, uptime and agent time exact; fields the heartbeat leaves out keep their stored values (as
 * the Postgres write would). Errors reading Redis leave the rows as Postgres has them.
 */
export async function mergeLatest<R extends InstanceTimes>(redis: Redis, prefix: string, rows: R[]): Promise<R[]> {
  let latest: Map<string, HeartbeatFields>;
  try {
    latest = await readLatest(
      redis,
      prefix,
      rows.map((r) => r.id),
    );
  } catch {
    return rows;
  }
  for (const r of rows) {
    const f = latest.get(r.id);
    if (!f) continue;
    const stored = ms(r.last_heartbeat_at);
    if (stored !== null && f.at <= stored) continue;
    const at = new Date(f.at);
    const row = r as InstanceTimes;
    row.last_heartbeat_at = at;
    // The times that follow the last heartbeat: as the Postgres write computes them (the newest
    // heartbeat + the timeout in force, + its late share), never before the stored ones, which may
    // follow the end of a maintenance window instead. (Moved by the heartbeat's shift instead, a
    // deadline that followed a window's end was shown later than the one the light keeps.) A row
    // without its timeout in force keeps the stored times.
    if (typeof r.timeout_s === 'number') {
      const timeoutMs = r.timeout_s * 1000;
      const latePercent = r.late_percent ?? 0;
      if (r.deadline) row.deadline = new Date(Math.max(ms(r.deadline)!, f.at + timeoutMs));
      if (r.late_at && latePercent > 0) row.late_at = new Date(Math.max(ms(r.late_at)!, f.at + (timeoutMs * latePercent) / 100));
    }
    if ((ms(r.last_seen_at) ?? 0) < f.at) row.last_seen_at = at;
    if ('agent_ts' in r) row.agent_ts = f.agentTs === null ? (r.agent_ts ?? null) : new Date(f.agentTs);
    if ('clock_skew' in r) row.clock_skew = f.skew;
    if ('version' in r) row.version = f.version ?? r.version ?? null;
    if ('uptime_seconds' in r) row.uptime_seconds = f.uptime ?? r.uptime_seconds ?? null;
    if ('pid' in r) row.pid = f.pid ?? r.pid ?? null;
    if ('ip_addresses' in r && f.ips !== null) row.ip_addresses = JSON.parse(f.ips) as string[];
    if ('group_name' in r) row.group_name = f.group ?? r.group_name ?? null;
    if ('location' in r) row.location = f.location ?? r.location ?? null;
    if ('group_priority' in r) row.group_priority = f.groupPriority ?? r.group_priority ?? null;
    if ('sort_priority' in r) row.sort_priority = f.sortPriority ?? r.sort_priority ?? null;
  }
  return rows;
}
