// Expiry of artifact uploads: a BullMQ job scheduler runs `sweep` every ARTIFACT_SWEEP_MS on one of
// the worker replicas. An open upload ARTIFACT_EXPIRY_GRACE_S past its expiry loses its chunks
// (object store) and then its record (KV); a completed upload's record is forgotten once it is
// older than ARTIFACT_UPLOAD_TTL_S and its artifact row is in Postgres (the chunks stay: they are
// the artifact). Every step is idempotent, so a sweep that dies half-way is finished by the next.
//
// The queue lives under REDIS_PREFIX (BullMQ's own key prefix, since a BullMQ queue name may not
// contain ':'), so deployments and test files sharing a Redis stay apart.
import { Queue, Worker } from 'bullmq';
import type { Logger } from '../lib/log.js';
import type { Pool } from '../lib/db/postgres.js';
import { createRedis } from '../lib/db/redis.js';
import { mapLimit, type ArtifactStore } from '../lib/artifacts.js';

export const EXPIRY_QUEUE = 'artifact-expiry';

/** BullMQ key prefix for REDIS_PREFIX: `fleet:` -> keys `fleet:artifact-expiry:…`. */
export const bullPrefix = (redisPrefix: string) => redisPrefix.replace(/:+$/, '') || 'fleet';

export interface SweepResult {
  expired: number;
  chunksDeleted: number;
  forgotten: number;
}

export async function sweepUploads(store: ArtifactStore, pool: Pool, o: { now: number; graceMs: number; keepCompletedMs: number }): Promise<SweepResult> {
  const out: SweepResult = { expired: 0, chunksDeleted: 0, forgotten: 0 };
  for (const id of await store.listUploadIds()) {
    const got = await store.getUpload(id);
    if (!got) continue;
    const rec = got.rec;
    if (rec.state === 'open' && o.now > rec.expires_ms + o.graceMs) {
      // Every chunk number, not only those the bitmap lists: a chunk stored just before a crash
      // may have missed its bit.
      const all = Array.from({ length: rec.chunks }, (_, i) => i);
      const deleted = await mapLimit(all, 8, (n) => store.deleteChunk(id, n));
      out.chunksDeleted += deleted.filter(Boolean).length;
      await store.deleteUpload(id);
      out.expired++;
    } else if (rec.state === 'complete' && o.now > (rec.completed_ms ?? rec.created_ms) + o.keepCompletedMs) {
      const r = await pool.query('SELECT 1 FROM artifacts WHERE id = $1', [rec.artifact_id]);
      if (r.rowCount) {
        await store.deleteUpload(id);
        out.forgotten++;
      }
    }
  }
  await store.compactUploads();
  return out;
}

export interface ExpiryCfg {
  redisUrl: string;
  redisPrefix: string;
  artifacts: { sweepMs: number; expiryGraceS: number; uploadTtlS: number };
}

export async function startArtifactExpiry(cfg: ExpiryCfg, store: ArtifactStore, pool: Pool, log: Logger): Promise<{ close(): Promise<void> }> {
  const prefix = bullPrefix(cfg.redisPrefix);
  const queueConn = createRedis(cfg.redisUrl, { bullmq: true });
  const workerConn = createRedis(cfg.redisUrl, { bullmq: true });
  for (const c of [queueConn, workerConn]) c.on('error', (e) => log.warn({ err: e }, 'redis error (artifact expiry)'));
  const queue = new Queue(EXPIRY_QUEUE, { connection: queueConn, prefix });
  await queue.upsertJobScheduler('sweep', { every: cfg.artifacts.sweepMs }, { name: 'sweep', opts: { removeOnComplete: 50, removeOnFail: 50 } });
  const worker = new Worker(
    EXPIRY_QUEUE,
    async () =>
      sweepUploads(store, pool, {
        now: Date.now(),
        graceMs: cfg.artifacts.expiryGraceS * 1000,
        keepCompletedMs: cfg.artifacts.uploadTtlS * 1000,
      }),
    { connection: workerConn, prefix, concurrency: 1 },
  );
  worker.on('completed', (_job, r: SweepResult) => {
    if (r.expired || r.forgotten) log.info(r, 'artifact uploads expired');
  });
  worker.on('failed', (_job, err) => log.warn({ err }, 'artifact expiry sweep failed; the next one retries'));
  worker.on('error', (err) => log.warn({ err }, 'artifact expiry worker error'));
  return {
    async close() {
      await worker.close().catch(() => {});
      await queue.close().catch(() => {});
      await Promise.allSettled([queueConn.quit(), workerConn.quit()]);
    },
  };
}
