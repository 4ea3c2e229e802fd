// The route table: every endpoint of both HTTP processes, in one place. The gateway and the api
// register exactly these (each refuses to start if it lacks a handler for one of its routes, or has
// a handler for a route that is not here), and the OpenAPI document is generated from this list.
import { Type, type TSchema } from '@sinclair/typebox';
import { ErrorBody, Ok, Slug } from './schemas/common.js';
import { Heartbeat, Diagnostics, Status } from './schemas/ingest.js';
import { InstanceList, InstanceListQuery, InstanceDetail, DiagnosticList, DiagnosticsQuery, IdParams, LoginBody, Session } from './schemas/api.js';
import { MetricsBody, MetricsAnswer, MetricsQuery, MetricNames, MetricSeries } from './schemas/metrics.js';
import {
  ArtifactInit, ArtifactInitAnswer, UploadParams, ChunkParams, ChunkAnswer, UploadStatus, CompleteAnswer, ArtifactList, ArtifactListQuery,
} from './schemas/artifacts.js';

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
    200: { description: 'accepted (durably queued)', schema: Ok },
  }),
  ingest('diagnostics', 'Report coded diagnostics (spec 2.3)', Diagnostics, {
    200: { description: 'accepted (durably queued)', schema: Ok },
  }),
  ingest('status', 'Report operational status and snapshot (spec 2.4)', Status, {
    200: { description: 'accepted (durably queued)', schema: Ok },
  }),
  {
    service: 'gateway',
    method: 'POST',
    path: '/api/ingest/{customer}/{machine}/logcollector/metrics',
    operationId: 'ingest_metrics',
    summary: 'Report host metrics: one record or {items}; idempotent by client_metric_id (per customer and machine, forever)',
    tags: ['ingest', 'metrics'],
    auth: 'ingest-token',
    params: Type.Object({ customer: Slug, machine: Slug }),
    body: MetricsBody,
    responses: {
      200: { description: 'stored (durably queued); `accepted` new records, `duplicates` records already received', schema: MetricsAnswer },
      ...ingestErrors,
      503: err('the queue or the duplicate register did not answer; retry after Retry-After (nothing is stored twice)'),
    },
  },
  {
    ...ingest('artifact-init', 'Start a chunked, resumable artifact upload', ArtifactInit, {}),
    operationId: 'ingest_artifact_init',
    tags: ['ingest', 'artifacts'],
    responses: {
      201: { description: 'upload started: send chunks 0 … chunks-1, then complete', schema: ArtifactInitAnswer },
      ...ingestErrors,
      409: err('Idempotency-Key already used for a different upload'),
      413: err('body over 1 MiB, or `size` over ARTIFACT_MAX_BYTES (2 GiB)'),
      503: err('the upload store did not durably accept the upload; retry after Retry-After'),
    },
  },
  {
    service: 'gateway',
    method: 'PUT',
    path: '/api/ingest/{customer}/{machine}/{software}/artifact-chunk/{upload_id}/{n}',
    operationId: 'ingest_artifact_chunk',
    summary: 'Upload chunk n (raw bytes): any order, any gateway, the same chunk again is a no-op',
    tags: ['ingest', 'artifacts'],
    auth: 'ingest-token',
    params: ChunkParams,
    bodyContentType: 'application/octet-stream',
    responses: {
      200: { description: 'stored (or already there); `received` lists every chunk the upload has', schema: ChunkAnswer },
      ...ingestErrors,
      400: err('malformed slug, upload id or chunk number'),
      404: err('no such upload for this customer, machine and software (or it expired)'),
      413: err('chunk over the chunk size'),
      415: err('Content-Type is not application/octet-stream'),
      422: err('chunk number out of range, or the chunk does not have the length it must have'),
      503: err('the store did not accept the chunk, or this gateway holds too many chunk bodies; retry after Retry-After'),
    },
  },
  {
    service: 'gateway',
    method: 'GET',
    path: '/api/ingest/{customer}/{machine}/{software}/artifact-status/{upload_id}',
    operationId: 'ingest_artifact_status',
    summary: 'Which chunks an upload has and which it lacks (to resume)',
    tags: ['ingest', 'artifacts'],
    auth: 'ingest-token',
    params: UploadParams,
    responses: {
      200: { description: 'the upload', schema: UploadStatus },
      400: err('malformed slug or upload id'),
      403: err('token missing, unknown or revoked, without the ingest scope, or for another customer'),
      404: err('no such upload for this customer, machine and software (or it expired)'),
      429: err('over the per-token rate'),
      503: err('the upload store did not answer; retry'),
    },
  },
  {
    service: 'gateway',
    method: 'POST',
    path: '/api/ingest/{customer}/{machine}/{software}/artifact-complete/{upload_id}',
    operationId: 'ingest_artifact_complete',
    summary: 'Finish an upload: every chunk must be there and the sha256 (when given at init) must match',
    tags: ['ingest', 'artifacts'],
    auth: 'ingest-token',
    params: UploadParams,
    responses: {
      200: { description: 'the artifact (completing again answers the same id)', schema: CompleteAnswer },
      400: err('malformed slug or upload id'),
      403: err('token missing, unknown or revoked, without the ingest scope, or for another customer'),
      404: err('no such upload for this customer, machine and software (or it expired)'),
      409: err('chunks are missing (listed in the detail), or the sha256 of the chunks differs from the one given at init'),
      429: err('over the per-token rate'),
      503: err('the store or the queue did not answer; retry'),
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
    path: '/api/machines/{id}/metrics',
    operationId: 'get_machine_metrics',
    summary: 'Host metrics of a machine: one series (avg, min, max per step) when `name` is given, else the metric names',
    tags: ['metrics'],
    auth: 'viewer',
    params: IdParams,
    query: MetricsQuery,
    responses: {
      200: { description: 'a series (with `name`) or the names (without)', schema: Type.Union([MetricSeries, MetricNames]) },
      400: err('ill-formed id or query (from after to, too many steps)'),
      ...authErrors,
      404: err('no such machine'),
    },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/machines/{id}/artifacts',
    operationId: 'list_machine_artifacts',
    summary: 'Artifacts uploaded from a machine, newest first; `software` filters per service (5.8.0)',
    tags: ['artifacts'],
    auth: 'viewer',
    params: IdParams,
    query: ArtifactListQuery,
    responses: { 200: { description: 'artifacts', schema: ArtifactList }, 400: err('ill-formed id or query'), ...authErrors, 404: err('no such machine') },
  },
  {
    service: 'api',
    method: 'GET',
    path: '/api/artifacts/{id}/download',
    operationId: 'download_artifact',
    summary: 'The bytes of an artifact, streamed; supports one Range (206, 416)',
    tags: ['artifacts'],
    auth: 'viewer',
    params: IdParams,
    responses: {
      200: { description: 'the whole artifact (Content-Length, Content-Disposition, Accept-Ranges)', contentType: 'application/octet-stream' },
      206: { description: 'the requested range (Content-Range)', contentType: 'application/octet-stream' },
      400: err('ill-formed id'),
      ...authErrors,
      404: err('no such artifact'),
      416: err('range not satisfiable (Content-Range: bytes */size)'),
      503: err('the artifact store is not reachable; retry'),
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
