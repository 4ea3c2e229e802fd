// Chunked, resumable artifact uploads on the gateway (docs/decisions.md "Ingest"):
//
//   POST …/artifact-init                    {filename, size, sha256?, content_type?} -> 201 {upload_id, chunk_size, chunks, expires_at}
//   PUT  …/artifact-chunk/{upload_id}/{n}    raw bytes -> 200 {ok, received}; the same chunk again is a no-op
//   GET  …/artifact-status/{upload_id}       -> {received, missing, …} (to resume)
//   POST …/artifact-complete/{upload_id}     -> 200 {artifact_id}; 409 while chunks are missing or the sha256 differs
//
// Everything an upload is lives in NATS JetStream (lib/store/artifacts.ts): its record in a KV bucket,
// its chunks in the object store. Any gateway replica can take any request of any upload, and
// nothing is written to the gateway's disk. A chunk body is held in memory only while it is
// stored; ARTIFACT_INFLIGHT_BYTES bounds the chunk bodies one gateway holds at once (503 with
// Retry-After above it). At complete the gateway queues the artifact (one report, like any other);
// a worker writes its Postgres row. Quotas per customer (lib/store/quotas.ts) are checked at init: the
// size of one artifact (413) and the bytes the customer holds, stored plus reserved by its uploads
// in progress (507); a chunk can never add more than the size declared at init (413/422).
//
// Transport-free: the operations on an upload take a token and answer an Outcome;
// gateway/http/artifact-routes.ts reads the requests (the chunk bodies within a byte budget) and
// writes the answers.
import { createHash, randomUUID } from 'node:crypto';
import type { Call, JsonRoute, IngestPath, Outcome } from './types.js';
import type { Ingest } from './ingest.js';
import type { TokenInfo } from './token-cache.js';
import { compile } from '../lib/contract/validation.js';
import { ArtifactInit } from '../lib/contract/schemas/artifacts.js';
import { HttpError, notFound } from '../lib/contract/errors.js';
import { describeQuota, formatBytes } from '../lib/store/quotas.js';
import { MAX_COPY_AGE_MS, type ReserveResult } from '../lib/store/artifact-usage.js';
import { uuidFromName, idempotentReportId } from '../lib/contract/ids.js';
import { keyReused } from './idempotency.js';
import { encodeReport } from '../lib/contract/messages.js';
import {
  bitmapHas, bitmapList, bitmapNew, bitmapSet, chunkCount, chunkLength, mapLimit, type UploadRecord, type ArtifactReport,
} from '../lib/store/artifacts.js';

export const storeUnavailable = (what: string) => new HttpError(503, `${what}: the artifact store (NATS JetStream) did not answer; retry`, { retryAfterS: 2 });
const iso = (ms: number) => new Date(ms).toISOString();
const json = (status: number, body: unknown): Outcome => ({ status, body: JSON.stringify(body) });

/** The artifact id of an upload: derived, so that every replica completing it names it the same. */
export const artifactIdOf = (uploadId: string) => uuidFromName('artifact', uploadId);

/** The upload, if it exists, belongs to this token's customer and this path, and has not expired. */
function usable(got: { rec: UploadRecord } | null, tok: TokenInfo, path: IngestPath, id: string): UploadRecord | HttpError {
  const rec = got?.rec;
  if (!rec || rec.customer_id !== tok.customerId || rec.machine !== path.machine || rec.software !== path.software) {
    return notFound(`no upload ${id} for ${path.customer}/${path.machine}/${path.software}`);
  }
  if (rec.state === 'open' && Date.now() > rec.expires_ms) return notFound(`upload ${id} expired at ${iso(rec.expires_ms)}; start a new one`);
  return rec;
}

function statusOf(rec: UploadRecord) {
  return {
    upload_id: rec.id,
    state: rec.state,
    filename: rec.filename,
    size: rec.size,
    chunk_size: rec.chunk_size,
    chunks: rec.chunks,
    received: rec.state === 'complete' ? Array.from({ length: rec.chunks }, (_, i) => i) : bitmapList(rec.received, rec.chunks, true),
    missing: rec.state === 'complete' ? [] : bitmapList(rec.received, rec.chunks, false),
    expires_at: iso(rec.expires_ms),
    artifact_id: rec.artifact_id ?? null,
  };
}

