// The route table: every endpoint of both HTTP processes, in one place. The gateway and the api
// register exactly these (each refuses to start if it lacks a handler for one of its routes, or has
// a handler for a route that is not here), and the OpenAPI document is generated from this list.
import { Type, type TSchema } from '@sinclair/typebox';
import { ErrorBody, Ok, Slug } from './schemas/common.js';
import { Heartbeat, Diagnostics, Status } from './schemas/ingest.js';
import { InstanceList, InstanceListQuery, InstanceDetail, DiagnosticList, DiagnosticsQuery, IdParams, LoginBody, Session } from './schemas/api.js';
import { AvailableCommandList, Command, CommandAck, CommandList, CommandListQuery, OkWithCommands, QueueCommandBody } from './schemas/commands.js';

export type Service = 'gateway' | 'api';
export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
/**
 * Who may call a route. `ingest-token`: an API token with the ingest scope, for the path's customer
 * (gateway). `user`: a logged-in dashboard user. `viewer` / `admin` / `owner`: at least that role in
 * the active customer (an API token with the read scope counts as viewer). `system-admin`.
 */
export type Auth = 'none' | 'ingest-token' | 'user' | 'viewer' | 'admin' | 'owner' | 'system-admin';

export interface Response {
  description: string;
  schema?: TSchema;
  contentType?: string;
}

export interface RouteSpec {
  service: Service;
  method: Method;
  /** OpenAPI form: `{name}` for a path parameter. */
  path: string;
  operationId: string;
  summary: string;
  tags: string[];
  auth: Auth;
  params?: TSchema;
  query?: TSchema;
  body?: TSchema;
  bodyContentType?: string;
  responses: Record<number, Response>;
}

const err = (description: string): Response => ({ description, schema: ErrorBody });

/** Answers of every authenticated read-API route. */
const authErrors: Record<number, Response> = {
  401: err('not authenticated: no, an invalid or an expired session or token'),
  403: err('authenticated, but not allowed (role, scope or customer)'),
};

const ingestParams = Type.Object({ customer: Slug, machine: Slug, software: Slug });

/** Answers every ingest endpoint shares. */
const ingestErrors: Record<number, Response> = {
  400: err('malformed path slug, malformed JSON or a bad Idempotency-Key'),
  403: err('token missing, unknown or revoked, without the ingest scope, or for another customer'),
  408: err('the body did not arrive in time'),
  413: err('body over the limit (1 MiB by default)'),
  415: err('Content-Type is not application/json'),
  422: err('schema violation; `errors` lists the failing paths'),
  429: err('over the per-token rate; see Retry-After'),
  503: err('the queue did not durably accept the report; retry after Retry-After'),
};

function ingest(kind: string, summary: string, body: TSchema, ok: Record<number, Response>): RouteSpec {
  return {
    service: 'gateway',
    method: 'POST',
    path: `/api/ingest/{customer}/{machine}/{software}/${kind}`,
    operationId: `ingest_${kind}`,
    summary,
    tags: ['ingest'],
    auth: 'ingest-token',
    params: ingestParams,
    body,
    responses: { ...ok, ...ingestErrors },
  };
}

const ops = (service: Service): RouteSpec[] => [
  {
    service,
    method: 'GET',
    path: '/healthz',
    operationId: `${service}_healthz`,
    summary: 'Liveness: the process runs',
    tags: ['operations'],
    auth: 'none',
    responses: { 200: { description: 'alive', schema: Ok } },
  },
  {
    service,
    method: 'GET',
    path: '/readyz',
    operationId: `${service}_readyz`,
    summary: service === 'gateway' ? 'Readiness: NATS connected and the stream reachable' : 'Readiness: Postgres reachable',
    tags: ['operations'],
    auth: 'none',
    responses: { 200: { description: 'ready', schema: Ok }, 503: err('not ready') },
  },
  {
    service,
    method: 'GET',
    path: '/metrics',
    operationId: `${service}_metrics`,
    summary: 'Prometheus metrics',
    tags: ['operations'],
    auth: 'none',
    responses: { 200: { description: 'Prometheus text format', contentType: 'text/plain' } },
  },
];

