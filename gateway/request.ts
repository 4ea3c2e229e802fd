// One HTTP request on uWS, and the rules for touching it: everything needed from the request is
// copied before any await (uWS reuses it), onData chunks are copied before being kept, onAborted is
// always registered and nothing is written after an abort, and every write happens inside cork().
import type { HttpResponse } from './uws.js';
import { HttpError, statusLine } from '../lib/errors.js';

/**
 * Strings handed to uWS are converted to bytes on every call; pre-encoded bytes are not. Measured
 * on the heartbeat path: one writeHeader with two string arguments cost about 2 µs per request, a
 * sixth of the gateway's CPU per request (bench/README.md). The hot path uses these instead.
 */
const enc = new TextEncoder();
/**
 * The bytes of an ASCII string that still read as the string where uWS's pure-JS fallback (allowed
 * with UWS_ALLOW_FALLBACK=1) calls toString() on header names and values or uses them as keys.
 */
class AsciiBytes extends Uint8Array {
  static get [Symbol.species](): Uint8ArrayConstructor {
    return Uint8Array; // slices and maps are plain bytes
  }
  constructor(private readonly text: string) {
    super(enc.encode(text));
  }
  override toString(): string {
    return this.text;
  }
}
export const bytes = (s: string): Uint8Array => new AsciiBytes(s);
const CONTENT_TYPE = bytes('Content-Type');
const APPLICATION_JSON = bytes('application/json');
/** The request headers the ingest path reads, as bytes (uWS's getHeader takes lower-case names). */
export const H = {
  authorization: bytes('authorization'),
  contentType: bytes('content-type'),
  contentLength: bytes('content-length'),
  idempotencyKey: bytes('idempotency-key'),
  forwardedFor: bytes('x-forwarded-for'),
};

export class Ctx {
  aborted = false;
  done = false;
  bodySize = 0;
  bodyDeadline = 0;
  /** Runs once, when the response has been sent or the client went away (resource release). */
  onEnd: (() => void) | null = null;
  private remoteText: string | null = null;

  constructor(
    readonly res: HttpResponse,
    readonly method: string,
    readonly path: string,
    readonly forwardedFor: string,
  ) {
    res.onAborted(() => {
      this.aborted = true;
      this.ended();
    });
  }

  private ended(): void {
    const f = this.onEnd;
    this.onEnd = null;
    f?.();
  }

  /** The client's address: X-Forwarded-For's first hop when the proxy is trusted, else the peer. */
  remote(): string {
    if (this.remoteText !== null) return this.remoteText;
    if (this.forwardedFor) this.remoteText = this.forwardedFor.split(',')[0]!.trim();
    else if (!this.aborted && !this.done) this.remoteText = Buffer.from(this.res.getRemoteAddressAsText()).toString();
    else this.remoteText = '';
    return this.remoteText;
  }

  send(status: number, body: string | Uint8Array, headers?: Record<string, string>, close = false): void {
    if (this.aborted || this.done) return;
    this.done = true;
    const res = this.res;
    res.cork(() => {
      if (status !== 200) res.writeStatus(statusLine(status)); // 200 OK is uWS's default
      res.writeHeader(CONTENT_TYPE, APPLICATION_JSON);
      if (headers) for (const k in headers) res.writeHeader(k, headers[k]!);
      res.end(body, close);
    });
    this.ended();
  }

  sendError(err: HttpError): void {
    const headers = err.retryAfterS ? { 'Retry-After': String(err.retryAfterS) } : undefined;
    // A body we refused to read (413) or could not finish (408): close, so the connection does
    // not go on carrying the rest of it.
    this.send(err.status, err.body(), headers, err.status === 413 || err.status === 408);
  }
}

/**
 * Collects the body up to `limit` bytes. `onTooLarge` runs once when the limit is passed; `onBody`
 * runs with the whole body otherwise. The caller sets ctx.bodyDeadline for the slow-client sweep.
 */
export function readBody(ctx: Ctx, limit: number, onBody: (body: Buffer) => void, onTooLarge: () => void): void {
  let chunks: Buffer[] | null = [];
  ctx.res.onData((ab, isLast) => {
    if (chunks === null) return;
    ctx.bodySize += ab.byteLength;
    if (ctx.bodySize > limit) {
      chunks = null;
      onTooLarge();
      return;
    }
    if (ab.byteLength > 0) chunks.push(Buffer.from(ab.slice(0)));
    if (isLast) {
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      chunks = null;
      onBody(body);
    }
  });
}
