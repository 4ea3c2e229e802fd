// Heartbeats in Redis, and Postgres writes that follow changes, not reports (docs/architecture.md
// "Where an instance's state lives").
//
// Per instance, Redis holds
//   hb:<id>   the heartbeat key: present while the instance is fresh, expiring at the newest
//             heartbeat's receive time + the instance's timeout, or its late time where it has
//             one (its expiry turns the light late or red: workers/light-expiry.ts). An older
//             report never shortens it.
//   hs:<id>   the state hash: `seen` and `hb` (receive time and fields of the newest heartbeat
//             applied), `hf` (fingerprint of those fields), `pg` (receive time of the newest
//             heartbeat Postgres holds), `fp`/`fa` (fingerprint of the fields Postgres holds, and
//             of which heartbeat; '' = unknown), `mid` (machine id), `iv` (the instance's
//             interval, below).
// and the sorted sets hbdue: instance id -> when its newest heartbeat is due in Postgres, and hbdl:
// instance id -> when its heartbeat key expires (its silence time: the sweep's candidates).
//
// A batch's heartbeat-only update of an instance whose ids this worker knows is *skipped* (no
// Postgres write) when, atomically in one script: its heartbeat key exists (so its light is not
// red for silence, and this heartbeat cannot change its colour) and its fingerprint equals the one
// Postgres holds (no field changes). A skipped heartbeat extends the key (not its silence time in
// hbdl, which the sweep's candidate read moves up to the key's expiry when it comes due), becomes the hash's newest if it is, and puts the instance in hbdue at `pg + interval` (unless it
// is there earlier; a claim moved forward may be written twice, which is harmless).
// Everything else goes to Postgres at once, as before (identity, changed fields, status, warnings,
// a silent instance coming back) and records afterwards what Postgres holds.
//
// The flusher (every worker, HeartbeatFlusher) writes what is due: the newest heartbeat of each
// instance at most `interval` (PG_HEARTBEAT_INTERVAL_S, 7,200 s by default) after the previous
// Postgres write, with the same newest-wins rules as the ingest upsert (both statements in
// lib/store/instances.ts). So Postgres's last_heartbeat_at is at most `postgresLagMs` behind
// (interval + a flush tick + a lease + a margin), which may be far past the instance's deadline:
// nothing judges silence from Postgres alone. The heartbeat key (expiring at the instance's first
// change of colour under its rule as this worker last read it: from the upsert or the id lookup;
// dropped when the api hints that the customer's rules changed, at most ID_TTL_MS old when a hint
// is lost) drives the expiry listener; its expiry time, kept in hbdl (or an earlier one), is the
// sweep's candidate list for silence; and the stored recheck times add `postgresLagMs` to a time a heartbeat moves
// (lib/domain/traffic-light.ts recheckSql), so a live instance is written (and judged) by the
// flusher before its stale Postgres deadline makes it a candidate. The sweep and the expiry
// listener drop an instance's heartbeat key and read the receive time of its waiting heartbeat
// before they judge it (`waiting`), and the judgement takes that heartbeat as if written, so it
// sees the newest heartbeat, no heartbeat is skipped after its instance turned late or red, and
// nothing is written at the moment of silence (the flusher writes it when due). A worker's stale
// copy of a rule costs a judgement, never a change recorded wrongly. The api shows the stored colour and merges the hash into what
// it shows (lib/store/live-heartbeats.ts): times exact to the millisecond.
//
// In a Redis Cluster each instance's keys carry its group's hash tag, and every group has a due set
// of its own (lib/infra/redis.ts): each script call is for one group, so it names keys of one slot
// only, including the keys the scripts build from a group's prefix.
import { LRUCache } from 'lru-cache';
import { byGroup, chunks, luaCommand, primaries, redisKeys, type Redis } from '../lib/infra/redis.js';
import { withTx, type Pool, type PoolClient } from '../lib/infra/postgres.js';
import type { Logger } from '../lib/infra/log.js';
import { heartbeatFields, fingerprint, encodeFields, decodeFields, readLatest, type HeartbeatFields } from '../lib/store/live-heartbeats.js';
import { findInstanceIds, lockInstances, writeHeartbeats } from '../lib/store/instances.js';
import { advanceMachinesLastSeen } from '../lib/store/machines.js';
import type { InstanceUpdate } from './reports.js';
import type { ReportLights } from './traffic-light.js';
import { NO_CHANGES, type RecordedChanges } from '../lib/store/light-events.js';

export interface Resolved {
  machineId: string;
  instanceId: string;
  /** The instance's rule as last read (lib/store/timeout-rules.ts); null or absent: the defaults. */
  timeoutS?: number | null;
  latePercent?: number | null;
}

/** A cached id (and rule) is read again after this long, so a changed rule reaches every worker. */
const ID_TTL_MS = 10 * 60_000;