const initAnswer = (rec: UploadRecord) => json(201, { upload_id: rec.id, chunk_size: rec.chunk_size, chunks: rec.chunks, expires_at: iso(rec.expires_ms) });

/** What an upload looked up before its chunk's body arrived: the record, or the store's failure. */
export type Lookup = { r: { rec: UploadRecord } | null } | { e: unknown };

export class Uploads {
  /** artifact-init, on the JSON ingest path (gateway/ingest.ts `ingest` runs its `finish`). */
  readonly init: JsonRoute;
  private readonly chunkBytes;
  private readonly quotaRefusals;

  constructor(private readonly core: Ingest) {
    const { d } = core;
    this.chunkBytes = d.metrics.counter('fleet_gateway_artifact_chunk_bytes_total');
    this.quotaRefusals = d.metrics.counter('fleet_quota_refusals_total');
    this.init = { validate: compile(ArtifactInit), finish: (call, tok, _raw, data, path, idemKey, _spans, done) => void this.start(tok, data as unknown as ArtifactInit, path, idemKey).then(done, call.fail) };
  }

  private get store() {
    return this.core.d.artifacts;
  }

  /** Looks an upload up (started while its chunk's body arrives). */
  lookup(id: string): Promise<Lookup> {
    return this.store.getUpload(id).then((r) => ({ r }), (e: unknown) => ({ e }));
  }

  // ---- init ----
  // The customer's quotas (lib/store/quotas.ts) from this gateway's copy: the size of one artifact
  // (artifact_max_bytes, 413) and the bytes it may hold (artifact_bytes, 507): the declared size is
  // reserved in Redis before the upload record is created (lib/store/artifact-usage.ts), atomically
  // against every other gateway's reservations, and released if the record cannot be created.
  private async start(tok: TokenInfo, b: ArtifactInit, path: IngestPath, idemKey: string): Promise<Outcome> {
    const { d } = this.core;
    const { log } = d;
    const A = d.cfg.artifacts;
    const { quotaRefusals } = this;
    if (d.quotas.ageMs > MAX_COPY_AGE_MS) {
      const age = Math.round(d.quotas.ageMs / 1000);
      return new HttpError(503, `upload not started: this gateway's copy of the quotas is ${age} s old (Postgres unreachable); retry`, { retryAfterS: 5 });
    }
    const quota = d.quotas.quotas(tok.customerId);
    if (b.size > quota.artifact_max_bytes) {
      quotaRefusals.labels('artifact_max_bytes').inc();
      return new HttpError(413, `an artifact of ${b.size} bytes is over the limit of ${describeQuota('artifact_max_bytes', quota.artifact_max_bytes)}`);
    }
    const now = Date.now();
    const rec: UploadRecord = {
      v: 1,
      // With an Idempotency-Key, a retried init finds the upload its first attempt created.
      id: idemKey ? idempotentReportId(tok.customerId, 'artifact-init', path.machine, path.software, idemKey) : randomUUID(),
      customer_id: tok.customerId,
      customer: tok.customer,
      machine: path.machine,
      software: path.software,
      token_id: tok.id,
      filename: b.filename,
      size: b.size,
      sha256: b.sha256 ? b.sha256.toLowerCase() : null,
      content_type: b.content_type ?? 'application/octet-stream',
      chunk_size: A.chunkSize,
      chunks: chunkCount(b.size, A.chunkSize),
      created_ms: now,
      expires_ms: now + A.uploadTtlS * 1000,
      state: 'open',
      received: bitmapNew(chunkCount(b.size, A.chunkSize)),
    };
    let r: ReserveResult;
    try {
      r = await d.artifactUsage.reserve(tok.customerId, rec.id, rec.size, quota.artifact_bytes, d.quotas.artifactStored(tok.customerId));
    } catch (e) {
      log.warn({ err: e }, 'artifact-init: the quota reservation (Redis) failed');
      return new HttpError(503, 'upload not started: the artifact quota check (Redis) did not answer; retry', { retryAfterS: 2 });
    }
    if (!r.ok) {
      quotaRefusals.labels('artifact_bytes').inc();
      return new HttpError(
        507,
        `artifact quota exceeded: ${tok.customer} holds ${r.used} bytes (${formatBytes(r.used)}) in stored artifacts and uploads in progress, ` +
          `this upload declares ${rec.size} bytes (${formatBytes(rec.size)}), and the quota is ${describeQuota('artifact_bytes', quota.artifact_bytes)}. ` +
          'Uploads in progress count with their declared size until they complete or expire; ask the operator to raise the quota',
      );
    }
    // Gives back what this init reserved, when it must not keep it.
    const giveBack = () => (r.ok && r.fresh ? d.artifactUsage.release(tok.customerId, rec.id).catch((e) => log.warn({ err: e, upload: rec.id }, 'artifact-init: releasing the reservation failed; the expiry sweep removes it')) : undefined);
    try {
      if ((await this.store.createUpload(rec)) === 'created') return initAnswer(rec);
      const old = (await this.store.getUpload(rec.id))?.rec;
      const same =
        old && old.customer_id === rec.customer_id && old.machine === rec.machine && old.software === rec.software &&
        old.filename === rec.filename && old.size === rec.size && old.sha256 === rec.sha256;
      if (!same) {
        await giveBack();
        return keyReused();
      }
      // A completed upload's bytes are counted as stored (or by its own reservation until then).
      if (old.state === 'complete') await giveBack();
      return initAnswer(old);
    } catch (e) {
      log.warn({ err: e }, 'artifact-init: store failed');
      await giveBack();
      return storeUnavailable('upload not started');
    }
  }

