// One worker's heartbeat path, in-process over a test stack's databases and Redis prefix: its own
// id cache (HeartbeatState), the apply-batch dependencies around it, and its flusher
// (workers/heartbeat-state.ts). For the servers tests that drive skip, flush, claim and the waiting times
// without a worker process.
import { HeartbeatState, HeartbeatFlusher, lookupIdsIn } from '../../workers/heartbeat-state.js';
import type { ApplyDeps } from '../../workers/apply-batch.js';
import type { Logger } from '../../lib/infra/log.js';
import type { TestStack } from './stack.js';

export interface HeartbeatWorker {
  deps: ApplyDeps;
  state: HeartbeatState;
  flusher: HeartbeatFlusher;
}

export function heartbeatWorker(
  s: TestStack,
  log: Logger,
  opts: {
    timeoutMs: number;
    /** PG_HEARTBEAT_INTERVAL_S, in ms. */
    intervalMs: number;
    idCacheSize: number;
    /** Look ids up in Postgres on a cache miss (as a worker does). */
    lookup?: boolean;
    /** The key layout of a Redis Cluster (hash tags by group). */
    cluster?: boolean;
    /** Instances per flusher write (its default when absent). */
    flushBatch?: number;
  },
): HeartbeatWorker {
  const prefix = s.env.REDIS_PREFIX!;
  const state = new HeartbeatState(
    s.redis,
    prefix,
    { heartbeatTimeoutMs: opts.timeoutMs, pgIntervalMs: opts.intervalMs, idCacheSize: opts.idCacheSize, ...(opts.lookup ? { lookupIds: lookupIdsIn(s.pool) } : {}) },
    opts.cluster ? { isCluster: true } : undefined,
  );
  const deps: ApplyDeps = {
    pool: s.pool,
    ch: s.ch,
    redis: s.redis,
    redisPrefix: prefix,
    heartbeats: state,
    idempotencyTtlS: 60,
    tsWindow: { pastMs: 30 * 86_400_000, futureMs: 86_400_000 },
    ackTimeoutS: 3600,
  };
  const flusher = new HeartbeatFlusher(s.pool, state, undefined, log, () => {}, opts.flushBatch);
  return { deps, state, flusher };
}
