// The gateway's HTTP surface: the ingest routes of lib/contract/routes.ts on uWS, each a few lines
// over the ingest core (gateway/ingest.ts) and its edge (gateway/http/edge.ts). Per request, in
// order: framing (400), shutting down (503), path slugs (400), bearer token (403), per-token and
// per-customer rate (429), Content-Type (415), size (413), body, JSON (400), schema (422), then one
// report handed to the publisher and answered when JetStream has stored it (200), or 503. Every
// refusal is answered `{"detail"}` and goes to the rejection log.
import type { TemplatedApp } from './uws.js';
import { HttpError } from '../../lib/contract/errors.js';
import { routesOf, colonPath, checkHandlers, allowedMethods } from '../../lib/contract/routes.js';
import { routeTimer } from '../../lib/infra/metrics.js';
import { Ctx, unlessQuarantined, timed, guarded, injectFault, enableFaultInjection, type Handler } from './request.js';
import { Edge } from './edge.js';
import { artifactRoutes } from './artifact-routes.js';
import { Ingest } from '../ingest.js';
import { BatchIngest } from '../batch.js';
import { Uploads } from '../artifacts.js';
import { metricsRoute } from '../metrics.js';
import { KINDS, headRefusal, batchHeadRefusal, type JsonKind } from '../admission.js';
import type { GatewayDeps, IngestPath, JsonRoute } from '../types.js';

const OK = '{"ok":true}';

export function registerRoutes(app: TemplatedApp, d: GatewayDeps): void {
  const { cfg, metrics } = d;
  enableFaultInjection(cfg.gateway.faultInjection);
  const core = new Ingest(d);
  const edge = new Edge(core);
  const uploads = new Uploads(core);
  const batch = new BatchIngest(core);
  const artifacts = artifactRoutes(edge, uploads);

  /** A JSON ingest route: one report of `kind` (or the route's own `finish`). */
  function ingestRoute(kind: JsonKind, route: JsonRoute = {}): Handler {
    const policy = KINDS[kind];
    const params = policy.namesCommand ? 4 : route.software ? 2 : 3;
    const limit = cfg.gateway.bodyLimit;
    return (res, req) => {
      const ctx = Ctx.of(res, req, cfg.trustProxy, params, 'POST');
      injectFault(ctx, 'handler');
      const [customer = '', machine = '', third = '', commandId = ''] = ctx.head.params;
      const path: IngestPath = { customer, machine, software: route.software ?? third };
      const gate = edge.begin(ctx, kind, path);
      if (gate === null) return;
      const early = headRefusal(kind, ctx.head, commandId, limit) ?? core.rates.announcedOverBytes(gate.known, ctx.head.contentLength);
      if (early) return edge.reject(ctx, kind, early, gate.known, customer);
      edge.receive(ctx, kind, gate, path, { limit, tooLarge: `body over the limit of ${limit} bytes` }, (tok, raw) => {
        injectFault(ctx, 'body');
        core.ingest(ctx, kind, tok, path, raw, { idemKey: ctx.head.idempotencyKey, commandId, route }, (o) => {
          injectFault(ctx, 'publish');
          edge.answer(ctx, kind, o, tok);
        });
      });
    };
  }

  /** POST /api/ingest/{customer}/batch (gateway/batch.ts): the rate is looked at before the body and taken per entry after it. */
  const batchRoute: Handler = (res, req) => {
    const KIND = 'batch';
    const ctx = Ctx.of(res, req, cfg.trustProxy, 1, 'POST');
    const [customer = ''] = ctx.head.params;
    const gate = edge.begin(ctx, KIND, { customer }, 'has');
    if (gate === null) return;
    const limit = cfg.gateway.batchBodyLimit;
    const early = batchHeadRefusal(ctx.head, limit) ?? core.rates.announcedOverBytes(gate.known, ctx.head.contentLength);
    if (early) return edge.reject(ctx, KIND, early, gate.known, customer);
    edge.receive(ctx, KIND, gate, { customer }, { limit, tooLarge: `body over the limit of ${limit} bytes`, rate: 'has' }, (tok, raw) =>
      batch.ingest(ctx, tok, customer, raw, (o, refused) => {
        // One rejection-log row per refused entry, attributed to this request's customer and token.
        for (const r of refused) {
          d.rejections.record({
            at: Date.now(),
            customer_id: tok.customerId,
            customer: tok.customer,
            token_id: tok.id,
            method: ctx.method,
            path: `${ctx.path}#/entries/${r.index}`,
            status: r.err.status,
            detail: r.what ? `${r.what}: ${r.err.detail}` : r.err.detail,
            body_size: r.bodySize,
            remote: ctx.remote(),
          });
        }
        edge.answer(ctx, KIND, o, tok);
      }),
    );
  };

  const handlers: Record<string, Handler> = {
    ingest_heartbeat: ingestRoute('heartbeat'),
    ingest_diagnostics: ingestRoute('diagnostics'),
    ingest_status: ingestRoute('status'),
    ingest_help: ingestRoute('help'),
    ingest_metrics: ingestRoute('metrics', metricsRoute(core)),
    ingest_artifact_init: ingestRoute('artifact-init', uploads.init),
    ingest_artifact_chunk: artifacts.chunk,
    ingest_artifact_status: artifacts.status,
    ingest_artifact_complete: artifacts.complete,
    ingest_command_ack: ingestRoute('command_ack'),
    ingest_batch: batchRoute,
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
    const h = unlessQuarantined(guarded(r.operationId, edge.failed, timed(routeTimer(durations, r.operationId), handlers[r.operationId]!)));
    const path = colonPath(r.path);
    if (r.method === 'GET') app.get(path, h);
    else if (r.method === 'POST') app.post(path, h);
    else if (r.method === 'PUT') app.put(path, h);
    else app.del(path, h);
  }
  const unmatched = notFoundOrMethod((ctx, err) => (ctx.path.startsWith('/api/ingest') ? edge.reject(ctx, 'unknown', err) : ctx.sendError(err)));
  app.any('/*', unlessQuarantined(guarded('unmatched', edge.failed, timed(routeTimer(durations, 'unmatched'), unmatched))));
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
