// Artifact reports (queued by the gateway at artifact-complete) -> Postgres `artifacts`. The
// artifact id is derived from the upload id, so a redelivered or repeated report inserts nothing.
import type { Report } from '../lib/messages.js';
import type { Pool } from '../lib/db/postgres.js';
import type { ArtifactReport } from '../lib/artifacts.js';
import { instanceKey } from './reports.js';
import { pgText } from '../lib/db/postgres.js';

export async function writeArtifacts(pool: Pool, reports: Report[], ids: Map<string, { machineId: string; instanceId: string }>): Promise<void> {
  const rows: { a: ArtifactReport; machineId: string; instanceId: string }[] = [];
  for (const r of reports) {
    if (r.k !== 'artifact') continue;
    const id = ids.get(instanceKey(r));
    if (id) rows.push({ a: r.b as ArtifactReport, ...id });
  }
  if (rows.length === 0) return;
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
}
