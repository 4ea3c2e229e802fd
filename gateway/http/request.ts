// One HTTP request on uWS, and the rules for touching it: everything needed from the request is
// copied before any await (uWS reuses it), onData chunks are copied before being kept, onAborted is
// always registered and nothing is written after an abort, and every write happens inside cork().
import type { HttpResponse, HttpRequest } from './uws.js';
import { type HttpError, statusLine } from '../../lib/contract/errors.js';
import { clientAddress, type TrustProxy } from '../../lib/infra/client-address.js';
import type { RouteTimer } from '../../lib/infra/metrics.js';
import type { RequestHead } from '../types.js';

/** A uWS route handler. */
export type Handler = (res: HttpResponse, req: HttpRequest) => void;

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
  fault: bytes('x-fleet-fault'),
};

const NO_HEAD: RequestHead = { params: [], authorization: '', contentType: '', contentLength: '', idempotencyKey: '', framing: null, fault: '' };

/**
 * Fault injection for the tests of the error boundary (GATEWAY_FAULT_INJECTION=1, never in
 * production): a request with `X-Fleet-Fault: handler | body | publish` makes its route throw at
 * that step, as a bug would.
 */
let faultInjection = false;
export function enableFaultInjection(on: boolean): void {
  faultInjection = on;
}
export function injectFault(ctx: Ctx, step: 'handler' | 'body' | 'publish'): void {
  if (ctx.head.fault === step) throw new Error(`injected fault at ${step} (GATEWAY_FAULT_INJECTION)`);
}

/**
 * The route timer and arrival time of the request whose handler is running (set by timed(), taken
 * by the Ctx the handler makes). Handlers make their Ctx synchronously (uWS's request object is
 * valid only then), so the hand-over needs no argument through every handler.
 */
let arrivingTimer: RouteTimer | null = null;
let arrivingAt = 0;

/** Wraps a route's handler: its answer (Ctx.send) is timed from now, by `timer`. */
export function timed<H extends (res: HttpResponse, req: HttpRequest) => void>(timer: RouteTimer, h: H): H {
  return ((res: HttpResponse, req: HttpRequest) => {
    arrivingTimer = timer;
    arrivingAt = performance.now();
    try {
      h(res, req);
    } finally {
      arrivingTimer = null;
    }
  }) as H;
}

/**
 * The error boundary of a route: an exception while it handles a request (in the handler itself,
 * or in a callback wrapped by `ctx.guard`) answers that request 500 through `onFail`, and the
 * process goes on serving everyone else. uWS ends the process on an exception in a callback.
 */
export type FailureHandler = (ctx: Ctx, e: unknown) => void;
let arrivingCtx: Ctx | null = null;
let arrivingRoute = '';

export function guarded<H extends (res: HttpResponse, req: HttpRequest) => void>(route: string, onFail: FailureHandler, h: H): H {
  return ((res: HttpResponse, req: HttpRequest) => {
    arrivingCtx = null;
    arrivingRoute = route;
    Ctx.onFail = onFail;
    try {
      h(res, req);
    } catch (e) {
      // Before the handler made its Ctx: one made now answers (the handler returns without an answer).
      onFail(arrivingCtx ?? new Ctx(res, 'POST', safeUrl(req), ''), e);
    } finally {
      arrivingCtx = null;
    }
  }) as H;
}

function safeUrl(req: HttpRequest): string {
  try {
    return req.getUrl();
  } catch {
    return '';
  }
}

export class Ctx {
  /** Set by `guarded`: what a failure inside one of this Ctx's callbacks does. */
  static onFail: FailureHandler | null = null;
  aborted = false;
  done = false;
  /** The route (operationId) that made it: the error boundary's label. */
  readonly route = arrivingRoute;
  /** The report id once one is made (logged with a failure). */
  reportId = '';
  bodySize = 0;
  bodyDeadline = 0;
  /** Runs once, when the response has been sent or the client went away (resource release). */
  onEnd: (() => void) | null = null;
  private remoteText: string | null = null;
  /** Times the answer (fleet_http_request_duration_seconds); null when the route is not timed. */
  private readonly timer: RouteTimer | null = arrivingTimer;
  private readonly arrivedAt = arrivingAt;

  /**
   * The one place a request is read: everything the handlers need is copied here, before any
   * await. `params`: how many path parameters the route has.
   */
  static of(res: HttpResponse, req: HttpRequest, trust: TrustProxy, params = 0, method = req.getCaseSensitiveMethod()): Ctx {
    const p: string[] = [];
    for (let i = 0; i < params; i++) p.push(req.getParameter(i) ?? '');
    const head: RequestHead = {
      params: p,
      authorization: req.getHeader(H.authorization),
      contentType: req.getHeader(H.contentType),
      contentLength: req.getHeader(H.contentLength),
      idempotencyKey: req.getHeader(H.idempotencyKey),
      framing: conflictingLength(req),
      fault: faultInjection ? req.getHeader(H.fault) : '',
    };
    return new Ctx(res, method, req.getUrl(), trust ? req.getHeader(H.forwardedFor) : '', trust, head);
  }