/** Instances per script call. */
const CHUNK = 1000;
/**
 * Silence entries one candidate read looks at in a script call (each a PEXPIRETIME and maybe a
 * ZADD: a few ms of Redis), and in all before it returns without candidates (the sweep's next
 * round or run goes on).
 */
const SILENCE_READ_BUDGET = 5000;
const SILENCE_READ_MAX = 1_000_000;

/**
 * KEYS: hbdue, hbdl, then per instance its state hash and heartbeat key.
 * ARGV: interval ms (unused: each instance has its own), keep ms (state outlives the heartbeat key
 *       by this), then per instance receive time, fingerprint, fields (JSON), key expiry (ms),
 *       instance id, the instance's interval ms.
 * Returns per instance 1 (skipped: Postgres holds its fields, the key is extended) or 0.
 * A skip leaves the instance's silence time in hbdl where it was (earlier than the key's expiry,
 * never later): the sweep's candidate read (DUE_SILENCES) moves it up to the key's expiry when it
 * comes due while the key lives on, once per timeout rather than a sorted-set move per heartbeat.
 */
const SKIP = `
local keep = tonumber(ARGV[2])
local out = {}
local n = (#KEYS - 2) / 2
for i = 1, n do
  local hs = KEYS[2 * i + 1]
  local hb = KEYS[2 * i + 2]
  local a = 2 + (i - 1) * 6
  local interval = tonumber(ARGV[a + 6])
  local at = tonumber(ARGV[a + 1])
  local fp = ARGV[a + 2]
  out[i] = 0
  if redis.call('EXISTS', hb) == 1 then
    local st = redis.call('HMGET', hs, 'fp', 'pg', 'seen')
    if st[1] == fp and st[2] then
      out[i] = 1
      local exp = tonumber(ARGV[a + 4])
      redis.call('PEXPIREAT', hb, exp, 'GT')
      local seen = tonumber(st[3]) or 0
      if at > seen then
        redis.call('HSET', hs, 'seen', at, 'hb', ARGV[a + 3], 'hf', fp, 'iv', interval)
        redis.call('PEXPIREAT', hs, exp + keep, 'GT')
      end
      local pg = tonumber(st[2])
      if at > pg then redis.call('ZADD', KEYS[1], 'LT', pg + interval, ARGV[a + 5]) end
    end
  end
end
return out
`;

/**
 * After a Postgres write. KEYS: hbdue, hbdl, then per instance its state hash and heartbeat key.
 * ARGV: now ms, keep ms, record state (1/0), then per instance receive time, fingerprint, fields,
 *       key expiry, instance id, customer id, machine id, the receive time of the heartbeat
 *       Postgres holds after the write (its last_heartbeat_at), and the instance's interval ms.
 */
const WRITTEN = `
local now = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local record = ARGV[3] == '1'
local n = (#KEYS - 2) / 2
for i = 1, n do
  local hs = KEYS[2 * i + 1]
  local hb = KEYS[2 * i + 2]
  local a = 3 + (i - 1) * 9
  local at = tonumber(ARGV[a + 1])
  local fp = ARGV[a + 2]
  local exp = tonumber(ARGV[a + 4])
  local id = ARGV[a + 5]
  local pgAt = tonumber(ARGV[a + 8])
  if exp > now then
    if not redis.call('SET', hb, ARGV[a + 6], 'PXAT', exp, 'NX') then
      redis.call('PEXPIREAT', hb, exp, 'GT')
    end
  end
  -- Past already (a heartbeat applied after its own first change): due at once for the sweep.
  redis.call('ZADD', KEYS[2], 'GT', exp, id)
  if record then
    local st = redis.call('HMGET', hs, 'pg', 'fa', 'seen', 'hf')
    local pg = tonumber(st[1]) or 0
    local fa = tonumber(st[2]) or 0
    local seen = tonumber(st[3]) or 0
    if pgAt > pg then redis.call('HSET', hs, 'pg', pgAt) end
    if pgAt == at and at >= fa then
      redis.call('HSET', hs, 'fp', fp, 'fa', at)
    elseif pgAt > at and pgAt > fa then
      redis.call('HSET', hs, 'fp', '', 'fa', pgAt)
    end
    redis.call('HSET', hs, 'mid', ARGV[a + 7], 'iv', ARGV[a + 9])
    if at >= seen then
      redis.call('HSET', hs, 'seen', at, 'hb', ARGV[a + 3], 'hf', fp)
      if pgAt >= at then redis.call('ZREM', KEYS[1], id) end
    elseif st[4] ~= fp then
      redis.call('HSET', hs, 'fp', '')
      redis.call('ZADD', KEYS[1], now, id)
    end
    local ttl = redis.call('PEXPIRETIME', hs)
    local until_ = math.max(exp, seen + (exp - at)) + keep
    if ttl < until_ then redis.call('PEXPIREAT', hs, until_) end
  end
end
return n
`;

