// Expiry of artifact uploads: a scheduled job (lib/jobs.ts) runs `sweepUploads` every
// ARTIFACT_SWEEP_MS on one of the worker replicas. An open upload ARTIFACT_EXPIRY_GRACE_S past its expiry loses its chunks
// (object store) and then its record (KV); a completed upload's record is forgotten once it is
// older than ARTIFACT_UPLOAD_TTL_S and its artifact row is in Postgres (the chunks stay: they are
// the artifact). Every step is idempotent, so a sweep that dies half-way is finished by the next.
import type { Pool } from '../lib/db/postgres.js';
import { mapLimit, type ArtifactStore } from '../lib/artifacts.js';
import type { RunResult } from '../lib/jobs.js';

export async function sweepUploads(store: ArtifactStore, pool: Pool, o: { now: number; graceMs: number; keepCompletedMs: number }): Promise<RunResult> {
  const out = { expired: 0, chunksDeleted: 0, forgotten: 0 };
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