  // ---- chunk ----
  /** Chunk `n` of upload `id`, its body received and the upload looked up meanwhile (`got`). The same chunk again is a no-op. */
  async chunk(tok: TokenInfo, path: IngestPath, id: string, n: number, body: Buffer, got: Lookup): Promise<Outcome> {
    const { log } = this.core.d;
    try {
      if ('e' in got) {
        log.warn({ err: got.e }, 'artifact-chunk: upload lookup failed');
        return storeUnavailable('chunk not stored');
      }
      const rec = usable(got.r, tok, path, id);
      if (rec instanceof HttpError) return rec;
      if (n >= rec.chunks) return new HttpError(422, `chunk ${n} is out of range: upload ${id} has chunks 0 … ${rec.chunks - 1}`);
      const expected = chunkLength(rec.size, rec.chunk_size, n);
      if (body.length !== expected) {
        const status = body.length > rec.chunk_size ? 413 : 422;
        return new HttpError(status, `chunk ${n} must be ${expected} bytes (chunk_size ${rec.chunk_size}, size ${rec.size}), got ${body.length}`);
      }
      let now: UploadRecord | null = rec;
      if (rec.state === 'open' && !bitmapHas(rec.received, n)) {
        const stored = await this.store.putChunk(id, n, body);
        if (stored === 'stored') this.chunkBytes.inc(body.length);
        now = await this.store.updateUpload(id, (r) => (bitmapHas(r.received, n) || r.state !== 'open' ? null : { ...r, received: bitmapSet(r.received, n) }));
        if (!now) return notFound(`upload ${id} is gone (expired)`);
      }
      return json(200, { ok: true, received: statusOf(now).received });
    } catch (e) {
      log.warn({ err: e, upload: id, n }, 'artifact-chunk: store failed');
      return storeUnavailable('chunk not stored');
    }
  }