/**
 * Claims instances due in Postgres. KEYS: hbdue. ARGV: now, lease until, limit, state-hash prefix.
 * Returns [id, seen, fields, machine id, fingerprint] of each claimed one; drops members with
 * nothing to write.
 */
const CLAIM = `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local st = redis.call('HMGET', ARGV[4] .. id, 'seen', 'pg', 'hb', 'mid', 'hf')
  if st[1] and st[2] and st[3] and st[4] and tonumber(st[1]) > tonumber(st[2]) then
    redis.call('ZADD', KEYS[1], ARGV[2], id)
    out[#out + 1] = { id, st[1], st[3], st[4], st[5] or '' }
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
`;

/**
 * After the flusher's write. KEYS: hbdue, hbdl. ARGV: interval (where the hash names none of its own: `iv`), state-hash prefix, heartbeat-key prefix,
 * then per instance: id, receive time written, its fingerprint, Postgres's last heartbeat time
 * after the write (-1: Postgres has no such instance; its keys go, so the next heartbeat is
 * written to Postgres and creates it again).
 */
const FLUSHED = `
local interval = tonumber(ARGV[1])
local n = 0
for i = 4, #ARGV, 4 do
  local id = ARGV[i]
  local at = tonumber(ARGV[i + 1])
  local pgAt = tonumber(ARGV[i + 3])
  local hs = ARGV[2] .. id
  local st = redis.call('HMGET', hs, 'pg', 'fa', 'seen', 'iv')
  local iv = tonumber(st[4]) or interval
  if pgAt < 0 then
    redis.call('DEL', hs, ARGV[3] .. id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
  elseif st[3] then
    local pg = math.max(tonumber(st[1]) or 0, pgAt)
    local fa = tonumber(st[2]) or 0
    redis.call('HSET', hs, 'pg', pg)
    if pgAt == at and at >= fa then
      redis.call('HSET', hs, 'fp', ARGV[i + 2], 'fa', at)
    elseif pgAt > fa then
      redis.call('HSET', hs, 'fp', '', 'fa', pgAt)
    end
    if tonumber(st[3]) > pg then
      redis.call('ZADD', KEYS[1], pg + iv, id)
    else
      redis.call('ZREM', KEYS[1], id)
    end
  else
    redis.call('ZREM', KEYS[1], id)
  end
  n = n + 1
end
return n
`;

/**
 * Silences judged. KEYS: hbdl. ARGV: the horizon they were judged at (ms), how many ids follow,
 * the ids, then pairs of silence time and id. Drops each id's entry if it is at most the horizon
 * (a heartbeat that came after the judgement moved it later, and it stays), then sets the pairs:
 * one script, so a failure never leaves an instance settled without its new time. (Out of memory,
 * Redis refuses a script's first write that needs memory but lets a script that has written go
 * on; the drops come first, so the script is applied whole or refused whole:
 * test/servers/light-redis-refusal.test.ts.)
 */
const SETTLED = `
local h = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
for i = 3, n + 2 do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) <= h then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
for i = n + 3, #ARGV, 2 do redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 0
`;

/**
 * The sweep's silence candidates of one group. KEYS: hbdl. ARGV: horizon ms, limit, heartbeat-key
 * prefix, how many entries at most to look at. Walks hbdl up to the horizon, earliest first: an
 * entry whose heartbeat key still exists and expires after the horizon (skipped heartbeats extended
 * the key, not the entry) is moved to the key's expiry and is no candidate; every other one (key
 * gone, expiring by the horizon, or without an expiry) is. Returns [candidates, 1 if entries up to
 * the horizon were left unread, else 0].
 */
const DUE_SILENCES = `
local h = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[4])
local out = {}
local looked = 0
-- Candidates stay in hbdl (settled after their judgement) and come first in it, so the entries
-- not yet read start at offset #out.
while #out < limit and looked < budget do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', h, 'LIMIT', #out, math.min(limit - #out, budget - looked))
  if #ids == 0 then return { out, 0 } end
  for _, id in ipairs(ids) do
    looked = looked + 1
    local exp = redis.call('PEXPIRETIME', ARGV[3] .. id)
    if exp > h then redis.call('ZADD', KEYS[1], exp, id) else out[#out + 1] = id end
  end
end
local left = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', h, 'LIMIT', #out, 1)
return { out, #left > 0 and 1 or 0 }
`;

/**
 * Before the expiry listener or the sweep judges silence. KEYS: hbdue of the group (it names the
 * slot; unchanged). ARGV: state-hash prefix, heartbeat-key prefix, then instance ids. Drops each
 * one's heartbeat key (so from now on every heartbeat of it reaches Postgres at once: none is
 * skipped while it is judged, or after it turned late or red), then returns [id, receive time] of
 * each whose newest heartbeat Postgres lacks (it waits for the flusher, which writes it when due).
 * In one script, so a heartbeat skipped just before the drop is among those returned.
 */
