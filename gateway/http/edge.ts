// The HTTP edge of the ingest core (gateway/ingest.ts) on uWS: what every ingest route does around
// the core, written once.
//   begin     framing (400), then the core's checks before the body;
//   receive   the body and the token, whichever arrives last (a token the copy does not know is
//             looked up while the body arrives), the slow-body sweep (408), the size limit (413);
//   answer    an Outcome written to the socket, counted in fleet_gateway_responses_total, and a
//             refusal recorded in the rejection log;
//   failed    the error boundary of every route: 500 to that request, logged and counted.
import { HttpError } from '../../lib/contract/errors.js';
import { readBody, quarantine, type Ctx } from './request.js';
import type { Ingest } from '../ingest.js';
import { isRefusal } from '../ingest.js';
import type { TokenInfo } from '../token-cache.js';
import type { Gate, GatewayDeps, IngestPath, Outcome, RateMode, Refusal } from '../types.js';

type PathOf = Pick<IngestPath, 'customer'> & Partial<IngestPath>;
type BodyReader = (ctx: Ctx, limit: number, onBody: (b: Buffer) => void, onTooLarge: () => void) => void;

export class Edge {
  private readonly d: GatewayDeps;
  private readonly responses;
  private readonly internalErrors;
  // Successful answers are counted in plain numbers on the hot path and added to the Prometheus
  // counter when it is scraped: a labelled inc() hashes its labels on every call.
  private readonly okCounts: Record<string, number> = {};
  private readonly pendingBodies = new Set<Ctx>();

  constructor(readonly core: Ingest) {
    const d = (this.d = core.d);
    this.responses = d.metrics.counter('fleet_gateway_responses_total');
    this.internalErrors = d.metrics.counter('fleet_gateway_internal_errors_total');
    const reported: Record<string, number> = {};
    d.metrics.onScrape(() => {
      for (const kind in this.okCounts) {
        const delta = this.okCounts[kind]! - (reported[kind] ?? 0);
        if (delta > 0) this.responses.labels(kind, '200').inc(delta);
        reported[kind] = this.okCounts[kind]!;
      }
    });
    // Slow clients: a body that has not fully arrived BODY_TIMEOUT_MS after the headers gets 408.
    const sweep = setInterval(() => {
      const now = Date.now();
      for (const ctx of this.pendingBodies) {
        if (ctx.done || ctx.aborted) this.pendingBodies.delete(ctx);
        else if (now > ctx.bodyDeadline) {
          this.pendingBodies.delete(ctx);
          this.reject(ctx, 'timeout', new HttpError(408, `the request body did not arrive within ${d.cfg.gateway.bodyTimeoutMs} ms`));
        }
      }
    }, 1000);
    sweep.unref();
  }

  /** The error boundary of every route (gateway/http/request.ts `guarded`, `ctx.guard`): 500 to that request, logged and counted; the process goes on. */
  readonly failed = (ctx: Ctx, e: unknown): void => {
    try {
      this.internalErrors.labels(ctx.route || 'unknown').inc();
      this.d.log.error({ err: e, route: ctx.route, path: ctx.path.slice(0, 200), report: ctx.reportId || undefined }, 'internal error while handling a request: answered 500');
      if (ctx.done || ctx.aborted) return;
      const which = ctx.reportId ? ` (report ${ctx.reportId})` : '';
      this.reject(ctx, 'internal', new HttpError(500, `internal error${which}: the request may not have been accepted; retry (with an Idempotency-Key, a retry is never stored twice)`));
    } catch (e2) {
      this.d.log.error({ err: e2 }, 'the error boundary itself failed');
    }
  };

