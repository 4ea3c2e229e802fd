// The artifact upload routes on uWS (the operations are gateway/artifacts.ts, transport-free):
//   PUT  …/artifact-chunk/{upload_id}/{n}    raw bytes, read within this gateway's byte budget
//   GET  …/artifact-status/{upload_id}
//   POST …/artifact-complete/{upload_id}
// (artifact-init is on the JSON ingest path, gateway/http/routes.ts.) A chunk body is held in
// memory only while it is stored; ARTIFACT_INFLIGHT_BYTES bounds the chunk bodies one gateway
// holds at once (503 with Retry-After above it).
import { HttpError, badRequest } from '../../lib/contract/errors.js';
import { isUuid } from '../../lib/contract/ids.js';
import { Ctx } from './request.js';
import type { Edge } from './edge.js';
import type { Handler } from './request.js';
import type { TokenInfo } from '../token-cache.js';
import type { IngestPath } from '../types.js';
import type { Uploads } from '../artifacts.js';

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

/**
 * readBody (gateway/http/request.ts) for chunk bodies: with a Content-Length the body is copied once,
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

function isOctetStream(ct: string): boolean {
  const semi = ct.indexOf(';');
  return (semi === -1 ? ct : ct.slice(0, semi)).trim().toLowerCase() === 'application/octet-stream';
}

export function artifactRoutes(edge: Edge, uploads: Uploads): { chunk: Handler; status: Handler; complete: Handler } {
  const { d } = edge.core;
  const { cfg, metrics } = d;
  const limit = cfg.artifacts.chunkSize;
  const budget = new ByteBudget(cfg.artifacts.maxInflightBytes);
  const inflight = metrics.gauge('fleet_gateway_artifact_inflight_bytes');

  const chunk: Handler = (res, req) => {
    const KIND = 'artifact-chunk';
    const ctx = Ctx.of(res, req, cfg.trustProxy, 5, 'PUT');
    const [customer = '', machine = '', software = '', id = '', nText = ''] = ctx.head.params;
    const path = { customer, machine, software };
    const { contentType, contentLength } = ctx.head;

    const gate = edge.begin(ctx, KIND, path);
    if (!gate) return;
    const refuse = (err: HttpError) => edge.reject(ctx, KIND, err, gate.known, path.customer);
    if (!isUuid(id)) return refuse(badRequest(`invalid upload id ${JSON.stringify(id.slice(0, 80))}: must be a UUID`));
    if (!/^[0-9]{1,9}$/.test(nText)) return refuse(badRequest(`invalid chunk number ${JSON.stringify(nText.slice(0, 80))}: must be an integer from 0`));
    const n = Number(nText);
    if (!isOctetStream(contentType)) {
      return refuse(new HttpError(415, `Content-Type must be application/octet-stream, got ${JSON.stringify(contentType.slice(0, 100))}`));
    }
    if (contentLength !== '' && Number(contentLength) > limit) return refuse(new HttpError(413, `chunk of ${contentLength} bytes is over the chunk size of ${limit} bytes`));

    // Admission: this gateway holds at most ARTIFACT_INFLIGHT_BYTES of chunk bodies.
    const want = contentLength !== '' && Number.isFinite(Number(contentLength)) ? Number(contentLength) : limit;
    if (!budget.take(want)) return refuse(new HttpError(503, 'this gateway is busy storing other chunks; retry', { retryAfterS: 1 }));
    inflight.set(budget.used);
    // Released when both the response is done (or the client gone) and the work on the body is
    // over (or never began).
    let holders = 2;
    let working = false;
    const drop = () => {
      if (--holders === 0) {
        budget.release(want);
        inflight.set(budget.used);
      }
    };
    ctx.onEnd = () => {
      drop();
      if (!working) drop();
    };
    const lookup = uploads.lookup(id);
    const declared = contentLength !== '' && /^[0-9]+$/.test(contentLength) ? Number(contentLength) : null;
    edge.receive(
      ctx,
      KIND,
      gate,
      path,
      { limit, tooLarge: `chunk over the chunk size of ${limit} bytes`, read: (c, l, onBody, onTooLarge) => readChunkBody(c, l, declared, onBody, onTooLarge) },
      (tok, body) => {
        working = true;
        lookup
          .then((got) => uploads.chunk(tok, path, id, n, body, got))
          .then((o) => edge.answer(ctx, KIND, o, tok))
          .catch(ctx.fail)
          .finally(() => {
            working = false;
            if (ctx.done || ctx.aborted) drop(); // else the response is still held: onEnd drops both
          });
      },
    );
  };

  /** GET status and POST complete: no body; the upload id is checked before the token is looked up. */
  function withUpload(kind: string, method: string, then: (ctx: Ctx, tok: TokenInfo, path: IngestPath, id: string) => Promise<void>): Handler {
    return (res, req) => {
      const ctx = Ctx.of(res, req, cfg.trustProxy, 4, method);
      const [customer = '', machine = '', software = '', id = ''] = ctx.head.params;
      const path = { customer, machine, software };
      const gate = edge.begin(ctx, kind, path);
      if (!gate) return;
      if (!isUuid(id)) return edge.reject(ctx, kind, badRequest(`invalid upload id ${JSON.stringify(id.slice(0, 80))}: must be a UUID`), gate.known, path.customer);
      (async () => {
        const tok = await edge.token(ctx, kind, gate, path);
        if (tok) await then(ctx, tok, path, id);
      })().catch(ctx.fail);
    };
  }

  const status = withUpload('artifact-status', 'GET', async (ctx, tok, path, id) => edge.answer(ctx, 'artifact-status', await uploads.status(tok, path, id), tok));
  const complete = withUpload('artifact-complete', 'POST', async (ctx, tok, path, id) => {
    const o = await uploads.complete(ctx, tok, path, id);
    if (o) edge.answer(ctx, 'artifact-complete', o, tok);
  });

  return { chunk, status, complete };
}
