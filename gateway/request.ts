// One HTTP request on uWS, and the rules for touching it: everything needed from the request is
// copied before any await (uWS reuses it), onData chunks are copied before being kept, onAborted is
// always registered and nothing is written after an abort, and every write happens inside cork().
import type { HttpResponse } from './uws.js';
import { HttpError, statusLine } from '../lib/errors.js';

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

  send(status: number, body: string, headers?: Record<string, string>, close = false): void {
    if (this.aborted || this.done) return;
    this.done = true;
    const res = this.res;
    res.cork(() => {
      res.writeStatus(status === 200 ? '200 OK' : statusLine(status));
      res.writeHeader('Content-Type', 'application/json');
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
