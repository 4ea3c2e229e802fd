// Artifact uploads in NATS JetStream, shared by every gateway, worker and api replica:
//
//   KV bucket    `${STREAM_NAME}_UPLOADS`    one key per upload id: the upload record (UploadRecord)
//                                            with a bitmap of the chunks received; updated by
//                                            compare-and-set on its revision, so concurrent chunk
//                                            PUTs on different gateways never lose a bit.
//   object store `${STREAM_NAME}_ARTIFACTS`  one object per chunk, named `<upload id>/<n>`. A chunk
//                                            is written with "expected last subject sequence 0" on
//                                            its meta subject: the first copy wins, a second copy
//                                            (a retry, or the same chunk on another gateway at the
//                                            same moment) fails that check and the client library
//                                            purges what it wrote. So a chunk is stored once.
//
// Nothing is kept on a gateway's disk. A completed upload's chunks ARE the artifact: the artifact
// row in Postgres (written by a worker) points at the upload id. Chunks are read back message by
// message with JetStream direct gets (no consumer per chunk; see docs/architecture.md), and every
// object's SHA-256 digest (kept by the object store) is checked as it is read.
import { createHash } from 'node:crypto';
import { StorageType, headers, nuid, type NatsConnection, type JetStreamManager, type KV, type ObjectStore, type ObjectInfo, type StoredMsg } from 'nats';
import { JetStreamApiCodes, jsApiCode } from '../infra/jetstream-errors.js';
import { pgText, type Pool, type PoolClient } from '../infra/postgres.js';
import type { ArtifactUsage } from './artifact-usage.js';

/** JetStream direct get (nats.js has it on the manager, its typings do not declare it). */
type DirectGet = { direct: { getMessage(stream: string, q: { seq: number; next_by_subj: string }): Promise<StoredMsg> } };

export interface ArtifactSettings {
  streamName: string;
  streamReplicas: number;
  artifacts: { storeMaxBytes: number };
}

export type UploadState = 'open' | 'complete';

export interface UploadRecord {
  v: 1;
  id: string;
  customer_id: string;
  customer: string;
  machine: string;
  software: string;
  token_id: string;
  filename: string;
  size: number;
  /** Lower-case hex, or null when the client gave none. */
  sha256: string | null;
  content_type: string;
  chunk_size: number;
  chunks: number;
  created_ms: number;
  expires_ms: number;
  state: UploadState;
  /** Base64 bitmap: bit n set = chunk n stored. */
  received: string;
  artifact_id?: string;
  completed_ms?: number;
}

/** What the gateway queues at artifact-complete (report kind `artifact`); workers/artifacts.ts writes it to Postgres. */
export type ArtifactReport = UploadRecord & { artifact_id: string; completed_ms: number };

export function bucketNames(streamName: string) {
  return { objects: `${streamName}_ARTIFACTS`, uploads: `${streamName}_UPLOADS` };
}

export const chunkName = (uploadId: string, n: number) => `${uploadId}/${n}`;

/** Chunk count of a file: ceil(size / chunkSize). */
export const chunkCount = (size: number, chunkSize: number) => Math.ceil(size / chunkSize);

/** Bytes chunk n must have: chunkSize, except the last. */
export function chunkLength(size: number, chunkSize: number, n: number): number {
  return Math.max(0, Math.min(chunkSize, size - n * chunkSize));
}

// The chunk bitmap, stored base64 in the record (2 GiB in 1 MiB chunks: 256 bytes).
export function bitmapNew(chunks: number): string {
  return Buffer.alloc(Math.ceil(chunks / 8)).toString('base64');
}
export function bitmapHas(b64: string, n: number): boolean {
  const b = Buffer.from(b64, 'base64');
  return ((b[n >> 3] ?? 0) & (1 << (n & 7))) !== 0;
}
export function bitmapSet(b64: string, n: number, on = true): string {
  const b = Buffer.from(b64, 'base64');
  if (on) b[n >> 3] = (b[n >> 3] ?? 0) | (1 << (n & 7));
  else b[n >> 3] = (b[n >> 3] ?? 0) & ~(1 << (n & 7));
  return b.toString('base64');
}
/** Chunk numbers whose bit equals `on`. */
export function bitmapList(b64: string, chunks: number, on = true): number[] {
  const b = Buffer.from(b64, 'base64');
  const out: number[] = [];
  for (let n = 0; n < chunks; n++) if ((((b[n >> 3] ?? 0) & (1 << (n & 7))) !== 0) === on) out.push(n);
  return out;
}

