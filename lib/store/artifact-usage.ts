// The artifact bytes a customer holds, for the quota artifact_bytes (lib/store/quotas.ts):
//
//   held = stored + reserved
//   stored   = sizes of its completed artifacts (Postgres `artifact_usage`, summed by a trigger on
//              `artifacts`; every gateway keeps a copy in memory, QuotaCache, with the row's `seq`)
//   reserved = declared sizes of its uploads in progress, one entry per upload in the Redis hash
//              `<REDIS_PREFIX>quota:art:<customer id>`: field upload id, value `size|reserved_ms`
//              while the upload is open, `size|reserved_ms|seq|settled_ms` once its artifact row is
//              in Postgres and counted in `stored` from `artifact_usage.seq` = seq on.
//
// artifact-init reserves the declared size with one Lua script (`reserve`): it sums the entries
// that the caller's copy of `stored` does not already count (open ones, and settled ones whose seq
// is newer than the copy's), and adds the upload only if stored + reserved + size stays within the
// quota. Redis runs one script at a time, so inits on any number of gateway replicas cannot
// together pass the quota (no overshoot from concurrency), and a gateway's copy of `stored` that is
// a refresh behind counts a just-stored artifact as reserved instead of not at all.
//
// An entry ends: released when the init could not create its upload record (gateway) or the
// upload expired (the worker's expiry sweep, after deleting its chunks); settled by the worker
// that wrote the artifact row (after the commit); and a settled entry is removed SETTLED_KEEP_MS
// later, when every gateway's copy counts it (a gateway whose copy is older than MAX_COPY_AGE_MS
// answers 503 instead of deciding). The expiry sweep also repairs what a crash or a Redis that lost
// its data left: open uploads without an entry get one back, complete ones whose row exists are
// settled, and entries whose upload is gone are removed (workers/artifact-expiry.ts).
import type { Redis } from '../infra/redis.js';
import { isCluster, luaCommand } from '../infra/redis.js';

/** A settled entry stays this long (every gateway's copy of `stored` has counted it by then). */
export const SETTLED_KEEP_MS = 10 * 60_000;
/** A gateway whose copy of quotas and stored bytes is older than this refuses to decide (503). */
export const MAX_COPY_AGE_MS = 5 * 60_000;
/** An open entry whose upload record does not exist is removed after this (an init that died between reserve and create). */
export const ORPHAN_AFTER_MS = 10 * 60_000;

/**
 * The scripts name a customer's hash and the customers set together: in a Redis Cluster all of
 * them carry one hash tag (one slot; artifact reservations are few).
 */
export const usageKeys = (prefix: string, layout: { isCluster: boolean }) => {
  const tag = isCluster(layout) ? '{art}' : '';
  return {
    /** Hash: upload id -> reservation (above). */
    reservations: (customerId: string) => `${prefix}quota:art:${tag}${customerId}`,
    /** Set: the customers with a reservations hash (the sweep's list). */
    customers: `${prefix}quota:art:${tag}customers`,
  };
};

export interface Reservation {
  size: number;
  reservedMs: number;
  /** Set once the artifact is stored: `artifact_usage.seq` from which `stored` counts it. */
  seq: number | null;
  settledMs: number | null;
}

export function parseReservation(v: string): Reservation {
  const [size, reservedMs, seq, settledMs] = v.split('|').map(Number);
  return { size: size ?? 0, reservedMs: reservedMs ?? 0, seq: seq ?? null, settledMs: settledMs ?? null };
}

/** Counted as reserved by a reader whose copy of `stored` is at `knownSeq`. */
export const countsAsReserved = (r: Reservation, knownSeq: number) => r.seq === null || r.seq > knownSeq;

// KEYS: reservations hash, customers set. ARGV: upload id, size, quota, stored bytes, known seq, now ms, customer id.
// Returns {status, used}: status 1 reserved now, 2 reserved before (the same upload id: a retried
// init), 0 refused; used = stored + reserved before this upload.
const reserveLua = luaCommand<[number, number]>(
  'fleetQuotaReserve',
  `
local known = tonumber(ARGV[5])
local held = 0
local vals = redis.call('HGETALL', KEYS[1])
for i = 1, #vals, 2 do
  local p = {}
  for x in string.gmatch(vals[i + 1], '[^|]+') do p[#p + 1] = tonumber(x) end
  if vals[i] == ARGV[1] then return {2, 0} end
  if p[3] == nil or p[3] > known then held = held + p[1] end
end
local used = tonumber(ARGV[4]) + held
if used + tonumber(ARGV[2]) > tonumber(ARGV[3]) then return {0, used} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[6])
redis.call('SADD', KEYS[2], ARGV[7])
return {1, used}
`,
);

