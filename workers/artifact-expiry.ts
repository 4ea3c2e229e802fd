// Expiry of artifact uploads: a scheduled job (workers/jobs.ts) runs `sweepUploads` every
// ARTIFACT_SWEEP_MS on one of the worker replicas. An open upload ARTIFACT_EXPIRY_GRACE_S past its expiry loses its chunks
// (object store) and then its record (KV), and then its reservation against the quota
// artifact_bytes; a completed upload's record is forgotten once it is older than
// ARTIFACT_UPLOAD_TTL_S and its artifact row is in Postgres (the chunks stay: they are the
// artifact). Every step is idempotent, so a sweep that dies half-way is finished by the next.
//
// The same pass keeps the reservations (lib/store/artifact-usage.ts) true to the upload records: an open
// upload whose reservation is missing (Redis lost it) gets it back, a completed one whose artifact
// is stored is settled (the worker that stored it could not), settled entries are removed once
// every gateway counts them as stored, and entries whose upload is gone are removed.
import type { Pool } from '../lib/infra/postgres.js';
import type { Logger } from '../lib/infra/log.js';
import { mapLimit, uploadsWithArtifact, type ArtifactStore, type UploadRecord } from '../lib/store/artifacts.js';
import { artifactUsageSeqs } from '../lib/store/quotas.js';
import { ORPHAN_AFTER_MS, SETTLED_KEEP_MS, type ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { RunResult } from './jobs.js';

interface SweepOptions {
  now: number;
  graceMs: number;
  keepCompletedMs: number;
  /** Reservations against the quota artifact_bytes; without it they are left alone. */
  usage?: ArtifactUsage;
  log?: Logger;
}

export async function sweepUploads(store: ArtifactStore, pool: Pool, o: SweepOptions): Promise<RunResult> {
  const out = { expired: 0, chunksDeleted: 0, forgotten: 0, released: 0, settledGone: 0, restored: 0, settled: 0, removed: 0 };
  /** Upload records that stay after this pass, by upload id. */
  const live = new Map<string, UploadRecord>();
  const complete: UploadRecord[] = [];
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
      // Only now: until its chunks are gone the upload still takes their room.
      if (o.usage && (await o.usage.release(rec.customer_id, id))) out.released++;
    } else if (rec.state === 'complete') complete.push(rec);
    else live.set(id, rec);
  }
  const stored = await uploadsWithArtifact(pool, complete.map((r) => r.id));
  for (const rec of complete) {
    if (stored.has(rec.id) && o.now > (rec.completed_ms ?? rec.created_ms) + o.keepCompletedMs) {
      await store.deleteUpload(rec.id);
      out.forgotten++;
    } else live.set(rec.id, rec);
  }
  await store.compactUploads();
  if (o.usage) await reconcile(o.usage, pool, live, stored, o.now, out);
  if (out.restored + out.removed > 0) o.log?.warn(out, 'artifact reservations repaired (Redis lost entries, or a process stopped between two steps)');
  return out;
}

async function reconcile(usage: ArtifactUsage, pool: Pool, live: Map<string, UploadRecord>, stored: Set<string>, now: number, out: Record<string, number>): Promise<void> {
  // Uploads that hold (or will hold) bytes not counted as stored yet: their entry must exist.
  for (const rec of live.values()) {
    if (rec.state === 'complete' && stored.has(rec.id)) continue;
    if (await usage.restore(rec.customer_id, rec.id, rec.size, rec.created_ms)) out.restored!++;
  }
  const customers = [...new Set([...(await usage.customers()), ...[...live.values()].map((r) => r.customer_id)])];
  if (customers.length === 0) return;
  const seqOf = await artifactUsageSeqs(pool, customers);
  for (const customerId of customers) {
    const entries = await usage.entries(customerId);
    const remove: string[] = [];
    const gone: string[] = [];
    const orphans: string[] = [];
    const settle: string[] = [];
    for (const [id, r] of entries) {
      if (r.seq !== null) {
        if (r.settledMs !== null && now - r.settledMs > SETTLED_KEEP_MS) gone.push(id);
        continue;
      }
      const rec = live.get(id);
      if (rec?.state === 'complete' && stored.has(id)) settle.push(id);
      // No record: forgotten or expired before its entry was settled or released, or an init that
      // died between its reservation and its record (hence the age: a new init's record may not be
      // listed yet).
      else if (!rec && now - r.reservedMs > ORPHAN_AFTER_MS) orphans.push(id);
    }
    const orphanStored = await uploadsWithArtifact(pool, orphans);
    for (const id of orphans) (orphanStored.has(id) ? settle : remove).push(id);
    const seq = seqOf.get(customerId);
    for (const id of settle) if (seq !== undefined && (await usage.settle(customerId, id, seq))) out.settled!++;
    out.removed! += remove.length;
    out.settledGone! += gone.length;
    await usage.remove(customerId, [...remove, ...gone]);
  }
}
