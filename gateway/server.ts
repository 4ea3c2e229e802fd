// The gateway's HTTP surface: the ingest routes of lib/routes.ts on uWS. Per request, in order:
// path slugs (400), bearer token (403), per-token rate (429), Content-Type (415), size (413), body,
// JSON (400), schema (422), then one report handed to the publisher and answered when JetStream has
// stored it (200), or 503. Every refusal is answered `{"detail"}` and goes to the rejection log.
import { randomUUID } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import type { TemplatedApp, HttpResponse, HttpRequest } from './uws.js';
import type { Config } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { Metrics } from '../lib/metrics.js';
import { HttpError, badRequest, forbidden, unprocessable, statusLine } from '../lib/errors.js';
import { isSlug, isUuid, uuidFromName } from '../lib/ids.js';
import { encodeReport } from '../lib/messages.js';
import { routesOf, colonPath, checkHandlers, allowedMethods } from '../lib/routes.js';
import type { Validator } from '../lib/validation.js';
import { SNAPSHOT_MAX_BYTES, type ReportKind } from '../lib/schemas/ingest.js';
import { reportChecker, type ReportChecker, type CheckedKind } from '../lib/report-check.js';
import { Ctx, readBody, H, conflictingLength, quarantine, unlessQuarantined } from './request.js';
import type { TokenCache, TokenInfo } from './token-cache.js';
import type { BatchPublisher } from './publisher.js';
import type { RejectionLog } from './rejection-log.js';
import type { LicenceGate } from './licence-gate.js';
import { RateLimiter } from './rate-limiter.js';
import { acceptedAnswer, type HelpCoverage } from './help-coverage.js';
import type { Redis } from '../lib/db/redis.js';
import type { ArtifactStore } from '../lib/artifacts.js';
import { metricsRoute } from './metrics.js';
import { artifactRoutes } from './artifacts.js';
import type { PendingCommands } from './pending-commands.js';

export interface GatewayDeps {
  cfg: Config;
  log: Logger;
  metrics: Metrics;
  tokens: TokenCache;
  publisher: BatchPublisher;
  rejections: RejectionLog;
  help: HelpCoverage;
  /** Refuses machines new to a customer past its licence grace period (in memory, no query). */
  licences: LicenceGate;
  /** Host metrics: the register of client_metric_ids seen (exact duplicate counts). */
  redis: Redis;
  /** Artifact uploads: upload records and chunks in JetStream (KV and object store). */
  artifacts: ArtifactStore;
  commands: PendingCommands;
  isReady(): boolean;
  isClosing(): boolean;
}

export type Handler = (res: HttpResponse, req: HttpRequest) => void;

/** What a route on the JSON ingest path does with a validated body instead of queueing one report. */
export type Finish = (ctx: Ctx, tok: TokenInfo, raw: Buffer, data: Record<string, unknown>, path: IngestPath, idemKey: string) => void;
export interface IngestPath {
  customer: string;
  machine: string;
  software: string;
}
export interface JsonRoute {
  /** Fixed software: the metrics path has the literal segment `logcollector` there. */
  software?: string;
  validate?: Validator<unknown>;
  finish?: Finish;
}

/** What the handlers in gateway/metrics.ts and gateway/artifacts.ts share with this file. */
export interface Kit {
  d: GatewayDeps;
  reject(ctx: Ctx, kind: string, err: HttpError, token?: TokenInfo, customer?: string): void;
  /** 503 / 400 / 403 / 429 checks before the body; null when already answered. */
  begin(ctx: Ctx, kind: string, path: IngestPath, authorization: string): { bearer: string; known: TokenInfo | undefined } | null;
  /** The token for a bearer the in-memory copy did not know; null when refused (answered). */
  resolveToken(ctx: Ctx, kind: string, bearer: string, customer: string): Promise<TokenInfo | null>;
  pendingBodies: Set<Ctx>;
  /** Counts a successful answer in gateway_responses_total. */
  answered(kind: string, status: number): void;
}

const OK = '{"ok":true}';