const WAITING = `
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  redis.call('DEL', ARGV[2] .. id)
  local st = redis.call('HMGET', ARGV[1] .. id, 'seen', 'pg')
  if st[1] and st[2] and tonumber(st[1]) > tonumber(st[2]) then out[#out + 1] = { id, st[1] } end
end
return out
`;

const skipScript = luaCommand<number[]>('heartbeatSkip', SKIP);
const waitingScript = luaCommand<[string, string][]>('heartbeatWaiting', WAITING);
const dueSilencesScript = luaCommand<[string[], number]>('heartbeatDueSilences', DUE_SILENCES);
const settledScript = luaCommand<number>('heartbeatSilenceSettled', SETTLED);
const writtenScript = luaCommand<number>('heartbeatWritten', WRITTEN);
const claimScript = luaCommand<[string, string, string, string, string][]>('heartbeatClaim', CLAIM);
const flushedScript = luaCommand<number>('heartbeatFlushed', FLUSHED);

export interface HeartbeatStateOptions {
  /** HEARTBEAT_TIMEOUT_S, ms: the timeout of an instance without a rule. */
  heartbeatTimeoutMs: number;
  /** HEARTBEAT_LATE_PERCENT: the late share of an instance without a rule (0: none). */
  latePercent?: number;
  /** PG_HEARTBEAT_INTERVAL_S as configured, ms (0: every heartbeat is written to Postgres). */
  pgIntervalMs: number;
  /** Instances whose ids a worker keeps (WORKER_ID_CACHE). */
  idCacheSize: number;
  /**
   * Reads the ids of instances not in the cache (a worker that started, or a cache smaller than the
   * fleet), so a heartbeat of a known instance skips Postgres even then: a read, not a write.
   * Without it, a miss is written to Postgres (and its ids cached).
   */
  lookupIds?: (updates: InstanceUpdate[]) => Promise<Map<string, Resolved>>;
  /**
   * REDIS_WAIT_REPLICAS: a skipped heartbeat lives only in Redis until the flusher writes it, so
   * before the batch is acknowledged this many replicas of every primary must hold it (WAIT).
   * Replication is otherwise asynchronous: a primary that dies takes its last writes with it.
   */
  waitReplicas?: number;
  /**
   * Told when WAIT found fewer replicas than asked in time (a replica down or behind): the batch
   * goes on, and that primary is not waited for during the next 10 s.
   */
  onUnreplicated?: (node: string, got: number) => void;
}

/**
 * How long a WAIT for the replicas may take before the batch goes on without them (a replica
 * that keeps up answers in well under a millisecond on one host, a few across zones).
 */
const WAIT_MS = 250;
/** A primary whose replicas did not answer a WAIT in time is not waited for again for this long (no stall per batch while a replica is missing). */
const UNREPLICATED_PAUSE_MS = 10_000;

/** Ids of existing instances by instance key (customer|machine|software): one read for many. */
export function lookupIdsIn(pool: Pool): (updates: InstanceUpdate[]) => Promise<Map<string, Resolved>> {
  return async (updates) => {
    const out = new Map<string, Resolved>();
    if (updates.length === 0) return out;
    const rows = await findInstanceIds(
      pool,
      updates.map((u) => u.customerId),
      updates.map((u) => u.machine),
      updates.map((u) => u.software),
    );
    for (const row of rows) {
      out.set(`${row.customer_id}|${row.slug}|${row.software}`, { machineId: row.machine_id, instanceId: row.instance_id, timeoutS: row.timeout_s, latePercent: row.late_percent });
    }
    return out;
  };
}

/**
 * The interval in force: as configured (0: every heartbeat is written to Postgres). Not bounded by
 * the timeout: silence is judged from Redis's times (the top of this file).
 */
export function effectiveIntervalMs(o: Pick<HeartbeatStateOptions, 'pgIntervalMs'>): number {
  return Math.max(0, o.pgIntervalMs);
}

/**
 * An instance's times under its rule (ms): its timeout, and when a silence first changes its
 * colour (its late time where it has one, else the timeout): when its heartbeat key expires.
 */
export function instanceTimes(o: Pick<HeartbeatStateOptions, 'heartbeatTimeoutMs' | 'latePercent'>, id: Pick<Resolved, 'timeoutS' | 'latePercent'>) {
  const timeoutMs = id.timeoutS != null ? id.timeoutS * 1000 : o.heartbeatTimeoutMs;
  const late = id.latePercent ?? o.latePercent ?? 0;
  const firstChangeMs = late > 0 ? Math.floor((timeoutMs * late) / 100) : timeoutMs;
  return { timeoutMs, firstChangeMs };
}

/** A heartbeat-only update with its fields, as the scripts take it. */
interface Prepared {
  u: InstanceUpdate;
  f: HeartbeatFields;
  fp: string;
  json: string;
}

