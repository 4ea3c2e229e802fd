// Artifact reports (queued by the gateway at artifact-complete) -> Postgres `artifacts`. The
// artifact id is derived from the upload id, so a redelivered or repeated report inserts nothing.
// A trigger adds each new row's size to its customer's `artifact_usage`; after the commit the
// upload's reservation against the quota artifact_bytes is settled (lib/store/artifact-usage.ts): from
// that usage row's seq on, the bytes count as stored instead of reserved.
import type { Report } from '../lib/contract/messages.js';
import type { Pool } from '../lib/infra/postgres.js';
import type { ArtifactReport } from '../lib/store/artifacts.js';
import type { ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { Logger } from '../lib/infra/log.js';
import { instanceKey } from './reports.js';
import { pgText } from '../lib/infra/postgres.js';

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
  const col = <T>(f: (x: (typeof rows)[number]) => T) => rows.map(f);
  await pool.query(
    `INSERT INTO artifacts (id, customer_id, machine_id, instance_id, software, upload_id, filename, size, sha256, content_type,
                            chunk_size, chunks, uploaded_at)
     SELECT id, customer_id, machine_id, instance_id, software, upload_id, filename, size, sha256, content_type,
            chunk_size, chunks, to_timestamp(done_ms / 1000.0)
       FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::uuid[], $7::text[], $8::bigint[], $9::text[],
                   $10::text[], $11::int[], $12::int[], $13::float8[])
            AS t(id, customer_id, machine_id, instance_id, software, upload_id, filename, size, sha256, content_type, chunk_size, chunks, done_ms)
     ON CONFLICT (id) DO NOTHING`,
    [
      col((x) => x.a.artifact_id),
      col((x) => x.a.customer_id),
      col((x) => x.machineId),
      col((x) => x.instanceId),
      col((x) => x.a.software),
      col((x) => x.a.id),
      col((x) => pgText(x.a.filename)),
      col((x) => x.a.size),
      col((x) => x.a.sha256),
      col((x) => x.a.content_type),
      col((x) => x.a.chunk_size),
      col((x) => x.a.chunks),
      col((x) => x.a.completed_ms),
    ],
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
    const r = await pool.query<{ customer_id: string; seq: number }>('SELECT customer_id, seq FROM artifact_usage WHERE customer_id = ANY($1::uuid[])', [customers]);
    const seqOf = new Map(r.rows.map((x) => [x.customer_id, x.seq]));
    for (const a of artifacts) {
      const seq = seqOf.get(a.customer_id);
      if (seq !== undefined) await usage.settle(a.customer_id, a.id, seq);
    }
  } catch (e) {
    log?.warn({ err: e }, 'settling artifact reservations failed; the expiry sweep settles them');
  }
}