  constructor(
    readonly res: HttpResponse,
    readonly method: string,
    readonly path: string,
    /** X-Forwarded-For as received ('' when no proxy is trusted: it is not even read). */
    readonly forwardedFor: string,
    private readonly trust: TrustProxy = null,
    readonly head: RequestHead = NO_HEAD,
  ) {
    arrivingTimer = null; // one Ctx per request
    arrivingCtx = this;
    res.onAborted(() => {
      this.aborted = true;
      this.ended();
    });
  }

  /** This request's error boundary (gateway/http/edge.ts `failed` answers 500, logs and counts). */
  readonly fail = (e: unknown): void => {
    const f = Ctx.onFail;
    if (f) f(this, e);
    else throw e;
  };

  /** `fn`, with an exception in it answered by this request's error boundary (for callbacks run later). */
  guard<A extends unknown[]>(fn: (...args: A) => void): (...args: A) => void {
    return (...args: A) => {
      try {
        fn(...args);
      } catch (e) {
        this.fail(e);
      }
    };
  }

  private ended(): void {
    const f = this.onEnd;
    this.onEnd = null;
    f?.();
  }

  /** The client's address: the peer, or behind trusted proxies the right-most untrusted X-Forwarded-For entry (lib/infra/client-address.ts). */
  remote(): string {
    if (this.remoteText !== null) return this.remoteText;
    const peer = !this.aborted && !this.done ? Buffer.from(this.res.getRemoteAddressAsText()).toString() : '';
    this.remoteText = clientAddress(peer, this.forwardedFor, this.trust);
    return this.remoteText;
  }

  /** `close`: close the connection once the answer is sent. JSON unless `headers` name another Content-Type. */
  send(status: number, body: string | Uint8Array, headers?: Record<string, string>, close = false): void {
    if (this.aborted || this.done) return;
    this.done = true;
    const res = this.res;
    res.cork(() => {
      if (status !== 200) res.writeStatus(statusLine(status)); // 200 OK is uWS's default
      if (headers?.['Content-Type'] === undefined) res.writeHeader(CONTENT_TYPE, APPLICATION_JSON);
      if (headers) for (const k in headers) res.writeHeader(k, headers[k]!);
      res.end(body, close);
    });
    this.timer?.(status, (performance.now() - this.arrivedAt) / 1000);
    this.ended();
  }

  sendError(err: HttpError): void {
    const headers: Record<string, string> | undefined = err.retryAfterS ? { 'Retry-After': String(err.retryAfterS) } : err.allow ? { Allow: err.allow.join(', ') } : undefined;
    // A body we refused to read (413) or could not finish (408), or framing we cannot trust (400
    // on conflicting lengths): close, so the connection does not go on carrying the rest of it.
    this.send(err.status, err.body(), headers, err.status === 413 || err.status === 408 || err.close === true);
  }
}

/**
 * Collects the body up to `limit` bytes. `onTooLarge` runs once when the limit is passed; `onBody`
 * runs with the whole body otherwise. The caller sets ctx.bodyDeadline for the slow-client sweep.
 */
export function readBody(ctx: Ctx, limit: number, onBody: (body: Buffer) => void, onTooLarge: () => void): void {
  let chunks: Buffer[] | null = [];
  ctx.res.onData(ctx.guard((ab: ArrayBuffer, isLast: boolean) => {
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
  }));
}

/**
 * Why the request's Content-Length headers cannot be trusted, or null. uWS frames the body by the
 * first one; a second that differs is request smuggling (RFC 9112 §6.3: 400 and close). One walk
 * over the header list; identical repeats are one length.
 */
export function conflictingLength(req: HttpRequest): string | null {
  let first: string | null = null;
  let conflict = false;
  try {
    req.forEach((k, v) => {
      if (k !== 'content-length') return;
      for (const part of v.split(',')) {
        const x = part.trim();
        if (first === null) first = x;
        else if (x !== first) conflict = true;
      }
    });
  } catch {
    // uWS's pure-JS fallback (UWS_ALLOW_FALLBACK=1) has no forEach; Node's own HTTP parser under
    // it refuses conflicting lengths with 400 before the gateway sees the request.
    return null;
  }
  return conflict ? 'conflicting Content-Length headers' : null;
}

// A connection whose framing cannot be trusted is answered 400 and closed, but uWS has already
// parsed whatever else arrived with it and dispatches it, synchronously, as the next request: the
// smuggled one. It is recognised by arriving from the same peer in the same turn of the event loop
// (the set is emptied at the next turn) and closed without an answer, one turn later so that the
// 400 before it is sent first. Another connection from the same address in that same turn (behind a
// proxy) is closed too: it was not acknowledged, and its client retries.
const quarantined = new Set<string>();
const peerOf = (res: HttpResponse) => Buffer.from(res.getRemoteAddressAsText()).toString();

export function quarantine(res: HttpResponse): void {
  if (quarantined.size === 0) setImmediate(() => quarantined.clear());
  quarantined.add(peerOf(res));
}

/** Wraps a route handler: a request dispatched right behind a framing violation is never served. */
export function unlessQuarantined<H extends (res: HttpResponse, req: HttpRequest) => void>(h: H): H {
  return ((res: HttpResponse, req: HttpRequest) => {
    if (quarantined.size === 0 || !quarantined.has(peerOf(res))) return h(res, req);
    let gone = false;
    res.onAborted(() => (gone = true));
    setImmediate(() => {
      if (!gone) res.close();
    });
  }) as H;
}