export class HeartbeatState {
  readonly intervalMs: number;
  /** Flush tick: a tenth of the interval, between 50 ms and 1 s. */
  readonly tickMs: number;
  /** A claimed flush not finished within this (its worker died) is claimed again. */
  readonly leaseMs: number;
  /** The state hash outlives the heartbeat key by this. */
  private readonly keepMs: number;
  private readonly keys: ReturnType<typeof redisKeys>;
  /** Instance key (customer|machine|software) -> ids and rule, from Postgres writes and lookups. */
  private readonly ids: LRUCache<string, Resolved & { gen: number }>;
  /** Customer id -> how often its rules changed since this worker started (a cached copy of an older generation is a miss). */
  private readonly ruleGen = new Map<string, number>();
  /** Primary (host:port) -> until when it is not waited for (its replicas did not answer a WAIT in time). */
  private readonly unreplicatedUntil = new Map<string, number>();
  /** Heartbeat-only updates that skipped Postgres, and heartbeat updates written (metrics). */
  readonly counts = { skipped: 0, written: 0, lookedUp: 0 };

  constructor(
    readonly redis: Redis,
    readonly prefix: string,
    private readonly o: HeartbeatStateOptions,
    /** The key layout: the connection's (default), or a cluster's on one Redis (tests). */
    layout?: { isCluster: boolean },
  ) {
    this.intervalMs = effectiveIntervalMs(o);
    this.tickMs = Math.min(1000, Math.max(50, Math.floor(this.intervalMs / 10)));
    this.leaseMs = Math.min(30_000, Math.max(1000, Math.floor(o.heartbeatTimeoutMs / 10)));
    this.keepMs = this.intervalMs + 60_000;
    this.keys = redisKeys(prefix, layout ?? redis);
    this.ids = new LRUCache({ max: Math.max(1, o.idCacheSize), ttl: ID_TTL_MS });
  }

  get enabled(): boolean {
    return this.intervalMs > 0;
  }

  /**
   * How far Postgres's last heartbeat of an instance may lag its newest one: the interval, a flush
   * tick, a lease (a flushing worker that died) and 30 s for a slow write. 0 when every heartbeat
   * is written at once. The stored recheck times add it (LightParams.recheckSlackS).
   */
  get postgresLagMs(): number {
    return this.enabled ? this.intervalMs + this.tickMs + this.leaseMs + 30_000 : 0;
  }

  /** The customer's timeout rules changed (lib/store/timeout-rules.ts TimeoutRuleHints): its cached copies are stale. O(1). */
  rulesChanged(customerId: string): void {
    this.ruleGen.set(customerId, (this.ruleGen.get(customerId) ?? 0) + 1);
  }

  private cached(u: InstanceUpdate): Resolved | undefined {
    const hit = this.ids.get(u.key);
    if (!hit || hit.gen !== (this.ruleGen.get(u.customerId) ?? 0)) return undefined;
    const { gen: _, ...id } = hit;
    return id;
  }

  private remember(u: InstanceUpdate, id: Resolved, gen = this.ruleGen.get(u.customerId) ?? 0): void {
    this.ids.set(u.key, { ...id, gen });
  }

  /**
   * An old heartbeat applied late (a backlog longer than the instance's first change of colour)
   * goes the careful way (Postgres at once), like any heartbeat of an instance without an interval.
   */
  private late(u: InstanceUpdate, id: Resolved, now: number): boolean {
    return u.heartbeat!.at + instanceTimes(this.o, id).firstChangeMs <= now;
  }

  private prepare(u: InstanceUpdate): Prepared {
    const h = u.heartbeat!;
    const f = heartbeatFields(h.at, h.agentTs, h.skew, h.body);
    return { u, f, fp: fingerprint(f), json: encodeFields(f) };
  }