const isWrongLastSeq = (e: unknown) => jsApiCode(e) === JetStreamApiCodes.StreamWrongLastSequence;

/** The object store's digest form: `SHA-256=` + padded base64url. */
function digestOf(hash: ReturnType<typeof createHash>): string {
  return 'SHA-256=' + hash.digest('base64').replace(/\+/g, '-').replace(/\//g, '_');
}

export class ArtifactStore {
  private constructor(
    private readonly kv: KV,
    private readonly os: ObjectStore,
    private readonly jsm: JetStreamManager,
    private readonly bucket: string,
    private readonly nc: NatsConnection,
  ) {}

  /** Binds to (creating when missing) the upload KV bucket and the chunk object store. */
  static async open(nc: NatsConnection, s: ArtifactSettings): Promise<ArtifactStore> {
    const names = bucketNames(s.streamName);
    const js = nc.jetstream();
    const jsm = await nc.jetstreamManager();
    const kv = await js.views.kv(names.uploads, { history: 1, replicas: s.streamReplicas, storage: StorageType.File });
    const os = await js.views.os(names.objects, {
      replicas: s.streamReplicas,
      storage: StorageType.File,
      ...(s.artifacts.storeMaxBytes > 0 ? { max_bytes: s.artifacts.storeMaxBytes } : {}),
    });
    return new ArtifactStore(kv, os, jsm, names.objects, nc);
  }

  get streamName(): string {
    return `OBJ_${this.bucket}`;
  }

  // ---- upload records ----

  async getUpload(id: string): Promise<{ rec: UploadRecord; rev: number } | null> {
    const e = await this.kv.get(id);
    if (!e || e.operation !== 'PUT' || e.length === 0) return null;
    return { rec: e.json<UploadRecord>(), rev: e.revision };
  }

  /** 'exists' when a record with this id is already there (an init retried with its Idempotency-Key). */
  async createUpload(rec: UploadRecord): Promise<'created' | 'exists'> {
    try {
      await this.kv.create(rec.id, Buffer.from(JSON.stringify(rec)));
      return 'created';
    } catch (e) {
      if (isWrongLastSeq(e)) return 'exists';
      throw e;
    }
  }

  /**
   * Compare-and-set loop: `change` gets the current record and returns the new one, or null to
   * leave it as it is. Returns the record as stored afterwards (null: no such upload).
   */
  async updateUpload(id: string, change: (rec: UploadRecord) => UploadRecord | null): Promise<UploadRecord | null> {
    for (let attempt = 0; ; attempt++) {
      const cur = await this.getUpload(id);
      if (!cur) return null;
      const next = change(cur.rec);
      if (next === null) return cur.rec;
      try {
        await this.kv.update(id, Buffer.from(JSON.stringify(next)), cur.rev);
        return next;
      } catch (e) {
        if (!isWrongLastSeq(e) || attempt >= 50) throw e;
        // Another replica changed it in between: read again and re-apply (with jitter, so that
        // many parallel chunk PUTs of one upload do not keep colliding).
        await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 ** attempt)));
      }
    }
  }

  async deleteUpload(id: string): Promise<void> {
    await this.kv.purge(id);
  }

  async listUploadIds(): Promise<string[]> {
    const out: string[] = [];
    for await (const k of await this.kv.keys()) out.push(k);
    return out;
  }

  /** Removes the markers that purged upload records leave behind (older than `olderMs`). */
  async compactUploads(olderMs = 30 * 60_000): Promise<void> {
    await (this.kv as unknown as { purgeDeletes(ms?: number): Promise<unknown> }).purgeDeletes(olderMs);
  }

  // ---- chunks ----

  /**
   * Stores chunk n; 'exists' when it was already there (nothing written). Written the way the
   * object store client writes an object (ADR-20: data messages under `$O.<bucket>.C.<nuid>`, then
   * the meta record with a rollup), so any object-store client reads it, but with the SHA-256 from
   * node:crypto (the client library's pure-JS digest costs about 12 ms of CPU per MiB) and with
   * "expected last subject sequence 0" on the meta record: the first copy of a chunk wins, a later
   * one is refused by JetStream and its data purged.
   */
  async putChunk(uploadId: string, n: number, data: Uint8Array): Promise<'stored' | 'exists'> {
    const name = chunkName(uploadId, n);
    const max = Math.min(Math.max(data.length, 1), this.nc.info?.max_payload ?? 1024 * 1024);
    const id = nuid.next();
    const chunkSubject = `$O.${this.bucket}.C.${id}`;
    const js = this.nc.jetstream();
    let chunks = 0;
    try {
      const pubs = [];
      for (let off = 0; off < data.length; off += max, chunks++) pubs.push(js.publish(chunkSubject, data.subarray(off, off + max)));
      await Promise.all(pubs);
      const h = headers();
      h.set('Nats-Rollup', 'sub');
      h.set('Nats-Expected-Last-Subject-Sequence', '0');
      const info = {
        name,
        description: '',
        options: { max_chunk_size: max },
        bucket: this.bucket,
        nuid: id,
        size: data.length,
        chunks,
        mtime: new Date().toISOString(),
        digest: digestOf(createHash('sha256').update(data)),
        deleted: false,
      };
      await js.publish(this.metaSubject(name), Buffer.from(JSON.stringify(info)), { headers: h });
      return 'stored';
    } catch (e) {
      await this.jsm.streams.purge(this.streamName, { filter: chunkSubject }).catch(() => {});
      if (isWrongLastSeq(e)) return 'exists';
      throw e;
    }
  }

  private metaSubject(name: string): string {
    return `$O.${this.bucket}.M.${Buffer.from(name).toString('base64').replace(/\+/g, '-').replace(/\//g, '_')}`;
  }

  async chunkInfo(uploadId: string, n: number): Promise<ObjectInfo | null> {
    const info = await this.os.info(chunkName(uploadId, n));
    return info && !info.deleted ? info : null;
  }

  /**
   * The bytes of chunk n, message by message (JetStream direct get: one request per message, no
   * consumer), checked against the object's SHA-256 at the end. At most one message (≤ the chunk
   * size) is held at a time. Throws when the chunk is missing or corrupt.
   */
  async *readChunk(uploadId: string, n: number, known?: ObjectInfo): AsyncGenerator<Uint8Array> {
    const info = known ?? (await this.chunkInfo(uploadId, n));
    if (!info) throw new Error(`chunk ${n} of upload ${uploadId} is missing`);
    if (info.size === 0) return;
    const subject = `$O.${this.bucket}.C.${info.nuid}`;
    const hash = createHash('sha256');
    let seq = 0;
    let size = 0;
    for (let i = 0; i < info.chunks; i++) {
      const m = await (this.jsm as unknown as DirectGet).direct.getMessage(this.streamName, { seq, next_by_subj: subject });
      if (m.subject !== subject) throw new Error(`chunk ${n} of upload ${uploadId} is incomplete`);
      seq = m.seq + 1;
      size += m.data.length;
      hash.update(m.data);
      yield m.data;
    }
    if (size !== info.size || digestOf(hash) !== info.digest) throw new Error(`chunk ${n} of upload ${uploadId} is corrupt (size or digest differ)`);
  }

  /**
   * Removes an upload for good: its record first (a completed upload can then not be completed
   * again, which would queue its artifact row anew), then every chunk 0 … chunks-1. Idempotent:
   * what is gone already is skipped. Returns how many chunks it deleted.
   */
  async deleteUploadAndChunks(uploadId: string, chunks: number): Promise<number> {
    await this.deleteUpload(uploadId);
    const deleted = await mapLimit(
      Array.from({ length: chunks }, (_, n) => n),
      8,
      (n) => this.deleteChunk(uploadId, n),
    );
    return deleted.filter(Boolean).length;
  }

  /** Deletes chunk n without leaving a tombstone: its data first, then its meta record. */
  async deleteChunk(uploadId: string, n: number): Promise<boolean> {
    const name = chunkName(uploadId, n);
    const info = await this.os.info(name);
    if (!info) return false;
    await this.jsm.streams.purge(this.streamName, { filter: `$O.${this.bucket}.C.${info.nuid}` });
    await this.jsm.streams.purge(this.streamName, { filter: this.metaSubject(name) });
    return true;
  }
}