// KEYS: reservations hash. ARGV: upload id, seq, now ms. An open entry becomes settled; anything else is left.
const settleLua = luaCommand<number>(
  'fleetQuotaSettle',
  `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local p = {}
for x in string.gmatch(v, '[^|]+') do p[#p + 1] = x end
if p[3] ~= nil then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], p[1] .. '|' .. p[2] .. '|' .. ARGV[2] .. '|' .. ARGV[3])
return 1
`,
);

// KEYS: reservations hash, customers set. ARGV: upload id, size, reserved ms, customer id. Puts back
// an open entry that is missing (Redis lost it); an existing one is left as it is.
const restoreLua = luaCommand<number>(
  'fleetQuotaRestore',
  `
local n = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[3])
if n == 1 then redis.call('SADD', KEYS[2], ARGV[4]) end
return n
`,
);

// KEYS: reservations hash, customers set. ARGV: customer id, upload ids. Removes the entries, and
// the customer from the set when none is left (in one step: a reserve in between would be lost from the set).
const removeLua = luaCommand<number>(
  'fleetQuotaRemove',
  `
for i = 2, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 0
`,
);

export type ReserveResult = { ok: true; fresh: boolean; used: number } | { ok: false; used: number };

export class ArtifactUsage {
  private readonly keys: ReturnType<typeof usageKeys>;

  constructor(
    private readonly redis: Redis,
    prefix: string,
  ) {
    this.keys = usageKeys(prefix, redis);
  }

  /**
   * Reserves `size` bytes for upload `uploadId` of a customer whose quota is `quota` and whose
   * stored bytes the caller knows as `stored` at `seq`. `fresh` is false when the upload had its
   * reservation already (a retried init: nothing added).
   */
  async reserve(customerId: string, uploadId: string, size: number, quota: number, stored: { bytes: number; seq: number }): Promise<ReserveResult> {
    const [status, used] = await reserveLua(this.redis, 2, this.keys.reservations(customerId), this.keys.customers, uploadId, size, quota, stored.bytes, stored.seq, Date.now(), customerId);
    if (status === 0) return { ok: false, used };
    return { ok: true, fresh: status === 1, used };
  }

  /** The upload will never hold its bytes (its record was not created, or it expired and its chunks are deleted). */
  async release(customerId: string, uploadId: string): Promise<boolean> {
    return (await this.redis.hdel(this.keys.reservations(customerId), uploadId)) === 1;
  }

  /** The upload's artifact is in Postgres and counted in `stored` from `seq` on. */
  async settle(customerId: string, uploadId: string, seq: number): Promise<boolean> {
    return (await settleLua(this.redis, 1, this.keys.reservations(customerId), uploadId, seq, Date.now())) === 1;
  }

  /** Puts back the entry of an open upload that Redis lost. True when it was missing. */
  async restore(customerId: string, uploadId: string, size: number, reservedMs: number): Promise<boolean> {
    return (await restoreLua(this.redis, 2, this.keys.reservations(customerId), this.keys.customers, uploadId, size, reservedMs, customerId)) === 1;
  }

  async entries(customerId: string): Promise<Map<string, Reservation>> {
    const all = await this.redis.hgetall(this.keys.reservations(customerId));
    return new Map(Object.entries(all).map(([id, v]) => [id, parseReservation(v)]));
  }

  /** Bytes reserved by a customer's uploads in progress, for a reader whose `stored` is at `knownSeq`. */
  async reserved(customerId: string, knownSeq: number): Promise<{ bytes: number; uploads: number }> {
    let bytes = 0;
    let uploads = 0;
    for (const r of (await this.entries(customerId)).values()) {
      if (!countsAsReserved(r, knownSeq)) continue;
      bytes += r.size;
      uploads++;
    }
    return { bytes, uploads };
  }

  async customers(): Promise<string[]> {
    return this.redis.smembers(this.keys.customers);
  }

  /** Removes entries (the sweep's clean-up); forgets the customer when none is left. */
  async remove(customerId: string, uploadIds: string[]): Promise<void> {
    await removeLua(this.redis, 2, this.keys.reservations(customerId), this.keys.customers, customerId, ...uploadIds);
  }
}
