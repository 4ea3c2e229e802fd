// BullMQ: every queue name in one place, one key prefix, one shape for scheduled jobs.
//
// Keys live under `${REDIS_PREFIX}bull` so that two deployments (or two test files) on one Redis
// never see each other's jobs. BullMQ refuses ':' in queue names, so the Redis prefix goes into
// BullMQ's own `prefix` option rather than into the name.
//
// A scheduled job runs every `everyMs` on one worker replica: every replica upserts the same job
// scheduler (idempotent) and runs a BullMQ worker for its queue, and BullMQ hands each run to one of
// them. A run that fails is logged and simply happens again at the next interval; runs are
// idempotent (each job's own module says why).
import { Queue, Worker } from 'bullmq';
import { isCluster, type Redis } from '../lib/infra/redis.js';
import type { Logger } from '../lib/infra/log.js';

export const QUEUES = {
  /** The traffic-light sweep (workers/light-sweep.ts). */
  lightSweep: 'light-sweep',
  /** Device counts against licence limits (lib/store/licences.ts reconcileLicences). */
  licenceSweep: 'licence-sweep',
  /** Expiry of artifact uploads (workers/artifact-expiry.ts). */
  artifactExpiry: 'artifact-expiry',
  /** Overdue agent commands (workers/command-expiry.ts). */
  commandExpiry: 'command-expiry',
  /** Instances per traffic-light colour, for the metric fleet_worker_instances (workers/light-census.ts). */
  lightCensus: 'light-census',
  /** Data retention: Postgres rows and ClickHouse partitions past their age (workers/retention.ts). */
  retention: 'retention',
  /** E-mail digests of traffic-light changes (workers/mail-digest.ts). */
  mailDigest: 'mail-digest',
  /** Offboarding: finishes the deletion of customers marked `deleting` (workers/offboarding.ts). */
  offboarding: 'offboarding',
  /** Webhook deliveries of traffic-light changes, retried with exponential backoff (workers/webhooks.ts). */
  webhooks: 'light-webhooks',
  /** Maintenance windows: occurrences extended to 8 days ahead, those ended 8 days ago dropped (lib/store/maintenance.ts refreshOccurrences). */
  maintenance: 'maintenance-occurrences',
} as const;
export type QueueName = (typeof QUEUES)[keyof typeof QUEUES];

/**
 * BullMQ's key prefix. In a Redis Cluster it is a hash tag, as BullMQ requires (its scripts name
 * several keys of a queue): every queue in one slot.
 */
export function bullPrefix(redisPrefix: string, layout: { isCluster: boolean }): string {
  return isCluster(layout) ? `{${redisPrefix}bull}` : `${redisPrefix}bull`;
}

export interface JobContext {
  /** A connection made with createRedis(url, { bullmq: true }); BullMQ duplicates it for blocking reads. */
  connection: Redis;
  redisPrefix: string;
  log: Logger;
}

export interface ScheduledJob {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** What a run did, in counts; logged when any is above zero. */
export type RunResult = Record<string, number>;

export function scheduledJob(ctx: JobContext, o: { queue: QueueName; everyMs: number; run: () => Promise<RunResult>; keep?: number }): ScheduledJob {
  let queue: Queue | null = null;
  let worker: Worker | null = null;
  const log = ctx.log.child({ job: o.queue });
  return {
    async start() {
      const prefix = bullPrefix(ctx.redisPrefix, ctx.connection);
      queue = new Queue(o.queue, { connection: ctx.connection, prefix });
      queue.on('error', (e) => log.warn({ err: e }, 'job queue error'));
      await queue.upsertJobScheduler(o.queue, { every: o.everyMs }, { name: o.queue, opts: { removeOnComplete: o.keep ?? 20, removeOnFail: o.keep ?? 20 } });
      worker = new Worker(
        o.queue,
        async () => {
          const r = await o.run();
          if (Object.values(r).some((n) => n > 0)) log.info(r, 'scheduled job did work');
          return r;
        },
        { connection: ctx.connection, prefix, concurrency: 1 },
      );
      worker.on('error', (e) => log.warn({ err: e }, 'job worker error'));
      worker.on('failed', (_job, e) => log.warn({ err: e }, 'scheduled job failed; it runs again at the next interval'));
    },
    async stop() {
      await worker?.close().catch(() => {});
      await queue?.close().catch(() => {});
    },
  };
}

/**
 * Keys of the shapes before this one, removed once (idempotent): the artifact expiry kept its queue
 * under `fleet` instead of `fleet:bull`, and two jobs named their scheduler `sweep`.
 */
export async function removeLegacyJobs(ctx: JobContext): Promise<void> {
  // Those shapes were never in a cluster (it was not supported then).
  if (isCluster(ctx.connection)) return;
  const old = ctx.redisPrefix.replace(/:+$/, '') || 'fleet';
  if (old !== bullPrefix(ctx.redisPrefix, ctx.connection)) {
    const q = new Queue(QUEUES.artifactExpiry, { connection: ctx.connection, prefix: old });
    await q.obliterate({ force: true }).catch(() => {});
    await q.close();
  }
  for (const name of [QUEUES.artifactExpiry, QUEUES.commandExpiry]) {
    const q = new Queue(name, { connection: ctx.connection, prefix: bullPrefix(ctx.redisPrefix, ctx.connection) });
    await q.removeJobScheduler('sweep').catch(() => {});
    await q.close();
  }
}