  /**
   * The updates whose Postgres write can wait (see the top of this file), with their ids; the
   * caller writes the others. Redis failing fails the batch (it is retried), like any write.
   */
  async skip(updates: Iterable<InstanceUpdate>, now = Date.now()): Promise<Map<string, Resolved>> {
    const out = new Map<string, Resolved>();
    if (!this.enabled) return out;
    const candidates: { p: Prepared; id: Resolved }[] = [];
    const misses: InstanceUpdate[] = [];
    for (const u of updates) {
      if (!u.onlyHeartbeats || !u.heartbeat) continue;
      const id = this.cached(u);
      if (id) {
        if (!this.late(u, id, now)) candidates.push({ p: this.prepare(u), id });
      } else misses.push(u);
    }
    if (misses.length > 0 && this.o.lookupIds) {
      // The generations before the read: a change hinted while it runs makes these copies stale.
      const gens = new Map(misses.map((u) => [u.customerId, this.ruleGen.get(u.customerId) ?? 0]));
      const found = await this.o.lookupIds(misses);
      this.counts.lookedUp += found.size;
      for (const u of misses) {
        const id = found.get(u.key);
        if (!id) continue;
        this.remember(u, id, gens.get(u.customerId));
        if (!this.late(u, id, now)) candidates.push({ p: this.prepare(u), id });
      }
    }
    const calls: Promise<void>[] = [];
    for (const [g, inGroup] of byGroup(candidates, this.keys.groups, (c) => c.id.instanceId))
      for (let i = 0; i < inGroup.length; i += CHUNK) {
        const part = inGroup.slice(i, i + CHUNK);
        const args: (string | number)[] = [this.keys.heartbeatDueOf(g), this.keys.heartbeatSilenceOf(g)];
        for (const c of part) args.push(this.keys.heartbeatState(c.id.instanceId), this.keys.heartbeat(c.id.instanceId));
        args.push(this.intervalMs, this.keepMs);
        for (const { p, id } of part) args.push(p.f.at, p.fp, p.json, p.f.at + instanceTimes(this.o, id).firstChangeMs, id.instanceId, this.intervalMs);
        calls.push(
          skipScript(this.redis, 2 + 2 * part.length, ...args).then((res) => {
            part.forEach((c, j) => {
              if (res[j] === 1) out.set(c.p.u.key, c.id);
            });
          }),
        );
      }
    await Promise.all(calls);
    if (out.size > 0) await this.replicated();
    this.counts.skipped += out.size;
    return out;
  }

  /**
   * After the Postgres commit of `written` (with the receive time of the heartbeat Postgres holds
   * for each, `pgAt`): heartbeat keys, the state hash, and the ids for later skips.
   */
  async written(written: { u: InstanceUpdate; id: Resolved; pgAt: number | null }[], now = Date.now()): Promise<void> {
    const withHb: { p: Prepared; id: Resolved; pgAt: number }[] = [];
    for (const w of written) {
      this.remember(w.u, w.id);
      if (w.u.heartbeat) withHb.push({ p: this.prepare(w.u), id: w.id, pgAt: w.pgAt ?? w.u.heartbeat.at });
    }
    this.counts.written += withHb.length;
    const calls: Promise<number>[] = [];
    for (const [g, inGroup] of byGroup(withHb, this.keys.groups, (c) => c.id.instanceId))
      for (let i = 0; i < inGroup.length; i += CHUNK) {
        const part = inGroup.slice(i, i + CHUNK);
        const args: (string | number)[] = [this.keys.heartbeatDueOf(g), this.keys.heartbeatSilenceOf(g)];
        for (const c of part) args.push(this.keys.heartbeatState(c.id.instanceId), this.keys.heartbeat(c.id.instanceId));
        args.push(now, this.keepMs, this.enabled ? 1 : 0);
        for (const { p, id, pgAt } of part)
          args.push(p.f.at, p.fp, p.json, p.f.at + instanceTimes(this.o, id).firstChangeMs, id.instanceId, p.u.customerId, id.machineId, pgAt, this.intervalMs);
        calls.push(writtenScript(this.redis, 2 + 2 * part.length, ...args));
      }
    await Promise.all(calls);
  }

  /**
   * In the ingest transaction of `c`, after the upsert of `written` (their rows locked) and before
   * their colour is judged: Postgres gets the newest heartbeat Redis holds of each, where it is
   * newer than the one Postgres has (`pgAt`, moved forward here). A report without a heartbeat
   * (status, diagnostics, metrics), or with an older one, would otherwise be judged from a
   * heartbeat up to PG_HEARTBEAT_INTERVAL_S old: silent, and recorded red, wrongly.
   */
  async catchUp(c: PoolClient, written: Map<string, Resolved & { pgAt: number | null }>): Promise<void> {
    if (!this.enabled || written.size === 0) return;
    const byId = new Map<string, Resolved & { pgAt: number | null }>();
    for (const w of written.values()) byId.set(w.instanceId, w);
    const latest = await readLatest(this.redis, this.prefix, [...byId.keys()], { isCluster: this.keys.cluster });
    const behind = [...latest].filter(([id, f]) => f.at > (byId.get(id)!.pgAt ?? 0));
    if (behind.length === 0) return;
    const rows = await writeHeartbeats(
      c,
      behind.map(([id]) => id),
      behind.map(([, f]) => f),
    );
    for (const r of rows) {
      const w = byId.get(r.id);
      if (w) w.pgAt = Math.max(w.pgAt ?? 0, Number(r.pg_ms));
    }
  }

