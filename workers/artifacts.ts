// Artifact reports (queued by the gateway at artifact-complete) -> Postgres `artifacts`
// (lib/store/artifacts.ts `insertArtifacts`). The artifact id is derived from the upload id, so a
// redelivered or repeated report inserts nothing.
// A trigger adds each new row's size to its customer's `artifact_usage`; after the commit the
// upload's reservation against the quota artifact_bytes is settled (lib/store/artifact-usage.ts): from
// that usage row's seq on, the bytes count as stored instead of reserved.
import type { Report } from '../lib/contract/messages.js';
import type { Pool } from '../lib/infra/postgres.js';
import { insertArtifacts, type ArtifactReport } from '../lib/store/artifacts.js';
import { artifactUsageSeqs } from '../lib/store/quotas.js';
import type { ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { Logger } from '../lib/infra/log.js';
import { instanceKey } from './reports.js';

export async function writeArtifacts(
  pool: Pool,
  reports: Report[],
  ids: Map<string, { machineId: string; instanceId: string }>,
  usage?: { usage: ArtifactUsage; log?: Logger },
): Promise<void> {
  const rows: { a: ArtifactReport; machineId: string; instanceId: string }[] = [];
  for (const r of reports) {
    if (r.kind !== 'artifact') continue;
    const id = ids.get(instanceKey(r));
    if (id) rows.push({ a: r.body as ArtifactReport, ...id });
  }
  if (rows.length === 0) return;
  // In customer order: the trigger locks each customer's usage row, and two workers must take them in the same order.
  rows.sort((a, b) => (a.a.customer_id < b.a.customer_id ? -1 : a.a.customer_id > b.a.customer_id ? 1 : 0));
  await insertArtifacts(
    pool,
    rows.map((x) => ({
      id: x.a.artifact_id,
      customer_id: x.a.customer_id,
      machine_id: x.machineId,
      instance_id: x.instanceId,
      software: x.a.software,
      upload_id: x.a.id,
      filename: x.a.filename,
      size: x.a.size,
      sha256: x.a.sha256,
      content_type: x.a.content_type,
      chunk_size: x.a.chunk_size,
      chunks: x.a.chunks,
      uploaded_ms: x.a.completed_ms,
    })),
  );
  if (usage) await settleReservations(pool, usage.usage, rows.map((x) => x.a), usage.log);
}

/**
 * The reservations of these stored artifacts become "stored at seq": the usage row's seq read after
 * the commit, so it counts them (a report applied again settles nothing new). Best effort: the
 * expiry sweep settles what a failure here leaves (until then the bytes count twice, never not at all).
 */
export async function settleReservations(pool: Pool, usage: ArtifactUsage, artifacts: Pick<ArtifactReport, 'customer_id' | 'id'>[], log?: Logger): Promise<void> {
  try {
    const customers = [...new Set(artifacts.map((a) => a.customer_id))];
    const seqOf = await artifactUsageSeqs(pool, customers);
    for (const a of artifacts) {
      const seq = seqOf.get(a.customer_id);
      if (seq !== undefined) await usage.settle(a.customer_id, a.id, seq);
    }
  } catch (e) {
    log?.warn({ err: e }, 'settling artifact reservations failed; the expiry sweep settles them');
  }
}