export function registerRoutes(app: TemplatedApp, d: GatewayDeps): void {
  const { cfg, metrics } = d;
  const limiter = new RateLimiter(cfg.gateway.rateLimit, cfg.gateway.rateBurst);
  const responses = metrics.counter('gateway_responses_total', 'Ingest responses by kind and status', ['kind', 'status']);
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

  function rateLimited(t: TokenInfo): HttpError | null {
    if (limiter.take(t.id)) return null;
    return new HttpError(429, `over the rate limit of ${cfg.gateway.rateLimit} requests/s for this token`, { retryAfterS: limiter.retryAfterS() });
  }

  // Schema and storability of each kind (lib/report-check.ts: the same check a worker repeats on a
  // report storage refused).
  const checker = reportChecker(cfg.gateway.maxItems);

  /** Checks beyond what JSON Schema can say: the snapshot's size (413), then lib/report-check.ts. */
  function extraChecks(kind: string, body: Record<string, unknown>, rawSize: number): HttpError | null {
    if (kind === 'status' && body.snapshot !== undefined && rawSize > SNAPSHOT_MAX_BYTES && Buffer.byteLength(JSON.stringify(body.snapshot)) > SNAPSHOT_MAX_BYTES) {
      return new HttpError(413, `snapshot larger than ${SNAPSHOT_MAX_BYTES} bytes`);
    }
    if (kind !== 'status' && kind !== 'command_ack') return null;
    const refused = checker.deep(kind, body);
    return refused ? unprocessable(refused.detail, refused.errors) : null;
  }

  function ingestReport(kind: string, route: JsonRoute = {}): Handler {
    const validate = route.validate ?? schemaOf(checker, kind as CheckedKind);
    return (res, req) => {
      // Copy what we need from req now: uWS reuses it once this function returns.
      const ctx = new Ctx(res, 'POST', req.getUrl(), cfg.trustProxy ? req.getHeader(H.forwardedFor) : '', cfg.trustProxy);
      const customer = req.getParameter(0)!;
      const machine = req.getParameter(1)!;
      const software = route.software ?? req.getParameter(2)!;
      const commandId = kind === 'command_ack' ? req.getParameter(3)! : '';
      const authorization = req.getHeader(H.authorization);
      const contentType = req.getHeader(H.contentType);
      const contentLength = req.getHeader(H.contentLength);
      const idemKey = req.getHeader(H.idempotencyKey);
      // uWS frames the body by the first Content-Length; a second one that differs is a request
      // smuggling attempt (RFC 9112 §6.3): refuse it and close, so the rest is never read as a request.
      const framing = conflictingLength(req);

      if (framing) {
        quarantine(res);
        return reject(ctx, kind, new HttpError(400, framing, { close: true }));
      }
      const gate = begin(ctx, kind, { customer, machine, software }, authorization);
      if (gate === null) return;
      const { bearer, known } = gate;
      if (kind === 'command_ack' && !isUuid(commandId)) {
        return reject(ctx, kind, badRequest(`invalid command id ${JSON.stringify(commandId.slice(0, 80))}: must be a UUID`), known, customer);
      }
      if (!isJson(contentType)) {
        return reject(ctx, kind, new HttpError(415, `Content-Type must be application/json, got ${JSON.stringify(contentType.slice(0, 100))}`), known, customer);
      }
      if (idemKey.length > 256) return reject(ctx, kind, badRequest('Idempotency-Key longer than 256 characters'), known, customer);
      const limit = cfg.gateway.bodyLimit;
      if (contentLength !== '' && Number(contentLength) > limit) {
        return reject(ctx, kind, new HttpError(413, `body of ${contentLength} bytes is over the limit of ${limit} bytes`), known, customer);
      }

      // The token is usually known; when it is not, look it up while the body arrives.
      let token: TokenInfo | undefined | null = known ?? null;
      let body: Buffer | null = null;
      if (known === undefined) {
        void resolveToken(ctx, kind, bearer, customer).then((t) => {
          if (t === null) return;
          token = t;
          if (body !== null) accept(ctx, t, body);
        });
      }
      ctx.bodyDeadline = Date.now() + cfg.gateway.bodyTimeoutMs;
      pendingBodies.add(ctx);
      readBody(
        ctx,
        limit,
        (b) => {
          pendingBodies.delete(ctx);
          body = b;
          if (token) accept(ctx, token, body);
        },
        () => {
          pendingBodies.delete(ctx);
          reject(ctx, kind, new HttpError(413, `body over the limit of ${limit} bytes`), token ?? undefined, customer);
        },
      );

      function accept(ctx: Ctx, tok: TokenInfo, raw: Buffer): void {
        if (ctx.done) return;
        let data: unknown = {};
        if (raw.length > 0) {
          // JSON is UTF-8 (RFC 8259); decoding would turn bad bytes into U+FFFD and store that.
          if (!isUtf8(raw)) return reject(ctx, kind, badRequest('the body is not valid UTF-8'), tok);
          try {
            data = JSON.parse(raw.toString('utf8'));
          } catch (e) {
            return reject(ctx, kind, badRequest(`malformed JSON: ${(e as Error).message}`), tok);
          }
        }
        if (data === null || typeof data !== 'object' || Array.isArray(data)) {
          return reject(ctx, kind, unprocessable('the body must be a JSON object', [{ path: '/', message: 'must be object' }]), tok);
        }
        if (!validate(data)) {
          const errors = validate.errorsOf(data);
          return reject(ctx, kind, unprocessable(`schema violation: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors), tok);
        }
        // Help uploads and command acks create no machine: the device limit does not apply to them.
        const extra =
          extraChecks(kind, data as Record<string, unknown>, raw.length) ?? (kind === 'help' || kind === 'command_ack' ? null : d.licences.check(tok.customerId, machine));
        if (extra) return reject(ctx, kind, extra, tok);
        if (route.finish) return route.finish(ctx, tok, raw, data as Record<string, unknown>, { customer, machine, software }, idemKey);

        if (kind === 'command_ack') {
          // The command must be this instance's (404 otherwise): in memory, or one read for an id it does not know.
          const check = d.commands.checkAck(tok.customerId, machine, software, commandId);
          if (!(check instanceof Promise)) return check ? reject(ctx, kind, check, tok) : publish(tok, raw, data, null);
          return void check.then((e) => (e ? reject(ctx, kind, e, tok) : publish(tok, raw, data, null)));
        }
        // Pending agent commands go out in the answer, and their ids into the report (recorded as delivered).
        publish(tok, raw, data, kind === 'heartbeat' || kind === 'status' ? d.commands.offer(tok.customerId, machine, software) : null);
      }

      function publish(tok: TokenInfo, raw: Buffer, data: unknown, offer: { ids: string[]; body: string } | null): void {
        const id = idemKey ? uuidFromName(tok.customerId, idemKey) : randomUUID();
        const report = encodeReport(
          { id, k: kind as ReportKind, c: tok.customerId, cs: tok.customer, m: machine, s: software, t: tok.id, at: Date.now(), ik: idemKey || undefined, dc: offer?.ids, ci: commandId || undefined },
          raw,
        );
        if (report.length > d.publisher.maxReportBytes) {
          return reject(ctx, kind, new HttpError(413, `report of ${report.length} bytes is over the queue's message limit`), tok);
        }
        const answer = offer ? { status: 200, body: offer.body } : acceptedAnswer(kind, data, tok.customerId, software, d.help);
        d.publisher.add(report, (err) => {
          if (err) return reject(ctx, kind, err, tok);
          if (answer.status === 200) countOk(kind);
          else responses.labels(kind, String(answer.status)).inc();
          ctx.send(answer.status, answer.body);
        });
      }
    };
  }

  /** The checks every ingest route makes before its body: shutting down, path slugs, token, rate. */
  function begin(ctx: Ctx, kind: string, path: IngestPath, authorization: string) {
    const { customer } = path;
    if (d.isClosing()) {
      reject(ctx, kind, new HttpError(503, 'gateway shutting down; retry', { retryAfterS: 1 }));
      return null;
    }
    const bad = !isSlug(customer) ? 'customer' : !isSlug(path.machine) ? 'machine' : !isSlug(path.software) ? 'software' : null;
    if (bad !== null) {
      const value = path[bad];
      reject(ctx, kind, badRequest(`invalid ${bad} slug ${JSON.stringify(value.slice(0, 80))}: must match ^[a-z0-9][a-z0-9-]*$ (1 to 64 characters)`), undefined, isSlug(customer) ? customer : '');
      return null;
    }
    const bearer = parseBearer(authorization);
    if (bearer === null) {
      reject(ctx, kind, forbidden('missing bearer token: send Authorization: Bearer <API token>'), undefined, customer);
      return null;
    }
    const known = d.tokens.peek(bearer);
    if (known !== undefined) {
      const err = authorise(known, customer) ?? rateLimited(known);
      if (err) {
        reject(ctx, kind, err, known, customer);
        return null;
      }
    }
    return { bearer, known };
  }

  async function resolveToken(ctx: Ctx, kind: string, bearer: string, customer: string): Promise<TokenInfo | null> {
    let t: TokenInfo | undefined;
    try {
      t = await d.tokens.lookup(bearer);
    } catch (e) {
      d.log.warn({ err: e }, 'token lookup failed');
      reject(ctx, kind, new HttpError(503, 'token check unavailable; retry', { retryAfterS: 2 }), undefined, customer);
      return null;
    }
    const err = t ? (authorise(t, customer) ?? rateLimited(t)) : forbidden('invalid token');
    if (err) {
      reject(ctx, kind, err, t, customer);
      return null;
    }
    return t!;
  }

  const kit: Kit = { d, reject, begin, resolveToken, pendingBodies, answered: (kind, status) => responses.labels(kind, String(status)).inc() };
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
    gateway_healthz: (res) => plain(res, 200, OK),
    gateway_readyz: (res) =>
      d.isReady() ? plain(res, 200, OK) : plain(res, 503, JSON.stringify({ detail: 'not ready: NATS not connected or stream missing' })),
    gateway_metrics: (res) => {
      let aborted = false;
      res.onAborted(() => (aborted = true));
      void metrics.text().then((text) => {
        if (!aborted) res.cork(() => res.writeHeader('Content-Type', metrics.contentType).end(text));
      });
    },
  };

  const table = routesOf('gateway');
  checkHandlers('gateway', handlers);
  for (const r of table) {
    const h = unlessQuarantined(handlers[r.operationId]!);
    const path = colonPath(r.path);
    if (r.method === 'GET') app.get(path, h);
    else if (r.method === 'POST') app.post(path, h);
    else if (r.method === 'PUT') app.put(path, h);
    else app.del(path, h);
  }
  app.any('/*', unlessQuarantined(notFoundOrMethod((ctx, err) => (ctx.path.startsWith('/api/ingest') ? reject(ctx, 'unknown', err) : ctx.sendError(err)))));
}

/** 404 for an unknown path, 405 with `Allow` for a known path and the wrong method (lib/routes.ts). */
function notFoundOrMethod(respond: (ctx: Ctx, err: HttpError) => void): Handler {
  const methodsOn = allowedMethods('gateway');
  return (res, req) => {
    const ctx = new Ctx(res, req.getCaseSensitiveMethod(), req.getUrl(), '');
    const allowed = methodsOn(ctx.path);
    if (allowed.length === 0) return respond(ctx, new HttpError(404, `no such endpoint: ${ctx.path.slice(0, 200)}`));
    respond(ctx, new HttpError(405, `method ${ctx.method} not allowed here; use ${allowed.join(', ')}`, { allow: allowed }));
  };
}

function plain(res: HttpResponse, status: number, body: string): void {
  res.cork(() => res.writeStatus(statusLine(status)).writeHeader('Content-Type', 'application/json').end(body));
}

export function parseBearer(h: string): string | null {
  if (h.length < 8 || h.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  const t = h.slice(7).trim();
  return t.length > 0 && t.length <= 512 ? t : null;
}

export function isJson(ct: string): boolean {
  if (ct === 'application/json') return true;
  const semi = ct.indexOf(';');
  return (semi === -1 ? ct : ct.slice(0, semi)).trim().toLowerCase() === 'application/json';
}

export function authorise(t: TokenInfo, customer: string): HttpError | null {
  if (t.revoked) return forbidden('token revoked');
  if (!t.scopes.includes('ingest')) return forbidden('token lacks the ingest scope');
  if (t.customer !== customer) return forbidden(`token not authorised for customer ${customer}`);
  return null;
}

/** The schema check of one kind as a Validator (routes may bring their own: metrics). */
function schemaOf(checker: ReportChecker, kind: CheckedKind): Validator<unknown> {
  return Object.assign((data: unknown): data is unknown => checker.schema(kind, data) === null, {
    errorsOf: (data: unknown) => checker.schema(kind, data)?.errors ?? [],
  });
}