  /**
   * Waits until REDIS_WAIT_REPLICAS replicas hold this connection's writes: on each primary of a
   * cluster (WAIT counts the writes of the connection it is sent on, and ioredis sends each node's
   * commands on one connection), or on the one Redis. A primary that fails meanwhile fails the
   * batch, which is retried. Too few replicas in WAIT_MS: told, the batch goes on, and that
   * primary is not waited for during UNREPLICATED_PAUSE_MS (a replica lost must neither stop
   * ingest nor slow every batch; meanwhile the risk is the one of no WAIT at all).
   */
  private async replicated(): Promise<void> {
    const n = this.o.waitReplicas ?? 0;
    if (n <= 0) return;
    const now = Date.now();
    await Promise.all(
      primaries(this.redis).map(async (node) => {
        const name = `${node.options.host}:${node.options.port}`;
        if ((this.unreplicatedUntil.get(name) ?? 0) > now) return;
        const got = Number(await node.call('WAIT', n, WAIT_MS));
        if (got >= n) return;
        this.unreplicatedUntil.set(name, Date.now() + UNREPLICATED_PAUSE_MS);
        this.o.onUnreplicated?.(name, got);
      }),
    );
  }

  /**
   * Claims what is due: what Postgres lacks of each, about `limit` in all (a cluster's groups are
   * claimed side by side, each its share). `more`: some group had more due than its share.
   */
  async claim(limit: number, now = Date.now()): Promise<{ claimed: Claimed[]; more: boolean }> {
    const share = Math.max(1, Math.ceil(limit / this.keys.groups));
    const calls: Promise<[string, string, string, string, string][]>[] = [];
    for (let g = 0; g < this.keys.groups; g++)
      calls.push(claimScript(this.redis, 1, this.keys.heartbeatDueOf(g), now, now + this.leaseMs, share, this.keys.heartbeatStatePrefixOf(g)));
    const claimed: Claimed[] = [];
    let more = false;
    for (const rows of await Promise.all(calls)) {
      if (rows.length >= share) more = true;
      for (const [id, , json, machineId, fp] of rows) {
        const f = decodeFields(json);
        if (f) claimed.push({ instanceId: id, machineId, fields: f, fp });
      }
    }
    return { claimed, more };
  }

  /**
   * Before silence is judged (the expiry listener, the sweep): drops these instances' heartbeat
   * keys and returns the receive time (ms) of each one's newest heartbeat that Postgres lacks
   * (WAITING). The judgement takes those times as if written (lib/store/light-events.ts
   * recordLightChanges `waiting`); the heartbeats themselves stay due for the flusher, at their
   * time. Empty when heartbeats never wait (PG_HEARTBEAT_INTERVAL_S=0).
   */
  async waiting(instanceIds: string[]): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    if (!this.enabled || instanceIds.length === 0) return out;
    const calls: Promise<[string, string][]>[] = [];
    for (const [g, all] of byGroup(instanceIds, this.keys.groups, (id) => id))
      for (const some of chunks(all, CHUNK))
        calls.push(waitingScript(this.redis, 1, this.keys.heartbeatDueOf(g), this.keys.heartbeatStatePrefixOf(g), this.keys.heartbeatPrefixOf(g), ...some));
    for (const rows of await Promise.all(calls)) for (const [id, at] of rows) out.set(id, Number(at));
    return out;
  }

  /** After the flusher's commit: what Postgres now holds of each (`pgAt`: its last heartbeat time). */
  async flushed(done: { c: Claimed; pgAt: number }[]): Promise<void> {
    const calls: Promise<number>[] = [];
    for (const [g, inGroup] of byGroup(done, this.keys.groups, (d) => d.c.instanceId))
      for (let i = 0; i < inGroup.length; i += CHUNK) {
        const args: (string | number)[] = [this.keys.heartbeatDueOf(g), this.keys.heartbeatSilenceOf(g), this.intervalMs, this.keys.heartbeatStatePrefixOf(g), this.keys.heartbeatPrefixOf(g)];
        for (const { c, pgAt } of inGroup.slice(i, i + CHUNK)) args.push(c.instanceId, c.fields.at, c.fp, pgAt);
        calls.push(flushedScript(this.redis, 2, ...args));
      }
    await Promise.all(calls);
  }

  /**
   * Instances whose heartbeat key expires at `horizonMs` or before (their silence may change their
   * colour by then): about `limit`, a cluster's groups side by side, earliest first in each.
   * `more`: some group had more than its share.
   */
  async dueSilences(horizonMs: number, limit: number): Promise<{ ids: string[]; more: boolean }> {
    const share = Math.max(1, Math.ceil(limit / this.keys.groups));
    const budget = Math.max(share, SILENCE_READ_BUDGET);
    const all = await Promise.all(
      this.keys.heartbeatSilences.map(async (k, g) => {
        // Entries of live instances (moved up, no candidates) may fill a script call's budget: the
        // next call goes on where it stopped, each call short, until candidates or the end.
        for (let read = 0; ; read += budget) {
          const [ids, more] = await dueSilencesScript(this.redis, 1, k, horizonMs, share, this.keys.heartbeatPrefixOf(g), budget);
          if (ids.length > 0 || more === 0 || read >= SILENCE_READ_MAX) return { ids, more: more === 1 };
        }
      }),
    );
    return { ids: all.flatMap((x) => x.ids), more: all.some((x) => x.more) };
  }

  /**
   * These instances were judged at `horizonMs`: their silence entries up to it go (later ones
   * stay), and `times` (as the judgement saw them: lib/store/instances.ts silenceTimes, with the
   * waiting heartbeats' times) replace what Redis holds, earlier or later (a timeout rule
   * shortened since the heartbeat key was set: Postgres has the rule). A heartbeat written between
   * the judgement and this (its key was dropped before the judgement, so none is skipped) may be
   * set back to an older time: its instance is then judged early once, unchanged, and gets the
   * newer time. One script per group and chunk.
   */
  async settleSilences(ids: string[], horizonMs: number, times: { id: string; at: number }[] = []): Promise<void> {
    if (ids.length === 0 && times.length === 0) return;
    const idsOf = new Map<number, string[]>(byGroup(ids, this.keys.groups, (id) => id));
    const timesOf = new Map<number, { id: string; at: number }[]>(byGroup(times, this.keys.groups, (x) => x.id));
    const calls: Promise<number>[] = [];
    for (const g of new Set([...idsOf.keys(), ...timesOf.keys()])) {
      const someIds = idsOf.get(g) ?? [];
      const someTimes = timesOf.get(g) ?? [];
      for (let i = 0; i < Math.max(someIds.length, someTimes.length); i += CHUNK) {
        const part = someIds.slice(i, i + CHUNK);
        const pairs = someTimes.slice(i, i + CHUNK).flatMap((x) => [x.at, x.id]);
        calls.push(settledScript(this.redis, 1, this.keys.heartbeatSilenceOf(g), horizonMs, part.length, ...part, ...pairs));
      }
    }
    await Promise.all(calls);
  }

  /** Instances whose heartbeats wait for Postgres (a gauge). */
  async dueCount(): Promise<number> {
    const counts = await Promise.all(this.keys.heartbeatDues.map((k) => this.redis.zcard(k)));
    return counts.reduce((a, b) => a + b, 0);
  }
}

