// The read API on Fastify: the `api` routes of lib/contract/routes.ts, each with its TypeBox schemas for
// params, query and body (Fastify validates them with Ajv), an auth check per the table, and one
// error shape for everything: `{"detail": ...}`.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyRequest, type FastifyReply, type FastifyError } from 'fastify';
import type { Config } from '../lib/infra/config.js';
import type { Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import cookie from '@fastify/cookie';
import { HttpError } from '../lib/contract/errors.js';
import { DependencyUnavailableError } from '../lib/infra/storage-errors.js';
import { routesOf, colonPath, checkHandlers, allowedMethods } from '../lib/contract/routes.js';
import { toFieldErrors } from '../lib/contract/validation.js';
import { resolvePrincipal, authorise } from './auth.js';
import { PrincipalCache } from './principal-cache.js';
import { PgListener } from '../lib/infra/pg-listen.js';
import { TokenUsage } from '../lib/store/token-usage.js';
import { instanceHandlers } from './handlers/instances.js';
import { authHandlers } from './handlers/auth.js';
import { whitelistHandlers } from './handlers/whitelist.js';
import { helpHandlers } from './handlers/help.js';
import { rejectionHandlers } from './handlers/rejections.js';
import { statusHandlers } from './handlers/status.js';
import { docsHandlers } from './handlers/docs.js';
import { accountHandlers } from './handlers/accounts.js';
import { tokenHandlers } from './handlers/tokens.js';
import { licenceHandlers } from './handlers/licences.js';
import { metricHandlers } from './handlers/metrics.js';
import { artifactHandlers } from './handlers/artifacts.js';
import { offboardingHandlers } from './handlers/offboarding.js';
import { trafficLightHandlers } from './handlers/traffic-light.js';
import { webhookHandlers } from './handlers/webhooks.js';
import { maintenanceHandlers } from './handlers/maintenance.js';
import { commandHandlers } from './handlers/commands.js';
import { dashboardHandlers } from './handlers/dashboard.js';
import { quotaHandlers } from './handlers/quotas.js';
import { deadLetterHandlers } from './handlers/dead-letters.js';
import { invitationHandlers } from './handlers/invitations.js';
import { sessionHandlers } from './handlers/sessions.js';
import { decommissionHandlers } from './handlers/decommission.js';
import { Mailer } from './mail.js';
import { notificationHandlers } from './handlers/notifications.js';
import { timeoutRuleHandlers } from './handlers/timeout-rules.js';
import { streamAuthStillValid } from './stream-auth.js';
import { ping } from '../lib/infra/postgres.js';
import { AUTH_CHANGED_CHANNEL, authNoticesInstalled } from '../lib/store/schema.js';
import type { ApiDeps, ApiHandlers } from './types.js';
import { routeTimer, type RouteTimer } from '../lib/infra/metrics.js';

export type { ApiDeps };

declare module 'fastify' {
  interface FastifyInstance {
    /** The api's copy of credentials' rows and its LISTEN connection (tests look at both). */
    principals: { cache: PrincipalCache; listener: PgListener | null };
  }
}

type Handler = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown> | unknown;

/**
 * Node's timeouts against slow clients. Fastify's defaults switch Node's request timeout off, so a
 * client that sent headers and then one byte every few seconds held its connection (and its slot)
 * for as long as it liked. Node checks these timeouts every `connectionsCheckingInterval` (30 s by
 * default, which would let a request overrun by that much): here a tenth of the timeout, 250 ms to
 * 5 s. The request timeout covers receiving the request only: a response that lasts (the live
 * stream, a download) is not cut by it (tested in test/stack/api-timeouts.test.ts).
 */
export function serverTimeouts(cfg: Config['api']) {
  const request = cfg.requestTimeoutMs;
  return {
    requestTimeout: request,
    connectionTimeout: cfg.idleTimeoutMs,
    keepAliveTimeout: cfg.keepAliveTimeoutMs,
    http: {
      requestTimeout: request,
      headersTimeout: request,
      connectionsCheckingInterval: request > 0 ? Math.min(5000, Math.max(250, Math.round(request / 10))) : 30_000,
    },
  };
}

/** Answers what Node refuses before a request reaches Fastify (a timeout, bad HTTP) in the API's `{"detail"}` shape. */
function clientErrorHandler(requestTimeoutMs: number) {
  return function (this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket): void {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, detail] =
      err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, `request headers and body not complete within ${requestTimeoutMs} ms`]
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'request headers too large']
          : [400, 'malformed HTTP request'];
    this.log.debug({ err, remote: socket.remoteAddress }, 'client error');
    // Only when no answer has started on this connection (Node's own rule).
    const started = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent;
    if (socket.writable && !started) {
      const body = JSON.stringify({ detail });
      socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    }
    socket.destroy();
  };
}