  /** A refusal: counted, recorded in the rejection log, answered `{"detail"}`. */
  reject(ctx: Ctx, kind: string, err: HttpError, token?: TokenInfo, customer = ''): void {
    this.responses.labels(kind, String(err.status)).inc();
    this.d.rejections.record({
      at: Date.now(),
      customer_id: token?.customerId ?? '',
      customer: token?.customer ?? customer,
      token_id: token?.id ?? '',
      method: ctx.method,
      path: ctx.path,
      status: err.status,
      detail: err.detail,
      body_size: ctx.bodySize,
      remote: ctx.remote(),
    });
    ctx.sendError(err);
  }

  /** A refusal of the core's checks before the body, against whom they name. */
  refuse(ctx: Ctx, kind: string, r: Refusal): void {
    this.reject(ctx, kind, r.refused, r.token, r.customer);
  }

  /** Counts an answer in fleet_gateway_responses_total (`reject` counts its own). */
  answered(kind: string, status: number): void {
    if (status === 200) this.okCounts[kind] = (this.okCounts[kind] ?? 0) + 1;
    else this.responses.labels(kind, String(status)).inc();
  }

  /** Writes what the core decided: the answer, or the refusal against `tok`. */
  answer(ctx: Ctx, kind: string, o: Outcome, tok?: TokenInfo): void {
    if (o instanceof HttpError) return this.reject(ctx, kind, o, tok);
    this.answered(kind, o.status);
    ctx.send(o.status, o.body, o.headers);
  }

  /** The checks every ingest route makes before its body: framing, then the core's (shutting down, path slugs, token, rate); null when already answered. */
  begin(ctx: Ctx, kind: string, path: PathOf, rate: RateMode = 'take'): Gate | null {
    // uWS frames the body by the first Content-Length; a second one that differs is a request
    // smuggling attempt (RFC 9112 §6.3): 400 and close, and what follows is never served.
    if (ctx.head.framing) {
      quarantine(ctx.res);
      this.reject(ctx, kind, new HttpError(400, ctx.head.framing, { close: true }));
      return null;
    }
    const gate = this.core.admit(path, ctx.head.authorization, rate);
    if (isRefusal(gate)) {
      this.refuse(ctx, kind, gate);
      return null;
    }
    return gate;
  }

  /** The token of a request past `begin`: the copy's, or looked up (null when refused: answered). */
  async token(ctx: Ctx, kind: string, gate: Gate, path: PathOf, rate: RateMode = 'take'): Promise<TokenInfo | null> {
    if (gate.known) return gate.known;
    const t = await this.core.resolve(gate.bearer, path, rate);
    if (!isRefusal(t)) return t;
    this.refuse(ctx, kind, t);
    return null;
  }

  /**
   * The body and the token of a request past `begin`, whichever arrives last: `then` runs once with
   * both, unless the request was answered meanwhile (refused token, 413 over `limit`, 408 from the
   * sweep). The token is usually known; when it is not, it is looked up while
   * the body arrives.
   */
  receive(ctx: Ctx, kind: string, gate: Gate, path: PathOf, opts: { limit: number; tooLarge: string; rate?: RateMode; read?: BodyReader }, then: (tok: TokenInfo, body: Buffer) => void): void {
    let token: TokenInfo | null = gate.known ?? null;
    let body: Buffer | null = null;
    const both = () => {
      if (token && body && !ctx.done) then(token, body);
    };
    if (gate.known === undefined) {
      this.token(ctx, kind, gate, path, opts.rate)
        .then((t) => {
          if (t === null) return;
          token = t;
          both();
        })
        .catch(ctx.fail);
    }
    ctx.bodyDeadline = Date.now() + this.d.cfg.gateway.bodyTimeoutMs;
    this.pendingBodies.add(ctx);
    (opts.read ?? readBody)(
      ctx,
      opts.limit,
      (b) => {
        this.pendingBodies.delete(ctx);
        body = b;
        both();
      },
      () => {
        this.pendingBodies.delete(ctx);
        this.reject(ctx, kind, new HttpError(413, opts.tooLarge), token ?? undefined, path.customer);
      },
    );
  }
}