export interface Claimed {
  instanceId: string;
  machineId: string;
  fields: HeartbeatFields;
  fp: string;
}

/**
 * The flusher: every tick, the heartbeats due in Postgres, written with the ingest upsert's
 * newest-wins rules (and the colour judged again in the same transaction, though a flushed
 * heartbeat cannot change it: its key existed). Every worker runs one; claims are leased, so two
 * never write the same instance at once (and writing one twice is harmless).
 */
export class HeartbeatFlusher {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;
  private stopped = false;

  constructor(
    private readonly pool: Pool,
    private readonly state: HeartbeatState,
    private readonly lights: ReportLights | undefined,
    private readonly log: Logger,
    private readonly onFlushed: (n: number) => void = () => {},
    private readonly batch = 1000,
  ) {}

  start(): void {
    if (!this.state.enabled || this.timer) return;
    this.timer = setInterval(() => {
      if (this.running || this.stopped) return;
      this.running = this.flushDue()
        .catch((e: unknown) => this.log.warn({ err: e }, 'heartbeat flush failed; retried at the next tick'))
        .finally(() => (this.running = null));
    }, this.state.tickMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** Writes everything due now; returns how many instances. */
  async flushDue(): Promise<number> {
    let total = 0;
    for (;;) {
      const { claimed, more } = await this.state.claim(this.batch);
      if (claimed.length) await this.write(claimed);
      total += claimed.length;
      if (!more || this.stopped) return total;
    }
  }

  private async write(claimed: Claimed[]): Promise<void> {
    const f = claimed.map((c) => c.fields);
    let changes: RecordedChanges = NO_CHANGES;
    const pgAt = await withTx(this.pool, async (c) => {
      const ids = claimed.map((x) => x.instanceId);
      // Lock order of the ingest upsert (machine, software), so the two never deadlock.
      await lockInstances(c, ids);
      const rows = await writeHeartbeats(c, ids, f);
      if (this.lights) changes = await this.lights.inTransaction(c, ids);
      return new Map(rows.map((x) => [x.id, Number(x.pg_ms)]));
    });
    const lightsDelivered = this.lights?.afterCommit(changes);
    // Machines' last_seen_at in a statement of its own (never two row locks of different tables at
    // once here), in the ingest upsert's lock order.
    const latest = new Map<string, number>();
    for (const c of claimed) latest.set(c.machineId, Math.max(latest.get(c.machineId) ?? 0, c.fields.at));
    await advanceMachinesLastSeen(this.pool, [...latest.keys()], [...latest.values()]);
    await this.state.flushed(claimed.map((c) => ({ c, pgAt: pgAt.get(c.instanceId) ?? -1 })));
    await lightsDelivered;
    this.onFlushed(claimed.length);
  }
}
