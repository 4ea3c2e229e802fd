// The gateway's HTTP surface: the ingest routes of lib/contract/routes.ts on uWS. Per request, in order:
// framing (400), path slugs (400), bearer token (403), per-token rate (429), Content-Type (415),
// size (413), body, JSON (400), schema (422), then one report handed to the publisher and answered
// when JetStream has stored it (200), or 503. Every refusal is answered `{"detail"}` and goes to the
// rejection log. The decisions are gateway/admission.ts (one policy per kind); this file does the I/O.
// The steps after the body (schema to queue) are shared with the batch route (gateway/batch.ts).
import { randomUUID } from 'node:crypto';
import type { TemplatedApp } from './uws.js';
import { HttpError } from '../lib/contract/errors.js';
import { idempotentReportId } from '../lib/contract/ids.js';
import { encodeReport } from '../lib/contract/messages.js';
import { routesOf, colonPath, checkHandlers, allowedMethods } from '../lib/contract/routes.js';
import type { Validator } from '../lib/contract/validation.js';
import type { ReportKind } from '../lib/contract/schemas/ingest.js';
import { reportChecker, type ReportChecker, type CheckedKind } from '../lib/domain/report-check.js';
import { Ctx, readBody, quarantine, unlessQuarantined, timed, guarded, injectFault, enableFaultInjection } from './request.js';
import { routeTimer } from '../lib/infra/metrics.js';
import type { TokenInfo } from './token-cache.js';
import { RateLimiter } from './rate-limiter.js';
import { acceptedAnswer } from './help-coverage.js';
import { metricsRoute } from './metrics.js';
import { artifactRoutes } from './artifacts.js';
import { batchRoute } from './batch.js';
import { keyReused, keyRegisterUnavailable } from './idempotency.js';
import { KINDS, authorise, parseBearer, missingBearer, pathRefusal, headRefusal, parseJsonObject, deepRefusal, schemaRefusal, type JsonKind } from './admission.js';
import type { GatewayDeps, Handler, IngestPath, JsonRoute, Kit, PreparedReport, RateMode } from './types.js';
import { laneOf } from './publisher.js';

const OK = '{"ok":true}';