  /** The upload of this token's path, and what `then` makes of it; 404 when it is not there, 503 when the store fails. */
  private async withUpload<O extends Outcome | null>(kind: string, tok: TokenInfo, path: IngestPath, id: string, then: (rec: UploadRecord) => Promise<O>): Promise<Outcome | O> {
    try {
      const rec = usable(await this.store.getUpload(id), tok, path, id);
      if (rec instanceof HttpError) return rec;
      return await then(rec);
    } catch (e) {
      this.core.d.log.warn({ err: e, upload: id }, `${kind}: store failed`);
      return storeUnavailable(kind === 'artifact-status' ? 'status unknown' : 'upload not completed');
    }
  }

  // ---- status ----
  status(tok: TokenInfo, path: IngestPath, id: string): Promise<Outcome> {
    return this.withUpload('artifact-status', tok, path, id, async (rec) => json(200, statusOf(rec)));
  }

  // ---- complete ----
  /** Checks every chunk (and the sha256 given at init), queues the artifact as a report, then marks the upload complete; null when the client went away meanwhile (nothing to answer). */
  complete(call: Call, tok: TokenInfo, path: IngestPath, id: string): Promise<Outcome | null> {
    return this.withUpload('artifact-complete', tok, path, id, (rec) => this.finishUpload(call, tok, rec));
  }

  private async finishUpload(call: Call, tok: TokenInfo, rec: UploadRecord): Promise<Outcome | null> {
    const { d } = this.core;
    const store = this.store;
    const conflict = (detail: string) => new HttpError(409, detail);
    if (rec.state === 'complete') return json(200, { artifact_id: rec.artifact_id });
    const missing = bitmapList(rec.received, rec.chunks, false);
    if (missing.length > 0) {
      return conflict(`${missing.length} of ${rec.chunks} chunks missing: ${missing.slice(0, 20).join(', ')}${missing.length > 20 ? ', …' : ''} (see artifact-status)`);
    }
    // The record says every chunk is there; check the store itself.
    const all = Array.from({ length: rec.chunks }, (_, i) => i);
    const infos = await mapLimit(all, 16, (n) => store.chunkInfo(rec.id, n));
    const absent = all.filter((n) => infos[n] === null || infos[n]!.size !== chunkLength(rec.size, rec.chunk_size, n));
    if (absent.length > 0) {
      await store.updateUpload(rec.id, (r) => ({ ...r, received: absent.reduce((b, n) => bitmapSet(b, n, false), r.received) }));
      return conflict(`${absent.length} chunks are not in the store: ${absent.slice(0, 20).join(', ')}; send them again`);
    }
    if (rec.sha256) {
      const hash = createHash('sha256');
      for (const n of all) {
        if (call.aborted) return null; // the client gave up; its retry starts over
        for await (const part of store.readChunk(rec.id, n, infos[n]!)) hash.update(part);
      }
      const got = hash.digest('hex');
      if (got !== rec.sha256) return conflict(`the uploaded chunks have sha256 ${got}, not ${rec.sha256} as given at init; start a new upload`);
    }
    const now = Date.now();
    const artifactId = artifactIdOf(rec.id);
    const report: ArtifactReport = { ...rec, state: 'complete', artifact_id: artifactId, completed_ms: now };
    const msg = encodeReport(
      { id: artifactId, kind: 'artifact', customerId: rec.customer_id, customer: rec.customer, machine: rec.machine, software: rec.software, tokenId: tok.id, receivedAt: now },
      Buffer.from(JSON.stringify(report)),
    );
    // Queue the artifact first, then mark the upload complete: a failure in between leaves it
    // open, and the retry queues the same artifact id again (the worker's insert is idempotent).
    call.reportId = artifactId;
    const queued = await new Promise<HttpError | null>((resolve) => d.publisher.add(msg, resolve, 'reports', rec.customer_id, rec.machine));
    if (queued) return queued;
    try {
      await store.updateUpload(rec.id, (r) => (r.state === 'complete' ? null : { ...r, state: 'complete', artifact_id: artifactId, completed_ms: now }));
    } catch (e) {
      d.log.warn({ err: e, upload: rec.id }, 'artifact-complete: marking the upload complete failed');
      return storeUnavailable('upload not completed');
    }
    return json(200, { artifact_id: artifactId });
  }
}