/** Runs `fn` over `items` with at most `limit` at a time; results in order. */
export async function mapLimit<T, R>(items: T[], limit: number, fn: (x: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const run = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, run));
  return out;
}

/**
 * A Range header against a size: the byte range to send, 'unsatisfiable' (416), or null to send
 * everything (no header, a form we do not serve such as several ranges, or garbage: RFC 9110
 * lets a server ignore Range).
 */
export function parseRange(header: string | undefined, size: number): { start: number; end: number } | 'unsatisfiable' | null {
  if (!header) return null;
  const m = /^bytes=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header.trim());
  if (!m) return null;
  const [, a, b] = m;
  if (a === '' && b === '') return null;
  if (a === '') {
    const suffix = Number(b);
    if (suffix === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(a);
  const end = b === '' ? size - 1 : Math.min(Number(b), size - 1);
  if (b !== '' && Number(b) < start) return null; // invalid: ignore
  if (start >= size) return 'unsatisfiable';
  return { start, end };
}

/** A Content-Disposition value that survives any file name (RFC 6266 with RFC 8187 filename*). */
export function contentDisposition(filename: string): string {
  const base = filename.split(/[\\/]/).pop() || 'artifact';
  const ascii = base.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(base).replace(/['()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase())}`;
}

// The artifact rows in Postgres (`artifacts`, written by a worker once an upload is complete), as
// the api reads them: a machine's artifacts, one artifact; always scoped to the customer.

/** A stored artifact: the upload it was and where it came from. */
export interface ArtifactRow extends Pick<UploadRecord, 'software' | 'filename' | 'size' | 'sha256' | 'content_type' | 'chunk_size' | 'chunks'> {
  id: string;
  machine_id: string;
  machine: string;
  instance_id: string;
  upload_id: string;
  uploaded_at: Date;
}

const ARTIFACT_SELECT = `SELECT a.id, a.machine_id, m.slug AS machine, a.instance_id, a.software, a.upload_id, a.filename, a.size, a.sha256,
                       a.content_type, a.chunk_size, a.chunks, a.uploaded_at
                  FROM artifacts a JOIN machines m ON m.id = a.machine_id`;
/** An artifact being deleted (deleting_at set) is neither listed nor served. */
const LIVE = 'a.deleting_at IS NULL';

/** A page of a machine's artifacts (of one software, or all), newest first, and how many there are in all. */
export async function listMachineArtifacts(
  pool: Pool,
  customerId: string,
  machineId: string,
  q: { software?: string; limit: number; offset: number },
): Promise<{ rows: ArtifactRow[]; total: number }> {
  const where = ['a.customer_id = $1', 'a.machine_id = $2', LIVE];
  const params: unknown[] = [customerId, machineId];
  if (q.software) where.push(`a.software = $${params.push(q.software)}`);
  const total = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM artifacts a WHERE ${where.join(' AND ')}`, params);
  const rows = await pool.query<ArtifactRow>(
    `${ARTIFACT_SELECT} WHERE ${where.join(' AND ')} ORDER BY a.uploaded_at DESC, a.id LIMIT $${params.push(q.limit)} OFFSET $${params.push(q.offset)}`,
    params,
  );
  return { rows: rows.rows, total: total.rows[0]!.n };
}

/** One of the customer's artifacts; null when it has none of that id. */
export async function getArtifact(pool: Pool, customerId: string, id: string): Promise<ArtifactRow | null> {
  const r = await pool.query<ArtifactRow>(`${ARTIFACT_SELECT} WHERE a.customer_id = $1 AND a.id = $2 AND ${LIVE}`, [customerId, id]);
  return r.rows[0] ?? null;
}

// The worker's side of the rows: writing those of completed uploads (workers/artifacts.ts), and
// which uploads have one (the expiry sweep, workers/artifact-expiry.ts).

/** An artifact row as the worker writes it from a completed upload's report. */
export interface NewArtifact {
  id: string;
  customer_id: string;
  machine_id: string;
  instance_id: string;
  software: string;
  upload_id: string;
  filename: string;
  size: number;
  sha256: string | null;
  content_type: string;
  chunk_size: number;
  chunks: number;
  /** When the upload completed (ms since the epoch): `uploaded_at`. */
  uploaded_ms: number;
}

/**
 * Inserts the artifacts in the order given; an id already there inserts nothing (the id comes from
 * the upload id, so a report applied again is a no-op). A trigger adds each new row's size to its
 * customer's `artifact_usage` and locks that row: give the rows in customer order, so that two
 * workers take the locks in the same order.
 */
export async function insertArtifacts(db: Pool | PoolClient, rows: NewArtifact[]): Promise<void> {
  const col = <T>(f: (x: NewArtifact) => T) => rows.map(f);
  await db.query(
    `INSERT INTO artifacts (id, customer_id, machine_id, instance_id, software, upload_id, filename, size, sha256, content_type,
                            chunk_size, chunks, uploaded_at)
     SELECT id, customer_id, machine_id, instance_id, software, upload_id, filename, size, sha256, content_type,
            chunk_size, chunks, to_timestamp(done_ms / 1000.0)
       FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::uuid[], $7::text[], $8::bigint[], $9::text[],
                   $10::text[], $11::int[], $12::int[], $13::float8[])
            AS t(id, customer_id, machine_id, instance_id, software, upload_id, filename, size, sha256, content_type, chunk_size, chunks, done_ms)
     ON CONFLICT (id) DO NOTHING`,
    [
      col((x) => x.id),
      col((x) => x.customer_id),
      col((x) => x.machine_id),
      col((x) => x.instance_id),
      col((x) => x.software),
      col((x) => x.upload_id),
      col((x) => pgText(x.filename)),
      col((x) => x.size),
      col((x) => x.sha256),
      col((x) => x.content_type),
      col((x) => x.chunk_size),
      col((x) => x.chunks),
      col((x) => x.uploaded_ms),
    ],
  );
}

/** The upload ids among `uploadIds` whose artifact row is in Postgres. */
export async function uploadsWithArtifact(db: Pool | PoolClient, uploadIds: string[]): Promise<Set<string>> {
  if (uploadIds.length === 0) return new Set();
  const r = await db.query<{ upload_id: string }>('SELECT upload_id FROM artifacts WHERE upload_id = ANY($1::uuid[])', [uploadIds]);
  return new Set(r.rows.map((x) => x.upload_id));
}

// Deleting artifacts (DELETE /api/artifacts/{id}, RETENTION_ARTIFACTS_DAYS, offboarding): in three
// steps, each safe to repeat, so a deletion that stops half-way (NATS or Postgres away) is finished
// by the next attempt, or by the retention job, which finishes every row marked and not gone.
//   1. mark the row (deleting_at): from then on it is neither listed nor downloaded;
//   2. remove its upload record and chunks from NATS (ArtifactStore.deleteUploadAndChunks);
//   3. delete the row: the trigger takes its size off artifact_usage (the quota artifact_bytes),
//      and its reservation entry, if one is left, goes from Redis.
// A download that had started before step 1 fails at the first chunk that is gone (readChunk
// throws, the api breaks the connection short of its Content-Length): never half a file that
// looks whole.

/** What deleting an artifact needs to know of it. */
export interface DoomedArtifact {
  id: string;
  customer_id: string;
  upload_id: string;
  chunks: number;
  size: number;
}

const DOOMED_COLS = 'id, customer_id, upload_id, chunks, size';

/** Step 1 for one artifact of a customer; null when it has none of that id (or it is gone already). */
export async function markArtifactDeleting(pool: Pool, customerId: string, id: string): Promise<DoomedArtifact | null> {
  const r = await pool.query<DoomedArtifact>(
    `UPDATE artifacts SET deleting_at = COALESCE(deleting_at, now()) WHERE customer_id = $1 AND id = $2 RETURNING ${DOOMED_COLS}`,
    [customerId, id],
  );
  return r.rows[0] ?? null;
}

/** Step 1 for up to `limit` artifacts uploaded more than `days` days ago (by the database's clock), oldest first. */
export async function markArtifactsPastRetention(pool: Pool, days: number, limit: number): Promise<DoomedArtifact[]> {
  const r = await pool.query<DoomedArtifact>(
    `WITH doomed AS (SELECT id FROM artifacts WHERE deleting_at IS NULL AND uploaded_at < now() - make_interval(days => $1::int)
                      ORDER BY uploaded_at LIMIT $2 FOR UPDATE SKIP LOCKED)
     UPDATE artifacts a SET deleting_at = now() FROM doomed d WHERE a.id = d.id RETURNING a.id, a.customer_id, a.upload_id, a.chunks, a.size`,
    [days, limit],
  );
  return r.rows;
}

/** Step 1 for every artifact of a customer (offboarding). Returns how many were marked now. */
export async function markCustomerArtifactsDeleting(pool: Pool, customerId: string): Promise<number> {
  const r = await pool.query('UPDATE artifacts SET deleting_at = now() WHERE customer_id = $1 AND deleting_at IS NULL', [customerId]);
  return r.rowCount ?? 0;
}

/** Rows marked and not deleted yet (a deletion that stopped half-way), the longest-marked first; of one customer, or of all. */
export async function artifactsBeingDeleted(pool: Pool, o: { customerId?: string; limit: number }): Promise<DoomedArtifact[]> {
  const r = o.customerId
    ? await pool.query<DoomedArtifact>(
        `SELECT ${DOOMED_COLS} FROM artifacts WHERE deleting_at IS NOT NULL AND customer_id = $1 ORDER BY deleting_at, id LIMIT $2`,
        [o.customerId, o.limit],
      )
    : await pool.query<DoomedArtifact>(`SELECT ${DOOMED_COLS} FROM artifacts WHERE deleting_at IS NOT NULL ORDER BY deleting_at, id LIMIT $1`, [o.limit]);
  return r.rows;
}

/**
 * Steps 2 and 3 for an artifact marked by step 1. One row per statement: the usage trigger locks
 * the customer's artifact_usage row, and a statement over several customers could take those locks
 * in another order than a worker inserting artifacts (customer order) and deadlock with it.
 */
export async function purgeArtifact(pool: Pool, store: ArtifactStore, a: DoomedArtifact, usage?: Pick<ArtifactUsage, 'release'>): Promise<{ chunks: number }> {
  const chunks = await store.deleteUploadAndChunks(a.upload_id, a.chunks);
  await pool.query('DELETE FROM artifacts WHERE id = $1 AND deleting_at IS NOT NULL', [a.id]);
  // A settled entry no longer counts once the row is gone (lib/store/artifact-usage.ts); removing
  // it now only saves the sweep the work. Best effort: the sweep removes what is left.
  await usage?.release(a.customer_id, a.upload_id).catch(() => false);
  return { chunks };
}