export async function buildApi(d: ApiDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: d.log as unknown as FastifyBaseLogger,
    // One line per request would drown the useful logs; fleet_http_request_duration_seconds counts them instead.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
    // The same rule as the gateway's (lib/infra/client-address.ts): right-most untrusted X-Forwarded-For entry.
    trustProxy: d.cfg.trustProxy ?? false,
    ajv: { customOptions: { coerceTypes: 'array', removeAdditional: false, allErrors: true } },
    ...serverTimeouts(d.cfg.api),
    clientErrorHandler: clientErrorHandler(d.cfg.api.requestTimeoutMs),
  });

  await app.register(cookie);
  // API tokens' last_used_at (lib/store/token-usage.ts): a request answered for a token notes it in
  // memory; a timer writes the notes, each token at most once a minute. Written once more at close.
  const tokenUsageWrites = d.metrics.counter('fleet_token_last_used_updates_total');
  const tokenUsage = new TokenUsage({
    pool: d.pool,
    flushMs: d.cfg.tokenUsageFlushMs,
    onFlush: (written, skipped) => {
      tokenUsageWrites.labels('written').inc(written);
      tokenUsageWrites.labels('skipped').inc(skipped);
    },
    onError: (e) => d.log.warn({ err: e }, 'writing token last_used_at failed; retried at the next flush'),
  });
  tokenUsage.start();
  app.addHook('onClose', async () => tokenUsage.stop());
  app.addHook('onResponse', async (req) => {
    const p = req.principal;
    if (p?.kind === 'token' && p.tokenId) tokenUsage.mark(p.tokenId, Date.now());
  });
  // Who a credential is, from memory (api/principal-cache.ts): emptied by Postgres's notice of any
  // change to tokens, sessions, users, memberships or customers (migration 0027), and by every
  // request of this process that may write, before its answer goes out. Off while not listening.
  const lookups = d.metrics.counter('fleet_api_principal_lookups_total');
  const listening = d.metrics.gauge('fleet_api_principal_cache_listening');
  const principals = new PrincipalCache(d.cfg.api.principalCacheMs, 50_000, {
    hit: () => lookups.labels('hit').inc(),
    miss: () => lookups.labels('miss').inc(),
    off: () => lookups.labels('off').inc(),
  });
  listening.set(d.cfg.api.principalCacheMs > 0 ? 0 : -1);
  if (d.cfg.api.principalCacheMs > 0) {
    const listener = new PgListener({
      url: d.cfg.databaseUrl,
      channel: AUTH_CHANGED_CHANNEL,
      applicationName: 'fleet-api-listen',
      onNotice: () => principals.invalidate(),
      // Without the triggers (an api started before `migrate` ran) nobody would notify: stay off.
      ready: authNoticesInstalled,
      onState: (up) => {
        principals.setLive(up);
        listening.set(up ? 1 : 0);
        if (!up) d.log.warn('LISTEN for credential changes lost: every request reads its principal from Postgres until it is back');
      },
      onError: (e) => d.log.debug({ err: e }, 'LISTEN connection error'),
    });
    listener.start();
    app.addHook('onClose', async () => listener.close());
    app.decorate('principals', { cache: principals, listener });
  } else app.decorate('principals', { cache: principals, listener: null });
  // Only a write that succeeded: a refused one (a failed login, a 403) changed nothing, and a flood
  // of them must not empty the copy for every other customer's requests. What a failed request did
  // commit (none should) is still announced by Postgres's notice.
  app.addHook('onSend', async (req, reply) => {
    if (req.method !== 'GET' && req.method !== 'HEAD' && reply.statusCode < 400) principals.invalidate();
  });
  // Open live streams end before the server closes, or close would wait for them.
  app.addHook('preClose', async () => d.lights.close());
  // E-mail for invitations and password resets (api/mail.ts); one transport per api process.
  const mailer = d.mailer ?? new Mailer(d.cfg.mail, d.log);
  if (!mailer.configured) d.log.warn('SMTP_HOST not set: invitation and password-reset e-mails are written to this log instead of being sent');
  app.addHook('onClose', async () => mailer.close());
  // Open live streams re-check their session or token every SESSION_STREAM_RECHECK_MS, and end when it was revoked.
  d.lights.recheckWith(d.cfg.api.streamRecheckMs, (auths) => streamAuthStillValid(d.pool, auths));

  // Each typed by its route (api/types.ts); the operations routes (ops() in lib/contract/routes.ts) take nothing.
  const handlers: ApiHandlers & { api_healthz: Handler; api_readyz: Handler; api_metrics: Handler } = {
    ...authHandlers(d),
    ...instanceHandlers(d),
    ...whitelistHandlers(d),
    ...helpHandlers(d),
    ...rejectionHandlers(d),
    ...statusHandlers(d),
    ...docsHandlers(d),
    ...accountHandlers(d),
    ...tokenHandlers(d),
    ...licenceHandlers(d),
    ...metricHandlers(d),
    ...artifactHandlers(d),
    ...trafficLightHandlers(d),
    ...webhookHandlers(d),
    ...commandHandlers(d),
    ...dashboardHandlers(d),
    ...quotaHandlers(d),
    ...deadLetterHandlers(d),
    ...invitationHandlers(d, mailer),
    ...sessionHandlers(d, mailer),
    ...decommissionHandlers(d),
    ...notificationHandlers(d),
    ...timeoutRuleHandlers(d),
    ...offboardingHandlers(d),
    ...maintenanceHandlers(d),
    api_healthz: () => ({ ok: true }),
    api_readyz: async (_req, reply) => {
      try {
        await ping(d.pool);
        return { ok: true };
      } catch {
        return reply.code(503).send({ detail: 'not ready: Postgres unreachable' });
      }
    },
    api_metrics: async (_req, reply) => reply.type(d.metrics.contentType).send(await d.metrics.text()),
  };
  const table = routesOf('api');
  checkHandlers('api', handlers);

  // Every answer timed by route (its operationId; unmatched: 404, 405) and status class.
  const durations = d.metrics.hotHistogram('fleet_http_request_duration_seconds');
  const timers = new Map<string, RouteTimer>();
  app.addHook('onResponse', async (req, reply) => {
    const route = (req.routeOptions.config as { operationId?: string } | undefined)?.operationId ?? 'unmatched';
    let timer = timers.get(route);
    if (!timer) timers.set(route, (timer = routeTimer(durations, route)));
    timer(reply.statusCode, reply.elapsedTime / 1000);
  });

  for (const r of table) {
    app.route({
      method: r.method,
      url: colonPath(r.path),
      config: { operationId: r.operationId },
      schema: Object.fromEntries(Object.entries({ params: r.params, querystring: r.query, body: r.body }).filter(([, v]) => v !== undefined)),
      preHandler:
        r.auth === 'none'
          ? undefined
          : async (req) => {
              const p = await resolvePrincipal(req, d.pool, d.sessions, principals);
              authorise(p, r.auth);
              req.principal = p;
            },
      // The one place the typed handlers meet Fastify's untyped registration: the schema just above is
      // the one each handler's types come from.
      handler: (handlers as unknown as Record<string, Handler>)[r.operationId]!,
    });
  }

  const methodsOn = allowedMethods('api');
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0]!;
    const allowed = methodsOn(path);
    if (allowed.length) return reply.code(405).header('Allow', allowed.join(', ')).send({ detail: `method ${req.method} not allowed here; use ${allowed.join(', ')}` });
    return reply.code(404).send({ detail: `no such endpoint: ${path.slice(0, 200)}` });
  });

  app.setErrorHandler((err: FastifyError | HttpError, req, reply) => {
    if (err instanceof HttpError) {
      if (err.retryAfterS) reply.header('Retry-After', String(err.retryAfterS));
      return reply.code(err.status).send(err.errors ? { detail: err.detail, errors: err.errors } : { detail: err.detail });
    }
    const fe = err as FastifyError;
    if (fe.validation) {
      const errors = toFieldErrors(fe.validation as never).map((e) => ({ ...e, path: `${fe.validationContext ?? ''}${e.path === '/' ? '' : e.path}` || '/' }));
      return reply.code(400).send({ detail: `invalid ${fe.validationContext ?? 'request'}: ${fe.message}`, errors });
    }
    if (fe.statusCode && fe.statusCode < 500) return reply.code(fe.statusCode).send({ detail: fe.message });
    // A server under the api is down or refuses writes (read-only, full): an outage, not our bug.
    if (err instanceof DependencyUnavailableError) {
      req.log.warn({ err }, 'request failed: a dependency is unavailable');
      return reply.code(503).header('Retry-After', '5').send({ detail: `${err.dependency} unavailable; retry later` });
    }
    req.log.error({ err }, 'request failed');
    return reply.code(500).send({ detail: 'internal error' });
  });

  return app;
}