export const routes: RouteSpec[] = [
  ingest('heartbeat', 'Report liveness (spec 2.2)', Heartbeat, {
    200: { description: 'accepted (durably queued); `commands` while agent commands are pending for this instance', schema: OkWithCommands },
  }),
  ingest('diagnostics', 'Report coded diagnostics (spec 2.3)', Diagnostics, {
    200: { description: 'accepted (durably queued)', schema: Ok },
  }),
  ingest('status', 'Report operational status and snapshot (spec 2.4)', Status, {
    200: { description: 'accepted (durably queued); `commands` while agent commands are pending for this instance', schema: OkWithCommands },
  }),
  {
    service: 'gateway',
    method: 'POST',
    path: '/api/ingest/{customer}/{machine}/{software}/commands/{command_id}/ack',
    operationId: 'ingest_command_ack',
    summary: 'Acknowledge an agent command with its outcome; the same ack again is a no-op',
    tags: ['ingest', 'commands'],
    auth: 'ingest-token',
    params: Type.Object({ customer: Slug, machine: Slug, software: Slug, command_id: Type.String({ format: 'uuid' }) }),
    body: CommandAck,
    responses: {
      200: { description: 'accepted (durably queued); applied by a worker', schema: Ok },
      ...ingestErrors,
      400: err('malformed path slug or command id, malformed JSON or a bad Idempotency-Key'),
      404: err('no such command for this instance'),
    },
  },
  ...ops('gateway'),

  {
    service: 'api',
    method: 'POST',
    path: '/auth/login',
    operationId: 'auth_login',
    summary: 'Log in with e-mail (or user name) and password; returns a JWT and sets the session cookie',
    tags: ['auth'],
    auth: 'none',
    body: LoginBody,
    responses: {
      200: { description: 'logged in', schema: Session },
      400: err('no login given'),
      401: err('wrong e-mail address, user name or password'),
      429: err('too many failed logins for this account or address; see Retry-After'),
    },
  },
  {
    service: 'api',
    method: 'POST',
    path: '/auth/logout',
    operationId: 'auth_logout',
    summary: 'Clear the session cookie',
    tags: ['auth'],
    auth: 'none',
    responses: { 200: { description: 'logged out', schema: Ok } },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/instances',
    operationId: 'list_instances',
    summary: "The customer's instances (software on a machine) with their traffic light",
    tags: ['instances'],
    auth: 'viewer',
    query: InstanceListQuery,
    responses: { 200: { description: 'instances', schema: InstanceList }, 400: err('bad query'), ...authErrors },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}',
    operationId: 'get_instance',
    summary: 'One instance with its latest status snapshot',
    tags: ['instances'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'the instance', schema: InstanceDetail }, 400: err('ill-formed id'), ...authErrors, 404: err('no such instance') },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/diagnostics',
    operationId: 'list_instance_diagnostics',
    summary: 'Diagnostics of one instance, newest first',
    tags: ['diagnostics'],
    auth: 'viewer',
    params: IdParams,
    query: DiagnosticsQuery,
    responses: { 200: { description: 'diagnostics', schema: DiagnosticList }, 400: err('bad query or id'), ...authErrors, 404: err('no such instance') },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/commands/available',
    operationId: 'list_available_commands',
    summary: "The commands the instance's latest status snapshot advertises (modules.<module>.commands)",
    tags: ['commands'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'advertised commands', schema: AvailableCommandList }, 400: err('ill-formed id'), ...authErrors, 404: err('no such instance') },
  },
  {
    service: 'api',
    method: 'POST',
    path: '/api/instances/{id}/commands',
    operationId: 'queue_command',
    summary: 'Queue an advertised command for the instance; delivered in the answer to its next heartbeat or status report',
    tags: ['commands'],
    auth: 'admin',
    params: IdParams,
    body: QueueCommandBody,
    responses: {
      201: { description: 'queued', schema: Command },
      400: err('ill-formed id or body'),
      ...authErrors,
      404: err('no such instance'),
      409: err('too many open commands for this instance'),
      413: err('args over COMMAND_ARGS_MAX_BYTES'),
      422: err('the latest snapshot does not advertise this command, or the args do not match its params'),
    },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/commands',
    operationId: 'list_instance_commands',
    summary: 'Commands of the instance, newest first, each with its history of states',
    tags: ['commands'],
    auth: 'viewer',
    params: IdParams,
    query: CommandListQuery,
    responses: { 200: { description: 'commands', schema: CommandList }, 400: err('ill-formed id or query'), ...authErrors, 404: err('no such instance') },
  },
  {
    service: 'api',
    method: 'POST',
    path: '/api/commands/{id}/cancel',
    operationId: 'cancel_command',
    summary: 'Cancel a queued command (a cancelled one again: no-op)',
    tags: ['commands'],
    auth: 'admin',
    params: IdParams,
    responses: {
      200: { description: 'cancelled', schema: Command },
      400: err('ill-formed id'),
      ...authErrors,
      404: err('no such command'),
      409: err('the command is no longer queued'),
    },
  },
  ...ops('api'),
];

export function routesOf(service: Service): RouteSpec[] {
  return routes.filter((r) => r.service === service);
}

/** `/api/x/{id}` -> `/api/x/:id` (uWS and Fastify syntax). */
export function colonPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ':$1');
}

/** A matcher for a path template, for telling 404 (unknown path) from 405 (wrong method). */
export function pathRegex(path: string): RegExp {
  return new RegExp('^' + path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{\w+\}/g, '[^/]+') + '/?$');
}

export function checkHandlers(service: Service, handlers: Record<string, unknown>): void {
  const wanted = new Set(routesOf(service).map((r) => r.operationId));
  const missing = [...wanted].filter((id) => !(id in handlers));
  const extra = Object.keys(handlers).filter((id) => !wanted.has(id));
  if (missing.length || extra.length) {
    throw new Error(`${service} handlers do not match lib/routes.ts: missing [${missing.join(', ')}], not in the table [${extra.join(', ')}]`);
  }
}
