// Artifacts of the caller's customer: the list per machine (filter by software since 5.8.0) and the
// download, streamed chunk by chunk from the JetStream object store: the api holds at most two
// chunks (2 × ARTIFACT_CHUNK_BYTES, 2 MiB) of a download at a time, whatever the artifact's size. One byte range
// per request is served (206); a range past the end is 416; several ranges get the whole file.
import { Readable } from 'node:stream';
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError, notFound } from '../../lib/contract/errors.js';
import { parseRange, contentDisposition, getArtifact, listMachineArtifacts, markArtifactDeleting, purgeArtifact, type ArtifactStore, type ArtifactRow } from '../../lib/store/artifacts.js';
import { ArtifactUsage } from '../../lib/store/artifact-usage.js';
import { ownedMachine } from '../../lib/store/machines.js';

type Row = ArtifactRow;

const toArtifact = (r: Row) => ({
  id: r.id,
  machine_id: r.machine_id,
  machine: r.machine,
  instance_id: r.instance_id,
  software: r.software,
  filename: r.filename,
  size: r.size,
  sha256: r.sha256,
  content_type: r.content_type,
  uploaded_at: r.uploaded_at.toISOString(),
  download: `/api/artifacts/${r.id}/download`,
});

/**
 * Bytes start..end (inclusive) of an artifact, chunk by chunk. The next chunk is fetched while the
 * current one is written out: at most two chunks (2 × ARTIFACT_CHUNK_BYTES) in hand.
 */
export async function* artifactBytes(store: ArtifactStore, uploadId: string, chunkSize: number, start: number, end: number): AsyncGenerator<Buffer> {
  const fetchChunk = async (n: number) => {
    const parts: Uint8Array[] = [];
    for await (const part of store.readChunk(uploadId, n)) parts.push(part);
    return parts;
  };
  const ahead = (n: number) => {
    const p = fetchChunk(n);
    p.catch(() => {}); // awaited below; this only keeps an abandoned prefetch from being "unhandled"
    return p;
  };
  const first = Math.floor(start / chunkSize);
  const last = Math.floor(end / chunkSize);
  let pending = ahead(first);
  for (let n = first; n <= last; n++) {
    const parts = await pending;
    if (n < last) pending = ahead(n + 1);
    let off = n * chunkSize;
    for (const part of parts) {
      const lo = Math.max(start, off) - off;
      const hi = Math.min(end + 1, off + part.length) - off;
      if (hi > lo) yield Buffer.from(part.buffer, part.byteOffset + lo, hi - lo);
      off += part.length;
    }
  }
}

export function artifactHandlers(d: ApiDeps): HandlersOf<'delete_artifact' | 'download_artifact' | 'list_machine_artifacts'> {
  const usage = new ArtifactUsage(d.redis, d.cfg.redisPrefix);
  return {
    // Marked first (hidden from the list and from downloads), then its upload record and chunks
    // go from NATS, then the row (and with it its bytes from artifact_usage). A failure in between
    // leaves it marked: DELETE again, or the retention job, finishes it (lib/store/artifacts.ts).
    async delete_artifact(req, reply) {
      const p = principal(req);
      const { id } = req.params;
      const store = d.artifacts();
      if (!store) throw new HttpError(503, 'the artifact store (NATS) is not reachable yet; retry', { retryAfterS: 2 });
      const a = await markArtifactDeleting(d.pool, p.customerId, id);
      if (!a) throw notFound('no such artifact');
      try {
        await purgeArtifact(d.pool, store, a, usage);
      } catch (e) {
        req.log.warn({ err: e, artifact: a.id }, 'artifact deletion stopped half-way; it stays hidden until a retry or the retention job finishes it');
        throw new HttpError(503, 'the artifact is hidden, but its bytes could not all be deleted yet (NATS or Postgres); retry', { retryAfterS: 2 });
      }
      req.log.info({ artifact: a.id, upload: a.upload_id, size: a.size, customer: p.customerId }, 'artifact deleted');
      return reply.code(204).send();
    },

    async list_machine_artifacts(req) {
      const p = principal(req);
      const { id } = req.params;
      const q = req.query;
      await ownedMachine(d.pool, p.customerId, id);
      const { rows, total } = await listMachineArtifacts(d.pool, p.customerId, id, { software: q.software, limit: q.limit ?? 100, offset: q.offset ?? 0 });
      return { items: rows.map(toArtifact), total };
    },

    async download_artifact(req, reply) {
      const p = principal(req);
      const { id } = req.params;
      const a = await getArtifact(d.pool, p.customerId, id);
      if (!a) throw notFound('no such artifact');
      const store = d.artifacts();
      if (!store) throw new HttpError(503, 'the artifact store (NATS) is not reachable yet; retry', { retryAfterS: 2 });

      reply.header('Accept-Ranges', 'bytes');
      // Artifacts never change: the ETag is their id, so If-Range needs no extra check.
      reply.header('ETag', `"${a.id}"`);
      reply.header('Cache-Control', 'private, max-age=0');
      reply.header('X-Content-Type-Options', 'nosniff');
      const range = parseRange(req.headers.range, a.size);
      if (range === 'unsatisfiable') {
        reply.header('Content-Range', `bytes */${a.size}`);
        throw new HttpError(416, `range ${JSON.stringify(req.headers.range)} is outside the artifact's ${a.size} bytes`);
      }
      const { start, end } = range ?? { start: 0, end: a.size - 1 };
      const length = a.size === 0 ? 0 : end - start + 1;
      if (range) reply.code(206).header('Content-Range', `bytes ${start}-${end}/${a.size}`);
      reply.header('Content-Type', a.content_type);
      reply.header('Content-Disposition', contentDisposition(a.filename));
      reply.header('Content-Length', String(length));
      if (length === 0) return reply.send('');
      // HEAD: Fastify's HEAD route keeps our Content-Length only when the payload is a stream.
      if (req.method === 'HEAD') return reply.send(Readable.from([]));
      const body = Readable.from(artifactBytes(store, a.upload_id, a.chunk_size, start, end), { objectMode: false, highWaterMark: a.chunk_size });
      body.on('error', (e) => req.log.warn({ err: e, artifact: a.id }, 'artifact download failed mid-stream'));
      return reply.send(body);
    },
  };
}