export function registerRoutes(app: TemplatedApp, d: GatewayDeps): void {
  const { cfg, metrics } = d;
  enableFaultInjection(cfg.gateway.faultInjection);
  const limiter = new RateLimiter(cfg.gateway.rateLimit, cfg.gateway.rateBurst);
  const responses = metrics.counter('fleet_gateway_responses_total');
  // Successful answers are counted in plain numbers on the hot path and added to the Prometheus
  // counter when it is scraped: a labelled inc() hashes its labels on every call.
  const okCounts: Record<string, number> = {};
  const okReported: Record<string, number> = {};
  metrics.onScrape(() => {
    for (const kind in okCounts) {
      const delta = okCounts[kind]! - (okReported[kind] ?? 0);
      if (delta > 0) responses.labels(kind, '200').inc(delta);
      okReported[kind] = okCounts[kind]!;
    }
  });
  const countOk = (kind: string) => void (okCounts[kind] = (okCounts[kind] ?? 0) + 1);
  const internalErrors = metrics.counter('fleet_gateway_internal_errors_total');

  /** The error boundary of every route (gateway/request.ts `guarded`, `ctx.guard`): 500 to that request, logged and counted; the process goes on. */
  function failed(ctx: Ctx, e: unknown): void {
    try {
      internalErrors.labels(ctx.route || 'unknown').inc();
      d.log.error({ err: e, route: ctx.route, path: ctx.path.slice(0, 200), report: ctx.reportId || undefined }, 'internal error while handling a request: answered 500');
      if (ctx.done || ctx.aborted) return;
      const which = ctx.reportId ? ` (report ${ctx.reportId})` : '';
      reject(ctx, 'internal', new HttpError(500, `internal error${which}: the request may not have been accepted; retry (with an Idempotency-Key, a retry is never stored twice)`));
    } catch (e2) {
      d.log.error({ err: e2 }, 'the error boundary itself failed');
    }
  }
  const pendingBodies = new Set<Ctx>();

  function reject(ctx: Ctx, kind: string, err: HttpError, token?: TokenInfo, customer = ''): void {
    responses.labels(kind, String(err.status)).inc();
    d.rejections.record({
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

  // Slow clients: a body that has not fully arrived BODY_TIMEOUT_MS after the headers gets 408.
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const ctx of pendingBodies) {
      if (ctx.done || ctx.aborted) pendingBodies.delete(ctx);
      else if (now > ctx.bodyDeadline) {
        pendingBodies.delete(ctx);
        reject(ctx, 'timeout', new HttpError(408, `the request body did not arrive within ${cfg.gateway.bodyTimeoutMs} ms`));
      }
    }
  }, 1000);
  sweep.unref();

  // Per customer, over all its tokens: requests (batch entries one each) and body bytes
  // (docs/operations.md "Quotas per customer"). Whatever one customer sends, this is what it can
  // cost the pipeline the others share.
  const customerRequests = new RateLimiter(cfg.gateway.customerRate.perS, cfg.gateway.customerRate.burst);
  const customerBytes = new RateLimiter(cfg.gateway.customerBytes.perS, cfg.gateway.customerBytes.burst);
  const quotaRefusals = metrics.counter('fleet_quota_refusals_total');
  const refusedBy = { requests: quotaRefusals.labels('ingest_requests_per_s'), bytes: quotaRefusals.labels('ingest_bytes_per_s') };
  const overRate = () => new HttpError(429, `over the rate limit of ${cfg.gateway.rateLimit} requests/s for this token`, { retryAfterS: limiter.retryAfterS() });
  const overCustomerRate = (t: TokenInfo) => {
    refusedBy.requests.inc();
    const perS = ratesOf(t)?.requests.perS ?? cfg.gateway.customerRate.perS;
    return new HttpError(429, `over the ingest rate of ${perS} requests/s for customer ${t.customer} (all its tokens together: quota ingest_requests_per_s)`, { retryAfterS: 1 });
  };
  /** A customer's own buckets where a system administrator overrode its ingest quotas (lib/store/quotas.ts), else undefined: the defaults. */
  const ratesOf = (t: TokenInfo) => d.quotas.ingestRates(t.customerId) ?? undefined;
  /** `take`: one token for this request; `has`: only that one is left (a batch takes one per entry once it has read them). */
  function rateLimited(t: TokenInfo, mode: RateMode = 'take'): HttpError | null {
    const now = Date.now();
    const own = ratesOf(t);
    if (mode === 'has') return !limiter.has(t.id, now) ? overRate() : !customerRequests.has(t.customerId, now, own?.requests) ? overCustomerRate(t) : null;
    if (!limiter.take(t.id, now)) return overRate();
    if (customerRequests.take(t.customerId, now, own?.requests)) return null;
    limiter.refund(t.id, 1);
    return overCustomerRate(t);
  }
  /** Up to `n` requests of this token and its customer (a batch's entries): how many both allow. */
  function takeUpTo(t: TokenInfo, n: number): number {
    const now = Date.now();
    const byToken = limiter.takeUpTo(t.id, n, now);
    const both = customerRequests.takeUpTo(t.customerId, byToken, now, ratesOf(t)?.requests);
    if (both < byToken) limiter.refund(t.id, byToken - both);
    return both;
  }
  /** The customer's byte rate, for a body of `size` bytes (all or nothing). */
  function overBytes(t: TokenInfo, size: number): HttpError | null {
    return customerBytes.takeAll(t.customerId, size, Date.now(), ratesOf(t)?.bytes) ? null : overByteRate(t, size);
  }
  /**
   * Before the body: a Content-Length the customer's byte rate cannot take now is refused without
   * reading the body (and the connection closed, so the rest of it is not read either): a customer
   * flooding large bodies costs the gateway no parsing.
   */
  function announcedOverBytes(t: TokenInfo | undefined, contentLength: string): HttpError | null {
    if (t === undefined || contentLength === '') return null;
    const size = Number(contentLength);
    if (!(size > 0) || customerBytes.has(t.customerId, Date.now(), ratesOf(t)?.bytes, size)) return null;
    return overByteRate(t, size, true);
  }
  function overByteRate(t: TokenInfo, size: number, close = false): HttpError {
    refusedBy.bytes.inc();
    const perS = ratesOf(t)?.bytes.perS ?? cfg.gateway.customerBytes.perS;
    return new HttpError(429, `over the ingest byte rate of ${perS} bytes/s for customer ${t.customer} (all its tokens together: quota ingest_bytes_per_s)`, {
      retryAfterS: Math.max(1, Math.ceil(size / perS)),
      close,
    });
  }

  // Schema and storability of each kind (lib/domain/report-check.ts: the same check a worker repeats on a
  // report storage refused).
  const checker = reportChecker(cfg.gateway.maxItems);
  const validators = new Map<CheckedKind, Validator<unknown>>();
  const validatorOf = (kind: CheckedKind) => validators.get(kind) ?? validators.set(kind, schemaOf(checker, kind)).get(kind)!;

  /**
   * After a body is parsed, the same for a single request and a batch entry: the schema (422),
   * beyond it (snapshot size 413, free trees and typed leaves 422), the licence's device limit (403).
   */
  function bodyRefusal(kind: JsonKind, validate: Validator<unknown>, tok: TokenInfo, machine: string, data: Record<string, unknown>, rawSize: number): HttpError | null {
    return schemaRefusal(validate, data) ?? deepRefusal(kind, data, rawSize, checker) ?? (KINDS[kind].createsMachines ? d.licences.check(tok.customerId, machine) : null);
  }

  /**
   * The report as queued (lib/contract/messages.ts: the raw body wrapped, never re-serialised) and the answer
   * once JetStream has it, or 413 when it is over the queue's message limit. Pending agent commands
   * go out in the answer of the kinds that offer them, and their ids into the report (recorded as
   * delivered by the worker). With an Idempotency-Key the id is derived from customer and key.
   */
  function prepare(kind: JsonKind, tok: TokenInfo, path: IngestPath, raw: Buffer, data: unknown, idemKey: string, commandId = ''): HttpError | PreparedReport {
    const offer = KINDS[kind].offersCommands ? d.commands.offer(tok.customerId, path.machine, path.software) : null;
    const id = idemKey ? idempotentReportId(tok.customerId, kind, path.machine, path.software, idemKey) : randomUUID();
    const report = encodeReport(
      { id, kind: kind as ReportKind, customerId: tok.customerId, customer: tok.customer, machine: path.machine, software: path.software, tokenId: tok.id, receivedAt: Date.now(), idempotencyKey: idemKey || undefined, deliveredCommands: offer?.ids, commandId: commandId || undefined },
      raw,
    );
    if (report.length > d.publisher.maxReportBytes) return new HttpError(413, `report of ${report.length} bytes is over the queue's message limit`);
    const answer = offer ? { status: 200, body: offer.body } : acceptedAnswer(kind, data, tok.customerId, path.software, d.help);
    return { id, report, answer };
  }

  function ingestReport(kind: JsonKind, route: JsonRoute = {}): Handler {
    const policy = KINDS[kind];
    const validate = route.validate ?? validatorOf(policy.schema!);
    const params = policy.namesCommand ? 4 : route.software ? 2 : 3;
    return (res, req) => {
      const ctx = Ctx.of(res, req, cfg.trustProxy, params, 'POST');
      injectFault(ctx, 'handler');
      const [customer = '', machine = '', third = '', commandId = ''] = ctx.head.params;
      const path: IngestPath = { customer, machine, software: route.software ?? third };
      const idemKey = ctx.head.idempotencyKey;
      const gate = begin(ctx, kind, path);
      if (gate === null) return;
      const { bearer, known } = gate;
      const early = headRefusal(kind, ctx.head, commandId, cfg.gateway.bodyLimit) ?? announcedOverBytes(known, ctx.head.contentLength);
      if (early) return reject(ctx, kind, early, known, customer);

      // The token is usually known; when it is not, look it up while the body arrives.
      let token: TokenInfo | undefined | null = known ?? null;
      let body: Buffer | null = null;
      if (known === undefined) {
        resolveToken(ctx, kind, bearer, path)
          .then((t) => {
            if (t === null) return;
            token = t;
            if (body !== null) accept(t, body);
          })
          .catch(ctx.fail);
      }
      const limit = cfg.gateway.bodyLimit;
      ctx.bodyDeadline = Date.now() + cfg.gateway.bodyTimeoutMs;
      pendingBodies.add(ctx);
      readBody(
        ctx,
        limit,
        (b) => {
          pendingBodies.delete(ctx);
          body = b;
          if (token) accept(token, body);
        },
        () => {
          pendingBodies.delete(ctx);
          reject(ctx, kind, new HttpError(413, `body over the limit of ${limit} bytes`), token ?? undefined, customer);
        },
      );

      function accept(tok: TokenInfo, raw: Buffer): void {
        if (ctx.done) return;
        injectFault(ctx, 'body');
        const bytes = overBytes(tok, raw.length);
        if (bytes) return reject(ctx, kind, bytes, tok);
        const parsed = parseJsonObject(raw, cfg.gateway.json, route.spanPath);
        if (parsed instanceof HttpError) return reject(ctx, kind, parsed, tok);
        const { data } = parsed;
        const refused = bodyRefusal(kind, validate, tok, machine, data, raw.length);
        if (refused) return reject(ctx, kind, refused, tok);
        if (route.finish) return route.finish(ctx, tok, raw, data, path, idemKey, parsed.spans);

        if (policy.namesCommand) {
          // The command must be this instance's (404 otherwise): in memory, or one read for an id it does not know.
          const check = d.commands.checkAck(tok.customerId, machine, path.software, commandId);
          if (!(check instanceof Promise)) return check ? reject(ctx, kind, check, tok) : publish(tok, raw, data);
          return void check.then((e) => (e ? reject(ctx, kind, e, tok) : publish(tok, raw, data))).catch(ctx.fail);
        }
        publish(tok, raw, data);
      }

      function publish(tok: TokenInfo, raw: Buffer, data: unknown): void {
        const p = prepare(kind, tok, path, raw, data, idemKey, commandId);
        if (p instanceof HttpError) return reject(ctx, kind, p, tok);
        ctx.reportId = p.id;
        if (!idemKey) return queue(tok, p);
        // A key is claimed for its body before the report is queued (gateway/idempotency.ts).
        d.idempotency
          .claim([{ id: p.id, body: data }])
          .then(
            ([claim]) => (claim === 'different' ? reject(ctx, kind, keyReused(), tok) : queue(tok, p)),
            (e) => {
              d.log.warn({ err: e }, 'Idempotency-Key register (Redis) unavailable');
              reject(ctx, kind, keyRegisterUnavailable(), tok);
            },
          )
          .catch(ctx.fail);
      }

      function queue(tok: TokenInfo, p: PreparedReport): void {
        const { answer } = p;
        d.publisher.add(
          p.report,
          ctx.guard((err: HttpError | null) => {
            injectFault(ctx, 'publish');
            if (err) return reject(ctx, kind, err, tok);
            if (answer.status === 200) countOk(kind);
            else responses.labels(kind, String(answer.status)).inc();
            ctx.send(answer.status, answer.body);
          }),
          laneOf(kind),
        );
      }
    };
  }

  /** The checks every ingest route makes before its body: framing, shutting down, path slugs, token, rate. */
  function begin(ctx: Ctx, kind: string, path: Pick<IngestPath, 'customer'> & Partial<IngestPath>, rate: RateMode = 'take') {
    const { customer } = path;
    // uWS frames the body by the first Content-Length; a second one that differs is a request
    // smuggling attempt (RFC 9112 §6.3): 400 and close, and what follows is never served.
    if (ctx.head.framing) {
      quarantine(ctx.res);
      reject(ctx, kind, new HttpError(400, ctx.head.framing, { close: true }));
      return null;
    }
    if (d.isClosing()) {
      // Closing the connection after the answer sends the proxy's next request to another gateway.
      reject(ctx, kind, new HttpError(503, 'gateway shutting down; retry', { retryAfterS: 1, close: true }));
      return null;
    }
    const badPath = pathRefusal(path);
    if (badPath) {
      reject(ctx, kind, badPath, undefined, pathRefusal({ customer }) ? '' : customer);
      return null;
    }
    const bearer = parseBearer(ctx.head.authorization);
    if (bearer === null) {
      reject(ctx, kind, missingBearer(), undefined, customer);
      return null;
    }
    const known = d.tokens.peek(bearer);
    if (known !== undefined) {
      const now = Date.now();
      const err = authorise(known, customer, path.machine, now) ?? rateLimited(known, rate);
      if (err) {
        reject(ctx, kind, err, known, customer);
        return null;
      }
      d.tokens.touch(known, now);
    }
    return { bearer, known };
  }

  /** The slow path of `begin` for a token this gateway's copy does not know yet (the same checks). */
  async function resolveToken(ctx: Ctx, kind: string, bearer: string, path: Pick<IngestPath, 'customer'> & Partial<IngestPath>, rate: RateMode = 'take'): Promise<TokenInfo | null> {
    const { customer } = path;
    let t: TokenInfo | undefined;
    try {
      t = await d.tokens.lookup(bearer);
    } catch (e) {
      d.log.warn({ err: e }, 'token lookup failed');
      reject(ctx, kind, new HttpError(503, 'token check unavailable; retry', { retryAfterS: 2 }), undefined, customer);
      return null;
    }
    const now = Date.now();
    const err = t ? (authorise(t, customer, path.machine, now) ?? rateLimited(t, rate)) : new HttpError(403, 'invalid token');
    if (err) {
      reject(ctx, kind, err, t, customer);
      return null;
    }
    d.tokens.touch(t!, now);
    return t!;
  }

  const kit: Kit = {
    d,
    reject,
    begin,
    resolveToken,
    pendingBodies,
    answered: (kind, status) => responses.labels(kind, String(status)).inc(),
    reports: { validatorOf, bodyRefusal, prepare },
    rate: { takeUpTo, overRate, overBytes, announcedOverBytes },
  };
  const metrics_ = metricsRoute(kit);
  const artifacts = artifactRoutes(kit);

  const handlers: Record<string, Handler> = {
    ingest_heartbeat: ingestReport('heartbeat'),
    ingest_diagnostics: ingestReport('diagnostics'),
    ingest_status: ingestReport('status'),
    ingest_help: ingestReport('help'),
    ingest_metrics: ingestReport('metrics', metrics_),
    ingest_artifact_init: ingestReport('artifact-init', artifacts.init),
    ingest_artifact_chunk: artifacts.chunk,
    ingest_artifact_status: artifacts.status,
    ingest_artifact_complete: artifacts.complete,
    ingest_command_ack: ingestReport('command_ack'),
    ingest_batch: batchRoute(kit),
    gateway_healthz: (res) => new Ctx(res, 'GET', '/healthz', '').send(200, OK),
    gateway_readyz: (res) => {
      const ctx = new Ctx(res, 'GET', '/readyz', '');
      if (d.isReady()) ctx.send(200, OK);
      else ctx.send(503, JSON.stringify({ detail: 'not ready: NATS not connected or stream missing' }));
    },
    gateway_metrics: (res) => {
      const ctx = new Ctx(res, 'GET', '/metrics', '');
      metrics
        .text()
        .then((text) => ctx.send(200, text, { 'Content-Type': metrics.contentType }))
        .catch(ctx.fail);
    },
  };

  const table = routesOf('gateway');
  checkHandlers('gateway', handlers);
  // Every answer is timed by route and status class (fleet_http_request_duration_seconds).
  const durations = metrics.hotHistogram('fleet_http_request_duration_seconds');
  for (const r of table) {
    const h = unlessQuarantined(guarded(r.operationId, failed, timed(routeTimer(durations, r.operationId), handlers[r.operationId]!)));
    const path = colonPath(r.path);
    if (r.method === 'GET') app.get(path, h);
    else if (r.method === 'POST') app.post(path, h);
    else if (r.method === 'PUT') app.put(path, h);
    else app.del(path, h);
  }
  const unmatched = notFoundOrMethod((ctx, err) => (ctx.path.startsWith('/api/ingest') ? reject(ctx, 'unknown', err) : ctx.sendError(err)));
  app.any('/*', unlessQuarantined(guarded('unmatched', failed, timed(routeTimer(durations, 'unmatched'), unmatched))));
}

/** 404 for an unknown path, 405 with `Allow` for a known path and the wrong method (lib/contract/routes.ts). */
function notFoundOrMethod(respond: (ctx: Ctx, err: HttpError) => void): Handler {
  const methodsOn = allowedMethods('gateway');
  return (res, req) => {
    const ctx = new Ctx(res, req.getCaseSensitiveMethod(), req.getUrl(), '');
    const allowed = methodsOn(ctx.path);
    if (allowed.length === 0) return respond(ctx, new HttpError(404, `no such endpoint: ${ctx.path.slice(0, 200)}`));
    respond(ctx, new HttpError(405, `method ${ctx.method} not allowed here; use ${allowed.join(', ')}`, { allow: allowed }));
  };
}





/** The schema check of one kind as a Validator (routes may bring their own: metrics). */
function schemaOf(checker: ReportChecker, kind: CheckedKind): Validator<unknown> {
  return Object.assign((data: unknown): data is unknown => checker.schema(kind, data) === null, {
    errorsOf: (data: unknown) => checker.schema(kind, data)?.errors ?? [],
  });
}
