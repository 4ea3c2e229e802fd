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
import { createHash, randomUUID } from 'node:crypto';
import type { Handler, JsonRoute, Kit, IngestPath } from './types.js';
import { Ctx } from './request.js';
import type { TokenInfo } from './token-cache.js';
import { compile } from '../lib/contract/validation.js';
import { ArtifactInit } from '../lib/contract/schemas/artifacts.js';
import { HttpError, badRequest, notFound } from '../lib/contract/errors.js';
import { describeQuota, formatBytes } from '../lib/store/quotas.js';
import { MAX_COPY_AGE_MS, type ReserveResult } from '../lib/store/artifact-usage.js';
import { isUuid, uuidFromName, idempotentReportId } from '../lib/contract/ids.js';
import { keyReused } from './idempotency.js';
import { encodeReport } from '../lib/contract/messages.js';
import {
  bitmapHas, bitmapList, bitmapNew, bitmapSet, chunkCount, chunkLength, mapLimit, type UploadRecord, type ArtifactReport,
} from '../lib/store/artifacts.js';

/** Bytes of chunk bodies in memory. One request is always admitted, so a lone upload never starves. */
export class ByteBudget {
  used = 0;
  constructor(readonly limit: number) {}
  take(n: number): boolean {
    if (this.used > 0 && this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }
  release(n: number): void {
    this.used = Math.max(0, this.used - n);
  }
}

const storeUnavailable = (what: string) => new HttpError(503, `${what}: the artifact store (NATS JetStream) did not answer; retry`, { retryAfterS: 2 });
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * readBody (gateway/request.ts) for chunk bodies: with a Content-Length the body is copied once,
 * straight into a buffer of that size (no list of pieces, no concat); without one, pieces are
 * collected up to `limit`. Same callbacks and rules as readBody.
 */
export function readChunkBody(ctx: Ctx, limit: number, declared: number | null, onBody: (b: Buffer) => void, onTooLarge: () => void): void {
  const into = declared !== null && declared <= limit ? Buffer.allocUnsafe(declared) : null;
  let pieces: Buffer[] | null = into ? null : [];
  let finished = false;
  ctx.res.onData(ctx.guard((ab: ArrayBuffer, isLast: boolean) => {
    if (finished) return;
    const at = ctx.bodySize;
    ctx.bodySize += ab.byteLength;
    if (ctx.bodySize > limit || (into && ctx.bodySize > into.length)) {
      finished = true;
      pieces = null;
      return onTooLarge();
    }
    if (into) Buffer.from(ab).copy(into, at);
    else if (ab.byteLength > 0) pieces!.push(Buffer.from(ab.slice(0)));
    if (isLast) {
      finished = true;
      const body = into ? into.subarray(0, ctx.bodySize) : Buffer.concat(pieces!);
      pieces = null;
      onBody(body);
    }
  }));
}

/** The artifact id of an upload: derived, so that every replica completing it names it the same. */
export const artifactIdOf = (uploadId: string) => uuidFromName('artifact', uploadId);

function isOctetStream(ct: string): boolean {
  const semi = ct.indexOf(';');
  return (semi === -1 ? ct : ct.slice(0, semi)).trim().toLowerCase() === 'application/octet-stream';
}

export function artifactRoutes(k: Kit) {
  const { d } = k;
  const { cfg, log, metrics } = d;
  const A = cfg.artifacts;
  const store = () => d.artifacts;
  const budget = new ByteBudget(A.maxInflightBytes);
  const inflight = metrics.gauge('fleet_gateway_artifact_inflight_bytes');
  const chunkBytes = metrics.counter('fleet_gateway_artifact_chunk_bytes_total');

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

  const initAnswer = (rec: UploadRecord) =>
    JSON.stringify({ upload_id: rec.id, chunk_size: rec.chunk_size, chunks: rec.chunks, expires_at: iso(rec.expires_ms) });

  // ---- init (on the JSON ingest path of gateway/server.ts) ----
  // The customer's quotas (lib/store/quotas.ts) from this gateway's copy: the size of one artifact
  // (artifact_max_bytes, 413) and the bytes it may hold (artifact_bytes, 507): the declared size is
  // reserved in Redis before the upload record is created (lib/store/artifact-usage.ts), atomically
  // against every other gateway's reservations, and released if the record cannot be created.
  const quotaRefusals = metrics.counter('fleet_quota_refusals_total');
  const init: JsonRoute = {
    validate: compile(ArtifactInit),
    finish(ctx, tok, _raw, data, path, idemKey) {
      const KIND = 'artifact-init';
      const b = data as unknown as ArtifactInit;
      if (d.quotas.ageMs > MAX_COPY_AGE_MS) {
        const age = Math.round(d.quotas.ageMs / 1000);
        return k.reject(ctx, KIND, new HttpError(503, `upload not started: this gateway's copy of the quotas is ${age} s old (Postgres unreachable); retry`, { retryAfterS: 5 }), tok);
      }
      const quota = d.quotas.quotas(tok.customerId);
      if (b.size > quota.artifact_max_bytes) {
        quotaRefusals.labels('artifact_max_bytes').inc();
        return k.reject(ctx, KIND, new HttpError(413, `an artifact of ${b.size} bytes is over the limit of ${describeQuota('artifact_max_bytes', quota.artifact_max_bytes)}`), tok);
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
      (async () => {
        let r: ReserveResult;
        try {
          r = await d.artifactUsage.reserve(tok.customerId, rec.id, rec.size, quota.artifact_bytes, d.quotas.artifactStored(tok.customerId));
        } catch (e) {
          log.warn({ err: e }, 'artifact-init: the quota reservation (Redis) failed');
          return k.reject(ctx, KIND, new HttpError(503, 'upload not started: the artifact quota check (Redis) did not answer; retry', { retryAfterS: 2 }), tok);
        }
        if (!r.ok) {
          quotaRefusals.labels('artifact_bytes').inc();
          return k.reject(
            ctx,
            KIND,
            new HttpError(
              507,
              `artifact quota exceeded: ${tok.customer} holds ${r.used} bytes (${formatBytes(r.used)}) in stored artifacts and uploads in progress, ` +
                `this upload declares ${rec.size} bytes (${formatBytes(rec.size)}), and the quota is ${describeQuota('artifact_bytes', quota.artifact_bytes)}. ` +
                'Uploads in progress count with their declared size until they complete or expire; ask the operator to raise the quota',
            ),
            tok,
          );
        }
        // Gives back what this init reserved, when it must not keep it.
        const giveBack = () => (r.ok && r.fresh ? d.artifactUsage.release(tok.customerId, rec.id).catch((e) => log.warn({ err: e, upload: rec.id }, 'artifact-init: releasing the reservation failed; the expiry sweep removes it')) : undefined);
        try {
          if ((await store().createUpload(rec)) === 'created') {
            k.answered(KIND, 201);
            return ctx.send(201, initAnswer(rec));
          }
          const old = (await store().getUpload(rec.id))?.rec;
          const same =
            old && old.customer_id === rec.customer_id && old.machine === rec.machine && old.software === rec.software &&
            old.filename === rec.filename && old.size === rec.size && old.sha256 === rec.sha256;
          if (!same) {
            await giveBack();
            return k.reject(ctx, KIND, keyReused(), tok);
          }
          // A completed upload's bytes are counted as stored (or by its own reservation until then).
          if (old.state === 'complete') await giveBack();
          k.answered(KIND, 201);
          ctx.send(201, initAnswer(old));
        } catch (e) {
          log.warn({ err: e }, 'artifact-init: store failed');
          await giveBack();
          k.reject(ctx, KIND, storeUnavailable('upload not started'), tok);
        }
      })().catch(ctx.fail);
    },
  };

  // ---- chunk ----
  const chunk: Handler = (res, req) => {
    const KIND = 'artifact-chunk';
    const ctx = Ctx.of(res, req, cfg.trustProxy, 5, 'PUT');
    const [customer = '', machine = '', software = '', id = '', nText = ''] = ctx.head.params;
    const path = { customer, machine, software };
    const { contentType, contentLength } = ctx.head;

    const a = k.begin(ctx, KIND, path);
    if (!a) return;
    const refuse = (err: HttpError) => k.reject(ctx, KIND, err, a.known, path.customer);
    if (!isUuid(id)) return refuse(badRequest(`invalid upload id ${JSON.stringify(id.slice(0, 80))}: must be a UUID`));
    if (!/^[0-9]{1,9}$/.test(nText)) return refuse(badRequest(`invalid chunk number ${JSON.stringify(nText.slice(0, 80))}: must be an integer from 0`));
    const n = Number(nText);
    if (!isOctetStream(contentType)) {
      return refuse(new HttpError(415, `Content-Type must be application/octet-stream, got ${JSON.stringify(contentType.slice(0, 100))}`));
    }
    const limit = A.chunkSize;
    if (contentLength !== '' && Number(contentLength) > limit) return refuse(new HttpError(413, `chunk of ${contentLength} bytes is over the chunk size of ${limit} bytes`));

    // Admission: this gateway holds at most ARTIFACT_INFLIGHT_BYTES of chunk bodies.
    const want = contentLength !== '' && Number.isFinite(Number(contentLength)) ? Number(contentLength) : limit;
    if (!budget.take(want)) {
      return refuse(new HttpError(503, 'this gateway is busy storing other chunks; retry', { retryAfterS: 1 }));
    }
    inflight.set(budget.used);
    // Released when both the response is done (or the client gone) and the work below is over.
    let holders = 2;
    const drop = () => {
      if (--holders === 0) {
        budget.release(want);
        inflight.set(budget.used);
      }
    };
    let bodyDone: (b: Buffer | null) => void = () => {};
    const bodyP = new Promise<Buffer | null>((r) => (bodyDone = r));
    ctx.onEnd = () => {
      bodyDone(null); // aborted or answered before the body was complete: stop waiting for it
      drop();
    };
    ctx.bodyDeadline = Date.now() + cfg.gateway.bodyTimeoutMs;
    k.pendingBodies.add(ctx);
    readChunkBody(
      ctx,
      limit,
      contentLength !== '' && /^[0-9]+$/.test(contentLength) ? Number(contentLength) : null,
      (b) => {
        k.pendingBodies.delete(ctx);
        bodyDone(b);
      },
      () => {
        k.pendingBodies.delete(ctx);
        refuse(new HttpError(413, `chunk over the chunk size of ${limit} bytes`));
      },
    );
    const tokP = a.known ? Promise.resolve(a.known) : k.resolveToken(ctx, KIND, a.bearer, path);
    const recP = store().getUpload(id).then((r) => ({ r }), (e: unknown) => ({ e }));

    (async () => {
      try {
        const [tok, got, body] = await Promise.all([tokP, recP, bodyP]);
        if (!tok || body === null || ctx.done) return;
        if ('e' in got) {
          log.warn({ err: got.e }, 'artifact-chunk: upload lookup failed');
          return k.reject(ctx, KIND, storeUnavailable('chunk not stored'), tok);
        }
        const rec = usable(got.r, tok, path, id);
        if (rec instanceof HttpError) return k.reject(ctx, KIND, rec, tok);
        if (n >= rec.chunks) {
          return k.reject(ctx, KIND, new HttpError(422, `chunk ${n} is out of range: upload ${id} has chunks 0 … ${rec.chunks - 1}`), tok);
        }
        const expected = chunkLength(rec.size, rec.chunk_size, n);
        if (body.length !== expected) {
          const status = body.length > rec.chunk_size ? 413 : 422;
          return k.reject(ctx, KIND, new HttpError(status, `chunk ${n} must be ${expected} bytes (chunk_size ${rec.chunk_size}, size ${rec.size}), got ${body.length}`), tok);
        }
        let now: UploadRecord | null = rec;
        if (rec.state === 'open' && !bitmapHas(rec.received, n)) {
          const stored = await store().putChunk(id, n, body);
          if (stored === 'stored') chunkBytes.inc(body.length);
          now = await store().updateUpload(id, (r) => (bitmapHas(r.received, n) || r.state !== 'open' ? null : { ...r, received: bitmapSet(r.received, n) }));
          if (!now) return k.reject(ctx, KIND, notFound(`upload ${id} is gone (expired)`), tok);
        }
        k.answered(KIND, 200);
        ctx.send(200, JSON.stringify({ ok: true, received: statusOf(now).received }));
      } catch (e) {
        log.warn({ err: e, upload: id, n }, 'artifact-chunk: store failed');
        k.reject(ctx, KIND, storeUnavailable('chunk not stored'), a.known);
      } finally {
        drop();
      }
    })().catch(ctx.fail);
  };

  /** Shared start of the GET status and POST complete handlers (no body). */
  function withUpload(kind: string, method: string, then: (ctx: Ctx, tok: TokenInfo, rec: UploadRecord, path: IngestPath) => Promise<void>): Handler {
    return (res, req) => {
      const ctx = Ctx.of(res, req, cfg.trustProxy, 4, method);
      const [customer = '', machine = '', software = '', id = ''] = ctx.head.params;
      const path = { customer, machine, software };
      const a = k.begin(ctx, kind, path);
      if (!a) return;
      if (!isUuid(id)) return k.reject(ctx, kind, badRequest(`invalid upload id ${JSON.stringify(id.slice(0, 80))}: must be a UUID`), a.known, path.customer);
      (async () => {
        const tok = a.known ?? (await k.resolveToken(ctx, kind, a.bearer, path));
        if (!tok) return;
        try {
          const rec = usable(await store().getUpload(id), tok, path, id);
          if (rec instanceof HttpError) return k.reject(ctx, kind, rec, tok);
          await then(ctx, tok, rec, path);
        } catch (e) {
          log.warn({ err: e, upload: id }, `${kind}: store failed`);
          k.reject(ctx, kind, storeUnavailable(kind === 'artifact-status' ? 'status unknown' : 'upload not completed'), tok);
        }
      })().catch(ctx.fail);
    };
  }

  // ---- status ----
  const status = withUpload('artifact-status', 'GET', async (ctx, _tok, rec) => {
    k.answered('artifact-status', 200);
    ctx.send(200, JSON.stringify(statusOf(rec)));
  });

  // ---- complete ----
  const complete = withUpload('artifact-complete', 'POST', async (ctx, tok, rec) => {
    const KIND = 'artifact-complete';
    const conflict = (detail: string) => k.reject(ctx, KIND, new HttpError(409, detail), tok);
    if (rec.state === 'complete') {
      k.answered(KIND, 200);
      return ctx.send(200, JSON.stringify({ artifact_id: rec.artifact_id }));
    }
    const missing = bitmapList(rec.received, rec.chunks, false);
    if (missing.length > 0) {
      return conflict(`${missing.length} of ${rec.chunks} chunks missing: ${missing.slice(0, 20).join(', ')}${missing.length > 20 ? ', …' : ''} (see artifact-status)`);
    }
    // The record says every chunk is there; check the store itself.
    const all = Array.from({ length: rec.chunks }, (_, i) => i);
    const infos = await mapLimit(all, 16, (n) => store().chunkInfo(rec.id, n));
    const absent = all.filter((n) => infos[n] === null || infos[n]!.size !== chunkLength(rec.size, rec.chunk_size, n));
    if (absent.length > 0) {
      await store().updateUpload(rec.id, (r) => ({ ...r, received: absent.reduce((b, n) => bitmapSet(b, n, false), r.received) }));
      return conflict(`${absent.length} chunks are not in the store: ${absent.slice(0, 20).join(', ')}; send them again`);
    }
    if (rec.sha256) {
      const hash = createHash('sha256');
      for (const n of all) {
        if (ctx.aborted) return; // the client gave up; its retry starts over
        for await (const part of store().readChunk(rec.id, n, infos[n]!)) hash.update(part);
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
    ctx.reportId = artifactId;
    d.publisher.add(msg, ctx.guard((err: HttpError | null) => {
      if (err) return k.reject(ctx, KIND, err, tok);
      store()
        .updateUpload(rec.id, (r) => (r.state === 'complete' ? null : { ...r, state: 'complete', artifact_id: artifactId, completed_ms: now }))
        .then(
          () => {
            k.answered(KIND, 200);
            ctx.send(200, JSON.stringify({ artifact_id: artifactId }));
          },
          (e) => {
            log.warn({ err: e, upload: rec.id }, 'artifact-complete: marking the upload complete failed');
            k.reject(ctx, KIND, storeUnavailable('upload not completed'), tok);
          },
        )
        .catch(ctx.fail);
    }));
  });

  return { init, chunk, status, complete };
}
