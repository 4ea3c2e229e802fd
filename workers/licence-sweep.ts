// The licence sweep: every LICENCE_SWEEP_MS one worker (a BullMQ job scheduler, so the replicas
// do not all run it) re-checks every customer's device count against its limit
// (lib/licences.ts reconcileLicences): a grace period ends when machines age out of the 30-day
// window, and starts when a known machine comes back and the count goes over the limit.
import { Queue, Worker } from 'bullmq';
import type { Pool } from '../lib/db/postgres.js';
import type { Logger } from '../lib/log.js';
import { createRedis } from '../lib/db/redis.js';
import { reconcileLicences } from '../lib/licences.js';

const QUEUE = 'licence-sweep';

export async function startLicenceSweep(o: { redisUrl: string; redisPrefix: string; everyMs: number; pool: Pool; log: Logger }): Promise<() => Promise<void>> {
  const prefix = `${o.redisPrefix}bull`;
  const qConn = createRedis(o.redisUrl, { bullmq: true });
  const wConn = createRedis(o.redisUrl, { bullmq: true });
  for (const c of [qConn, wConn]) c.on('error', (e) => o.log.warn({ err: e }, 'licence sweep: redis error'));
  const queue = new Queue(QUEUE, { connection: qConn, prefix });
  await queue.upsertJobScheduler(QUEUE, { every: o.everyMs }, { name: 'sweep', opts: { removeOnComplete: 10, removeOnFail: 50 } });
  const worker = new Worker(
    QUEUE,
    async () => {
      const changed = await reconcileLicences(o.pool);
      if (changed) o.log.info({ changed }, 'licence sweep: grace periods started or ended');
      return changed;
    },
    { connection: wConn, prefix, concurrency: 1 },
  );
  worker.on('failed', (_job, e) => o.log.warn({ err: e }, 'licence sweep failed; it runs again at the next interval'));
  return async () => {
    await worker.close();
    await queue.close();
    await Promise.allSettled([qConn.quit(), wConn.quit()]);
  };
}
