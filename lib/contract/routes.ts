// The route table: every endpoint of both HTTP processes, in one place. The gateway and the api
// register exactly these (each refuses to start if it lacks a handler for one of its routes, or has
// a handler for a route that is not here), and the OpenAPI document is generated from this list.
import { Type, type TSchema } from '@sinclair/typebox';
import { ErrorBody, Ok, Slug } from './schemas/common.js';
import { Heartbeat, Diagnostics, Status, HelpUpload, BatchIngest, BatchAnswer } from './schemas/ingest.js';
import { InstanceList, InstanceListQuery, FleetSummaryQuery, InstanceDetail, DiagnosticList, DiagnosticsQuery, IdParams, LoginBody, Session } from './schemas/api.js';
import { WhitelistRuleInput, WhitelistRule, WhitelistRuleList } from './schemas/whitelist.js';
import { HelpQuery, HelpText, HelpMissing, MissingHelp, HelpStored } from './schemas/help.js';
import { RejectionQuery, AdminRejectionQuery, RejectionList } from './schemas/rejections.js';
import { InstanceStatus, StatusHistoryQuery, StatusHistory } from './schemas/status.js';
import { DocsFileParams } from './schemas/docs.js';
import * as A from './schemas/accounts.js';
import { AvailableCommandList, Command, CommandAck, CommandList, CommandListQuery, OkWithCommands, QueueCommandBody } from './schemas/commands.js';
import { MetricsBody, MetricsAnswer, MetricsQuery, MetricNames, MetricSeries } from './schemas/metrics.js';
import {
  ArtifactInit, ArtifactInitAnswer, UploadParams, ChunkParams, ChunkAnswer, UploadStatus, CompleteAnswer, ArtifactList, ArtifactListQuery,
} from './schemas/artifacts.js';
import {
  FleetSummary,
  LightEvent,
  LightEventList,
  LightEventsQuery,
  WebhookBody,
  WebhookCreated,
  WebhookList,
  WebhookDeliveryList,
  DeliveriesQuery,
} from './schemas/traffic-light.js';
import { DashboardAssetParams, DashboardInstanceParams } from './schemas/dashboard.js';
import { QuotaList } from './schemas/quotas.js';
import { EmailNotifications, EmailNotificationsInput, UnsubscribeQuery } from './schemas/notifications.js';
import { DeadLetterQuery, DeadLetterList, DeadLetterParams, DeadLetterDetail, ReplayBody, ReplayAnswer } from './schemas/dead-letters.js';
import { Retirement } from './schemas/decommission.js';
import { TimeoutRuleChanged, TimeoutRuleInput, TimeoutRuleList, TimeoutRuleUpdate } from './schemas/timeout-rules.js';
import { MaintenanceWindow, MaintenanceWindowBody, MaintenanceWindowList } from './schemas/maintenance.js';

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
  tags: readonly string[];
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
  403: err('token missing, unknown, revoked or expired, without the ingest scope, for another customer, or bound to another machine'),
  408: err('the body did not arrive in time'),
  413: err('body over the limit (1 MiB by default)'),
  415: err('Content-Type is not application/json'),
  422: err('schema violation; `errors` lists the failing paths'),
  429: err('over the per-token rate; see Retry-After'),
  503: err('the queue did not durably accept the report; retry after Retry-After'),
};

/** Answers of the routes that name an upload (status, complete). */
const uploadErrors = {
  400: err('malformed slug or upload id'),
  403: err('token missing, unknown, revoked or expired, without the ingest scope, for another customer, or bound to another machine'),
  404: err('no such upload for this customer, machine and software (or it expired)'),
  429: err('over the per-token rate'),
};

/** A route that names an upload (status, complete). */
function uploadRoute(method: Method, action: string, operationId: string, summary: string, responses: Record<number, Response>): RouteSpec {
  return {
    service: 'gateway',
    method,
    path: `/api/ingest/{customer}/{machine}/{software}/${action}/{upload_id}`,
    operationId,
    summary,
    tags: ['ingest', 'artifacts'],
    auth: 'ingest-token',
    params: UploadParams,
    responses: { ...uploadErrors, ...responses },
  };
}

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

/** One route, its literal types kept (what api/types.ts derives each handler's types from). */
const route = <const R extends RouteSpec>(r: R): R => r;

/**
 * Every route. Kept as literal types (`as const`), so each handler of the api gets the static types
 * of its own params, query and body (api/types.ts).
 */
export const routes = [
  ingest('heartbeat', 'Report liveness (spec 2.2)', Heartbeat, {
    200: { description: 'accepted (durably queued); `commands` while agent commands are pending for this instance', schema: OkWithCommands },
  }),
  ingest('diagnostics', 'Report coded diagnostics (spec 2.3)', Diagnostics, {
    200: { description: 'accepted (durably queued); every reported code has a DE and an EN help text', schema: Ok },
    202: { description: 'accepted (durably queued); `missing_help` lists the codes that lack a DE or EN help text', schema: MissingHelp },
  }),
  ingest('status', 'Report operational status and snapshot (spec 2.4; typed leaves since 5.10.0)', Status, {
    200: { description: 'accepted (durably queued); `commands` while agent commands are pending for this instance', schema: OkWithCommands },
  }),
  ingest('help', 'Upload diagnostic help texts (DE and EN) for this software', HelpUpload, {
    200: { description: 'accepted (durably queued); stored by the workers, honoured by every gateway within seconds', schema: HelpStored },
  }),
  route({
    service: 'gateway',
    method: 'POST',
    path: '/api/ingest/{customer}/batch',
    operationId: 'ingest_batch',
    summary: 'Many reports (heartbeat, diagnostics, status, help) for many machines and software of one customer; one result per entry',
    tags: ['ingest'],
    auth: 'ingest-token',
    params: Type.Object({ customer: Slug }),
    body: BatchIngest,
    responses: {
      200: {
        description:
          'every entry answered in `results`, in order: 200/202 accepted (durably queued, with the report id) or the status and detail that entry alone would have got; ' +
          'Retry-After when some entries got 429 or 503',
        schema: BatchAnswer,
      },
      ...ingestErrors,
      400: err('malformed customer slug, malformed JSON, or an Idempotency-Key header (give each entry its own idempotency_key)'),
      413: err('body over BATCH_BODY_LIMIT_BYTES (4 MiB by default)'),
      422: err('not `{entries: [...]}` with 1 to MAX_ITEMS (1000) entries; `errors` lists the failing paths'),
      429: err('over the per-token rate: no entry fitted (each entry counts as one request); see Retry-After'),
      503: err('no entry was durably queued (NATS down, stream full, no PubAck in time) or the gateway is shutting down; retry after Retry-After'),
    },
  }),
  route({
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
  }),
  route({
    ...ingest('artifact-init', 'Start a chunked, resumable artifact upload', ArtifactInit, {}),
    operationId: 'ingest_artifact_init',
    tags: ['ingest', 'artifacts'],
    responses: {
      201: { description: 'upload started: send chunks 0 … chunks-1, then complete', schema: ArtifactInitAnswer },
      ...ingestErrors,
      409: err('Idempotency-Key already used for a different upload'),
      413: err("body over 1 MiB, or `size` over the customer's quota artifact_max_bytes (ARTIFACT_MAX_BYTES, 2 GiB by default)"),
      503: err('the upload store, or the quota check (Redis), did not answer; retry after Retry-After'),
      507: err("the upload would take the customer over its quota artifact_bytes (stored artifacts plus uploads in progress; QUOTA_ARTIFACT_BYTES, 10 GiB by default)"),
    },
  }),
  route({
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
  }),
  uploadRoute('GET', 'artifact-status', 'ingest_artifact_status', 'Which chunks an upload has and which it lacks (to resume)', {
    200: { description: 'the upload', schema: UploadStatus },
    503: err('the upload store did not answer; retry'),
  }),
  uploadRoute('POST', 'artifact-complete', 'ingest_artifact_complete', 'Finish an upload: every chunk must be there and the sha256 (when given at init) must match', {
    200: { description: 'the artifact (completing again answers the same id)', schema: CompleteAnswer },
    409: err('chunks are missing (listed in the detail), or the sha256 of the chunks differs from the one given at init'),
    503: err('the store or the queue did not answer; retry'),
  }),
  ...ops('gateway'),

  route({
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
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/logout',
    operationId: 'auth_logout',
    summary: 'End the session (on this api replica at once, on the others when the change notice arrives, milliseconds) and clear the cookie',
    tags: ['auth'],
    auth: 'none',
    responses: { 200: { description: 'logged out', schema: Ok } },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/instances',
    operationId: 'list_instances',
    summary: "The customer's instances (software on a machine) with their traffic light",
    tags: ['instances'],
    auth: 'viewer',
    query: InstanceListQuery,
    responses: { 200: { description: 'instances', schema: InstanceList }, 400: err('bad query'), ...authErrors },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}',
    operationId: 'get_instance',
    summary: 'One instance with its latest status snapshot',
    tags: ['instances'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'the instance', schema: InstanceDetail }, 400: err('ill-formed id'), ...authErrors, 404: err('no such instance') },
  }),
  route({
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
  }),
  // Traffic light (issue 4).
  route({
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/events',
    operationId: 'list_instance_light_events',
    summary: "Changes of one instance's traffic light, newest first",
    tags: ['traffic light'],
    auth: 'viewer',
    params: IdParams,
    query: LightEventsQuery,
    responses: { 200: { description: 'changes of colour', schema: LightEventList }, 400: err('bad query or id'), ...authErrors, 404: err('no such instance') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/fleet/summary',
    operationId: 'fleet_summary',
    summary: 'Instances per traffic-light colour (all, or those matching the filters of GET /api/instances)',
    tags: ['traffic light'],
    auth: 'viewer',
    query: FleetSummaryQuery,
    responses: { 200: { description: 'counts per colour', schema: FleetSummary }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/fleet/stream',
    operationId: 'fleet_light_stream',
    summary: "Live stream (Server-Sent Events) of the customer's traffic-light changes",
    tags: ['traffic light'],
    auth: 'viewer',
    responses: {
      200: { description: '`text/event-stream`: one `event: light` per change, its data a LightEvent', schema: LightEvent, contentType: 'text/event-stream' },
      ...authErrors,
      429: err("the customer has as many streams open on this api replica as its quota stream_connections allows (QUOTA_STREAM_CONNECTIONS, 50 by default); retry after Retry-After"),
      503: err('too many open streams on this api replica (SSE_MAX_CLIENTS, all customers); retry after Retry-After'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/webhooks',
    operationId: 'list_webhooks',
    summary: "The customer's webhooks, with their last success and failure",
    tags: ['webhooks'],
    auth: 'admin',
    responses: { 200: { description: 'webhooks (never their secrets)', schema: WebhookList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/webhooks',
    operationId: 'create_webhook',
    summary: 'Add a webhook: a signed POST on every change of a traffic light to or from red',
    tags: ['webhooks'],
    auth: 'admin',
    body: WebhookBody,
    responses: {
      201: { description: 'created; the secret is shown only here', schema: WebhookCreated },
      400: err('bad URL or body, or a URL whose host is (or resolves to) an address webhooks may not reach'),
      ...authErrors,
      409: err('the customer has as many webhooks as its quota webhooks allows (WEBHOOKS_PER_CUSTOMER, 10 by default)'),
    },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/webhooks/{id}',
    operationId: 'delete_webhook',
    summary: 'Remove a webhook (deliveries still queued for it are dropped)',
    tags: ['webhooks'],
    auth: 'admin',
    params: IdParams,
    responses: { 204: { description: 'deleted' }, 400: err('ill-formed id'), ...authErrors, 404: err('no such webhook') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/webhooks/{id}/deliveries',
    operationId: 'list_webhook_deliveries',
    summary: 'Deliveries of one webhook (state, attempts, last status and error), newest first',
    tags: ['webhooks'],
    auth: 'admin',
    params: IdParams,
    query: DeliveriesQuery,
    responses: { 200: { description: 'deliveries', schema: WebhookDeliveryList }, 400: err('bad query or id'), ...authErrors, 404: err('no such webhook') },
  }),
  // E-mail notifications of traffic-light changes (api/handlers/notifications.ts, workers/mail-digest.ts).
  route({
    service: 'api',
    method: 'GET',
    path: '/api/notifications/email',
    operationId: 'get_email_notifications',
    summary: "The caller's own e-mail notifications in the active customer: which changes are mailed, in which language",
    tags: ['notifications'],
    auth: 'viewer',
    responses: { 200: { description: 'the subscription (kinds [] when none)', schema: EmailNotifications }, ...authErrors, 403: err('not a member of the active customer, or an API token (only users have e-mail notifications)') },
  }),
  route({
    service: 'api',
    method: 'PUT',
    path: '/api/notifications/email',
    operationId: 'put_email_notifications',
    summary: "Set the caller's own e-mail notifications in the active customer (kinds [] turns them off)",
    tags: ['notifications'],
    auth: 'viewer',
    body: EmailNotificationsInput,
    responses: {
      200: { description: 'the subscription as stored', schema: EmailNotifications },
      400: err('bad body: an unknown kind, a kind twice, an unknown language'),
      ...authErrors,
      403: err('not a member of the active customer, or an API token (only users have e-mail notifications)'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/unsubscribe',
    operationId: 'unsubscribe_email',
    summary: 'The unsubscribe link of a notification e-mail (List-Unsubscribe): turns that subscription off, without login',
    tags: ['notifications'],
    auth: 'none',
    query: UnsubscribeQuery,
    responses: { 200: { description: 'a short page saying the subscription is off (repeating the link changes nothing)', contentType: 'text/html' }, 400: err('no token, or an invalid or unknown token') },
  }),
  route({
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
  }),
  route({
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
  }),
  route({
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
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/artifacts/{id}',
    operationId: 'delete_artifact',
    summary: "Delete an artifact: its bytes, its record, and its size from the customer's quota artifact_bytes; a second delete answers 404",
    tags: ['artifacts'],
    auth: 'admin',
    params: IdParams,
    responses: {
      204: { description: 'deleted (a download already under way breaks off instead of ending short)' },
      400: err('ill-formed id'),
      ...authErrors,
      404: err('no such artifact (deleted already)'),
      503: err('the artifact store is not reachable; retry (the artifact stays hidden, and a retry or the retention job finishes the deletion)'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/status',
    operationId: 'get_instance_status',
    summary: 'Latest status and full snapshot of one instance, typed leaves (5.10.0) resolved',
    tags: ['status'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'latest status (all null before the first status report)', schema: InstanceStatus }, 400: err('ill-formed id'), ...authErrors, 404: err('no such instance') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/status/history',
    operationId: 'list_instance_status_history',
    summary: 'Status reports of one instance with their snapshots, newest first',
    tags: ['status'],
    auth: 'viewer',
    params: IdParams,
    query: StatusHistoryQuery,
    responses: { 200: { description: 'status history', schema: StatusHistory }, 400: err('bad query or id'), ...authErrors, 404: err('no such instance') },
  }),
  helpRoute('/api/instances/{id}/help', 'get_instance_help'),
  helpRoute('/instances/{id}/help', 'get_instance_help_short'),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/whitelist',
    operationId: 'list_whitelist_rules',
    summary: "The customer's diagnostics whitelist rules, oldest first (the order they are tried in)",
    tags: ['whitelist'],
    auth: 'viewer',
    responses: { 200: { description: 'rules', schema: WhitelistRuleList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/whitelist',
    operationId: 'create_whitelist_rule',
    summary: 'Add a whitelist rule; diagnostics it matches are stored suppressed from then on (every worker within seconds)',
    tags: ['whitelist'],
    auth: 'admin',
    body: WhitelistRuleInput,
    responses: {
      201: { description: 'the new rule', schema: WhitelistRule },
      400: err('invalid rule, or a message pattern over a limit (a `?` inside a floating segment, more than WILDCARD_GROUPS_MAX wildcard runs)'),
      ...authErrors,
      409: err("the customer has as many rules as its quota whitelist_rules allows (WHITELIST_MAX_RULES, 1000 by default), or its message patterns' floating texts would end in one another more than SUFFIX_CHAIN_MAX deep"),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/whitelist/{id}',
    operationId: 'get_whitelist_rule',
    summary: 'One whitelist rule',
    tags: ['whitelist'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'the rule', schema: WhitelistRule }, 400: err('ill-formed id'), ...authErrors, 404: err('no such rule') },
  }),
  route({
    service: 'api',
    method: 'PUT',
    path: '/api/whitelist/{id}',
    operationId: 'update_whitelist_rule',
    summary: 'Replace a whitelist rule (fields left out take their defaults)',
    tags: ['whitelist'],
    auth: 'admin',
    params: IdParams,
    body: WhitelistRuleInput,
    responses: {
      200: { description: 'the rule', schema: WhitelistRule },
      400: err('invalid rule or id, or a message pattern over a limit (as for create)'),
      ...authErrors,
      404: err('no such rule'),
      409: err("the customer's message patterns' floating texts would end in one another more than SUFFIX_CHAIN_MAX deep"),
    },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/whitelist/{id}',
    operationId: 'delete_whitelist_rule',
    summary: 'Delete a whitelist rule; rows already stored stay as they are',
    tags: ['whitelist'],
    auth: 'admin',
    params: IdParams,
    responses: { 204: { description: 'deleted' }, 400: err('ill-formed id'), ...authErrors, 404: err('no such rule') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/ingest-rejections',
    operationId: 'list_ingest_rejections',
    summary: "Rejected ingest requests of the customer, newest first (the log is rate-limited per source; see `dropped`)",
    tags: ['rejections'],
    auth: 'viewer',
    query: RejectionQuery,
    responses: { 200: { description: 'rejections', schema: RejectionList }, 400: err('bad query'), ...authErrors },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/admin/ingest-rejections',
    operationId: 'list_unattributed_ingest_rejections',
    summary: 'Rejected ingest requests with no known customer (missing or unknown token, unknown path), newest first',
    tags: ['rejections', 'admin'],
    auth: 'system-admin',
    query: AdminRejectionQuery,
    responses: { 200: { description: 'rejections', schema: RejectionList }, 400: err('bad query'), ...authErrors },
  }),
  // The dead-letter stream (docs/operations.md, "Dead letters"): reports the workers could not store.
  route({
    service: 'api',
    method: 'GET',
    path: '/api/admin/dead-letters',
    operationId: 'list_dead_letters',
    summary: 'Dead letters (reports the workers could not store), oldest first, by customer, time and reason',
    tags: ['dead letters', 'admin'],
    auth: 'system-admin',
    query: DeadLetterQuery,
    responses: {
      200: { description: 'a page of dead letters; `next_seq` continues', schema: DeadLetterList },
      400: err('bad query (customer, since, limit)'),
      ...authErrors,
      503: err('NATS is not reachable; retry after Retry-After'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/admin/dead-letters/{seq}',
    operationId: 'get_dead_letter',
    summary: 'One dead letter: its headers and its reports, bodies pretty-printed and bounded',
    tags: ['dead letters', 'admin'],
    auth: 'system-admin',
    params: DeadLetterParams,
    responses: {
      200: { description: 'the dead letter', schema: DeadLetterDetail },
      400: err('ill-formed sequence number'),
      ...authErrors,
      404: err('no such dead letter (replayed already, or expired)'),
      503: err('NATS is not reachable; retry after Retry-After'),
    },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/admin/dead-letter-replays',
    operationId: 'replay_dead_letters',
    summary: 'Replay dead letters: republish each to the ingest stream, wait for the PubAck, remove it; stored once however often replayed',
    tags: ['dead letters', 'admin'],
    auth: 'system-admin',
    body: ReplayBody,
    responses: {
      200: { description: 'what was done with each dead letter, and a summary', schema: ReplayAnswer },
      400: err('bad body, or no selection (seqs, a filter, or all)'),
      ...authErrors,
      503: err('NATS is not reachable; retry after Retry-After'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/openapi.json',
    operationId: 'openapi_document',
    summary: 'This OpenAPI 3.1 document (gateway and api routes)',
    tags: ['docs'],
    auth: 'none',
    responses: { 200: { description: 'OpenAPI 3.1 document', schema: Type.Record(Type.String(), Type.Unknown()) } },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/docs',
    operationId: 'docs_page',
    summary: 'The OpenAPI document as a readable page (Swagger UI, served locally)',
    tags: ['docs'],
    auth: 'none',
    responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/docs/{file}',
    operationId: 'docs_asset',
    summary: "The docs page's scripts and styles",
    tags: ['docs'],
    auth: 'none',
    params: DocsFileParams,
    responses: { 200: { description: 'the file', contentType: 'application/octet-stream' }, 404: err('no such file') },
  }),
  // Accounts, customers, members, API tokens (issue 8).
  route({
    service: 'api',
    method: 'GET',
    path: '/auth/me',
    operationId: 'auth_me',
    summary: 'The logged-in user, their customers and roles, the active customer, pending conversions and email_sha256',
    tags: ['auth'],
    auth: 'user',
    responses: { 200: { description: 'the user', schema: A.Me }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/conversions/ack',
    operationId: 'auth_conversions_ack',
    summary: 'Acknowledge pending conversions (idempotent: acknowledging again changes nothing)',
    tags: ['auth'],
    auth: 'user',
    body: A.ConversionAckBody,
    responses: { 200: { description: 'acknowledged', schema: A.ConversionAck }, 400: err('bad body'), ...authErrors },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/auth/my-customers',
    operationId: 'my_customers',
    summary: 'Customers the user may switch to, with the role in each (a system administrator: every customer)',
    tags: ['auth'],
    auth: 'user',
    responses: { 200: { description: 'customers', schema: A.MyCustomers }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/auth/switch-customer',
    operationId: 'switch_customer',
    summary: 'Make another customer the active one: a new session token (and cookie)',
    tags: ['auth'],
    auth: 'user',
    body: A.SwitchCustomerBody,
    responses: {
      200: { description: 'switched', schema: Session },
      400: err('neither customer_id nor customer given'),
      ...authErrors,
      403: err('not a member of that customer (or no such customer)'),
      404: err('no such customer (system administrators only; others get 403)'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/members',
    operationId: 'list_members',
    summary: 'Members of the active customer and their roles',
    tags: ['members'],
    auth: 'owner',
    responses: { 200: { description: 'members', schema: A.MemberList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/members',
    operationId: 'add_member',
    summary: 'The older name of POST /api/invitations: invites the address (no account is created, no password handed out)',
    tags: ['members'],
    auth: 'owner',
    body: A.InviteBody,
    responses: {
      202: { description: 'invitation pending (the same answer whether or not the address has an account)', schema: A.InvitationAnswer },
      400: err('bad e-mail address or role'),
      ...authErrors,
      409: err('already a member of this customer, or too many open invitations'),
    },
  }),
  route({
    service: 'api',
    method: 'PUT',
    path: '/api/members/{user_id}',
    operationId: 'update_member',
    summary: "Change a member's role",
    tags: ['members'],
    auth: 'owner',
    params: A.UserIdParams,
    body: A.UpdateMemberBody,
    responses: { 200: { description: 'changed', schema: A.Member }, 400: err('bad id or role'), ...authErrors, 404: err('no such member'), 409: err('the last owner cannot be demoted') },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/members/{user_id}',
    operationId: 'remove_member',
    summary: 'Remove a member from the active customer (the account stays)',
    tags: ['members'],
    auth: 'owner',
    params: A.UserIdParams,
    responses: { 200: { description: 'removed', schema: Ok }, 400: err('bad id'), ...authErrors, 404: err('no such member'), 409: err('the last owner cannot be removed') },
  }),
  // The account life cycle: invitations, sessions, passwords (api/handlers/invitations.ts, sessions.ts).
  route({
    service: 'api',
    method: 'POST',
    path: '/api/invitations',
    operationId: 'create_invitation',
    summary: 'Invite an address with a role: the invitee gets a single-use link by e-mail (inviting again replaces the open invitation)',
    tags: ['members'],
    auth: 'owner',
    body: A.InviteBody,
    responses: {
      202: { description: 'invitation pending (the same answer whether or not the address has an account)', schema: A.InvitationAnswer },
      400: err('bad e-mail address, role or lang'),
      ...authErrors,
      409: err('already a member of this customer, or 200 open invitations'),
    },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/invitations',
    operationId: 'list_invitations',
    summary: "The active customer's open invitations (pending or expired), with what became of their e-mail",
    tags: ['members'],
    auth: 'owner',
    responses: { 200: { description: 'open invitations', schema: A.InvitationList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/invitations/{id}/resend',
    operationId: 'resend_invitation',
    summary: 'Send an open invitation again: a new link (the old one stops working) and a new expiry',
    tags: ['members'],
    auth: 'owner',
    params: IdParams,
    responses: { 202: { description: 'sent again', schema: A.InvitationAnswer }, 400: err('ill-formed id'), ...authErrors, 404: err('no such open invitation') },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/invitations/{id}',
    operationId: 'revoke_invitation',
    summary: 'Revoke an open invitation: its link stops working',
    tags: ['members'],
    auth: 'owner',
    params: IdParams,
    responses: { 200: { description: 'revoked', schema: Ok }, 400: err('ill-formed id'), ...authErrors, 404: err('no such open invitation') },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/invitation',
    operationId: 'invitation_info',
    summary: "For the link's holder: the customer and role it invites to, and whether the address has an account (log in) or not (choose a password)",
    tags: ['auth'],
    auth: 'none',
    body: A.InvitationTokenBody,
    responses: { 200: { description: 'the invitation', schema: A.InvitationInfo }, 400: err('invalid, used, revoked or expired link') },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/invitation/accept',
    operationId: 'accept_invitation',
    summary: 'Accept an invitation: a new person with `password` (the account is created and logged in); a person with an account while logged in as it',
    tags: ['auth'],
    auth: 'none',
    body: A.AcceptInvitationBody,
    responses: {
      200: { description: 'accepted: a session in the customer joined (also set as the cookie)', schema: A.AcceptedInvitation },
      400: err('invalid, used, revoked or expired link; no password, or one the password rules refuse'),
      401: err('the address has an account: log in with it first'),
      403: err('logged in with another account than the invited address'),
      409: err('an account with this address was created meanwhile: log in and accept'),
    },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/logout-everywhere',
    operationId: 'auth_logout_everywhere',
    summary: "End every session of the logged-in user, this one included (every replica, every open live stream within SESSION_STREAM_RECHECK_MS)",
    tags: ['auth'],
    auth: 'user',
    responses: { 200: { description: 'signed out', schema: A.SessionsEnded }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/admin/users/{user_id}/sign-out',
    operationId: 'admin_sign_out_user',
    summary: "System administrators: end every session of a user",
    tags: ['auth', 'admin'],
    auth: 'system-admin',
    params: A.UserIdParams,
    responses: { 200: { description: 'signed out', schema: A.SessionsEnded }, 400: err('ill-formed id'), ...authErrors, 404: err('no such user') },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/admin/customers/{id}',
    operationId: 'admin_delete_customer',
    summary:
      'System administrators: delete a customer and all its data (offboarding). At once: its tokens revoked, its members removed, its reports dropped; OFFBOARD_GRACE_S later a job removes its rows, keys, artifacts and dead letters from every store. Again while deleting: 202 again; once gone: 404',
    tags: ['customers', 'admin'],
    auth: 'system-admin',
    params: IdParams,
    responses: { 202: { description: 'marked for deletion', schema: A.CustomerDeletion }, 400: err('ill-formed id'), ...authErrors, 404: err('no such customer (deleted already)') },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/password',
    operationId: 'auth_change_password',
    summary: "Change the logged-in user's password (the current one required); every other session of the user ends",
    tags: ['auth'],
    auth: 'user',
    body: A.ChangePasswordBody,
    responses: {
      200: { description: 'changed', schema: A.SessionsEnded },
      400: err('the new password breaks a password rule'),
      ...authErrors,
      403: err('the current password is wrong'),
      429: err('too many wrong current passwords (LOGIN_MAX_FAILURES_PER_ACCOUNT within LOGIN_WINDOW_S); see Retry-After'),
    },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/password-reset',
    operationId: 'auth_password_reset',
    summary: 'Ask for a password-reset link by e-mail (the answer is the same whether or not the address has an account)',
    tags: ['auth'],
    auth: 'none',
    body: A.PasswordResetBody,
    responses: { 202: { description: 'if the address has an account, a link is on its way', schema: A.PasswordResetRequested }, 400: err('no address') },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/auth/password-reset/confirm',
    operationId: 'auth_password_reset_confirm',
    summary: 'Choose a new password with the token of a reset link (single use); every session of the user ends',
    tags: ['auth'],
    auth: 'none',
    body: A.PasswordResetConfirmBody,
    responses: { 200: { description: 'password set; log in with it', schema: A.SessionsEnded }, 400: err('invalid, used or expired link, or a password the rules refuse') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/tokens',
    operationId: 'list_tokens',
    summary: "The active customer's API tokens (never their values)",
    tags: ['tokens'],
    auth: 'admin',
    responses: { 200: { description: 'tokens', schema: A.ApiTokenList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/tokens',
    operationId: 'create_token',
    summary: 'Create an API token with the chosen scopes, optionally bound to a machine (or pattern) and expiring; the answer is the only time it is shown',
    tags: ['tokens'],
    auth: 'admin',
    body: A.CreateTokenBody,
    responses: { 201: { description: 'created', schema: A.CreatedToken }, 400: err('bad name, scopes, machine binding (or one with the read scope) or expiry (not in the future)'), ...authErrors },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/tokens/{id}',
    operationId: 'revoke_token',
    summary: 'Revoke an API token: refused by every gateway within CACHE_REFRESH_MS, by the read API at once (other api replicas: when the change notice arrives, milliseconds)',
    tags: ['tokens'],
    auth: 'admin',
    params: IdParams,
    responses: { 200: { description: 'revoked (again: unchanged)', schema: A.ApiToken }, 400: err('ill-formed id'), ...authErrors, 404: err('no such token') },
  }),
  // Licences, onboarding, support (issue 8).
  route({
    service: 'api',
    method: 'GET',
    path: '/api/dashboard/license-status',
    operationId: 'license_status',
    summary: "The active customer's licence: device limit and count, limit status, grace period",
    tags: ['licences'],
    auth: 'viewer',
    responses: { 200: { description: 'licence status', schema: A.LicenceStatus }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/customers/{id}/license-key',
    operationId: 'license_key',
    summary: "A customer's licence key with device count, limit, limit status, grace period and flagged machines (the active customer; any for a system administrator)",
    tags: ['licences'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'licence', schema: A.LicenceKey }, 400: err('ill-formed id'), ...authErrors, 404: err('no such customer') },
  }),
  route({
    service: 'api',
    method: 'PUT',
    path: '/api/customers/{id}/license',
    operationId: 'set_license',
    summary: "Change a customer's licence (tier, device limit, grace days); effective on every gateway within CACHE_REFRESH_MS",
    tags: ['licences'],
    auth: 'system-admin',
    params: IdParams,
    body: A.SetLicenceBody,
    responses: { 200: { description: 'the licence after the change', schema: A.LicenceKey }, 400: err('bad id or body'), ...authErrors, 404: err('no such customer') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/onboarding/status',
    operationId: 'onboarding_status',
    summary: 'Set-up progress of the active customer: ordered steps with done and done_at',
    tags: ['onboarding'],
    auth: 'viewer',
    responses: { 200: { description: 'progress', schema: A.OnboardingStatus }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/quotas',
    operationId: 'list_quotas',
    summary: "The active customer's quotas (artifact bytes, artifact size, live streams, webhooks, whitelist rules, ingest rates): each value, whether it is the default or an override, and what is used",
    tags: ['quotas'],
    auth: 'viewer',
    responses: { 200: { description: 'quotas and usage', schema: QuotaList }, ...authErrors, 503: err('the reservations of uploads in progress (Redis) could not be read; retry') },
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/support-info',
    operationId: 'support_info',
    summary: "Support contacts for the active customer's licence tier",
    tags: ['support'],
    auth: 'viewer',
    responses: { 200: { description: 'contacts', schema: A.SupportInfo }, ...authErrors },
  }),
  route({
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
  }),
  route({
    service: 'api',
    method: 'GET',
    path: '/api/instances/{id}/commands/available',
    operationId: 'list_available_commands',
    summary: "The commands the instance's latest status snapshot advertises (modules.<module>.commands)",
    tags: ['commands'],
    auth: 'viewer',
    params: IdParams,
    responses: { 200: { description: 'advertised commands', schema: AvailableCommandList }, 400: err('ill-formed id'), ...authErrors, 404: err('no such instance') },
  }),
  route({
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
      409: err('too many open commands for this instance, or the instance is retired'),
      413: err('args over COMMAND_ARGS_MAX_BYTES'),
      422: err('the latest snapshot does not advertise this command, or the args do not match its params'),
    },
  }),
  route({
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
  }),
  route({
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
  }),
  // Decommissioning (issue 25): POST, not DELETE: the row and its history stay (GET still answers
  // the id, `retired_at` set); only its place in the fleet ends. Repeating it is harmless.
  route({
    service: 'api',
    method: 'POST',
    path: '/api/machines/{id}/retire',
    operationId: 'retire_machine',
    summary: 'Retire a machine and all its instances: they leave the fleet, the counts and the licence, and never turn red again',
    tags: ['decommissioning'],
    auth: 'admin',
    params: IdParams,
    responses: { 200: { description: 'retired (or retired before)', schema: Retirement }, 400: err('ill-formed id'), ...authErrors, 404: err('no such machine') },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/instances/{id}/retire',
    operationId: 'retire_instance',
    summary: 'Retire one instance: it leaves the fleet and the counts, and never turns red again; its machine stays',
    tags: ['decommissioning'],
    auth: 'admin',
    params: IdParams,
    responses: { 200: { description: 'retired (or retired before)', schema: Retirement }, 400: err('ill-formed id'), ...authErrors, 404: err('no such instance') },
  }),
  // Timeout rules (api/handlers/timeout-rules.ts, lib/store/timeout-rules.ts).
  route({
    service: 'api',
    method: 'GET',
    path: '/api/timeout-rules',
    operationId: 'list_timeout_rules',
    summary: "The customer's timeout rules (timeout before red, late share), and the defaults where none applies",
    tags: ['traffic light'],
    auth: 'viewer',
    responses: { 200: { description: 'the rules', schema: TimeoutRuleList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/timeout-rules',
    operationId: 'create_timeout_rule',
    summary: 'Add a timeout rule for the customer, a software pattern or one instance; the instances it applies to take it at once',
    tags: ['traffic light'],
    auth: 'admin',
    body: TimeoutRuleInput,
    responses: {
      201: { description: 'created', schema: TimeoutRuleChanged },
      400: err('bad body: scope and target do not fit, neither timeout_s nor late_percent, or a timeout below TIMEOUT_RULE_MIN_S'),
      ...authErrors,
      404: err('no such instance'),
      409: err('a rule for this target exists already (change it with PUT), or the customer has as many rules as its quota timeout_rules allows (TIMEOUT_RULES_PER_CUSTOMER, 1000 by default)'),
      429: err("another change of this customer's timeout rules is being applied on this api replica; see Retry-After"),
    },
  }),
  route({
    service: 'api',
    method: 'PUT',
    path: '/api/timeout-rules/{id}',
    operationId: 'update_timeout_rule',
    summary: "Change a timeout rule's timeout, late share or description",
    tags: ['traffic light'],
    auth: 'admin',
    params: IdParams,
    body: TimeoutRuleUpdate,
    responses: {
      200: { description: 'changed', schema: TimeoutRuleChanged },
      400: err('bad body, a timeout below TIMEOUT_RULE_MIN_S, or both values cleared'),
      ...authErrors,
      404: err('no such rule'),
      429: err("another change of this customer's timeout rules is being applied on this api replica; see Retry-After"),
    },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/timeout-rules/{id}',
    operationId: 'delete_timeout_rule',
    summary: 'Remove a timeout rule; its instances fall back to the next rule or the defaults',
    tags: ['traffic light'],
    auth: 'admin',
    params: IdParams,
    responses: {
      204: { description: 'deleted' },
      400: err('ill-formed id'),
      ...authErrors,
      404: err('no such rule'),
      429: err("another change of this customer's timeout rules is being applied on this api replica; see Retry-After"),
    },
  }),
  // Maintenance windows (issue 25; api/handlers/maintenance.ts, lib/store/maintenance.ts).
  route({
    service: 'api',
    method: 'GET',
    path: '/api/maintenance-windows',
    operationId: 'list_maintenance_windows',
    summary: "The customer's maintenance windows, each with its occurrence in progress or its next one",
    tags: ['maintenance'],
    auth: 'viewer',
    responses: { 200: { description: 'windows, oldest first', schema: MaintenanceWindowList }, ...authErrors },
  }),
  route({
    service: 'api',
    method: 'POST',
    path: '/api/maintenance-windows',
    operationId: 'create_maintenance_window',
    summary: 'Define a maintenance window: one-off or recurring (in a time zone), for the customer, a machine, a software pattern or an instance',
    tags: ['maintenance'],
    auth: 'admin',
    body: MaintenanceWindowBody,
    responses: {
      201: { description: 'created', schema: MaintenanceWindow },
      400: err('bad body: the scope without its id or pattern (or with another), neither or both of starts_at/ends_at and recurrence, an unknown time zone, a duration over its bound, an end not after the start or already past'),
      ...authErrors,
      404: err('no such machine or instance'),
      409: err('the customer has as many windows as its quota maintenance_windows allows (MAINTENANCE_WINDOWS_PER_CUSTOMER, 100 by default)'),
    },
  }),
  route({
    service: 'api',
    method: 'DELETE',
    path: '/api/maintenance-windows/{id}',
    operationId: 'delete_maintenance_window',
    summary: 'Remove a maintenance window and its occurrences (one in progress ends now)',
    tags: ['maintenance'],
    auth: 'admin',
    params: IdParams,
    responses: { 204: { description: 'deleted' }, 400: err('ill-formed id'), ...authErrors, 404: err('no such maintenance window') },
  }),
  ...dashboardRoutes(),
  ...ops('api'),
] as const;

/**
 * The dashboard (issue 9): a single-page app served by the api itself. Every page path answers the
 * same HTML shell (no data in it: the page reads the API with the session cookie), so a deep link
 * or a reload works; the scripts and styles come from /assets. The JSON API stays under /api and /auth.
 */
function dashboardRoutes() {
  const page = (path: string, operationId: string, summary: string, params?: TSchema): RouteSpec => ({
    service: 'api',
    method: 'GET',
    path,
    operationId,
    summary,
    tags: ['dashboard'],
    auth: 'none',
    ...(params ? { params } : {}),
    responses: { 200: { description: 'the dashboard page (HTML)', contentType: 'text/html' }, 503: err('the dashboard is not built') },
  });
  return [
    page('/', 'dashboard_fleet', 'Dashboard: the fleet (every instance with its traffic light)'),
    page('/login', 'dashboard_login', 'Dashboard: log in'),
    page('/instances/{id}', 'dashboard_instance', 'Dashboard: one instance (status, diagnostics, colour history, metrics, artifacts, commands)', DashboardInstanceParams),
    page('/settings', 'dashboard_settings', 'Dashboard: settings (API tokens, whitelist, webhooks, licence, onboarding, support)'),
    page('/dead-letters', 'dashboard_dead_letters', 'Dashboard: dead letters (system administrators)'),
    page('/invitation', 'dashboard_invitation', 'Dashboard: accept an invitation (the token in the fragment #token=…)'),
    page('/password', 'dashboard_password', 'Dashboard: change the password'),
    page('/reset-password', 'dashboard_reset_password', 'Dashboard: ask for a password-reset link, or choose a new password with one (#token=…)'),
    page('/maintenance', 'dashboard_maintenance', 'Dashboard: maintenance windows (list, add one-off or recurring, delete)'),
    route({
      service: 'api',
      method: 'GET',
      path: '/assets/{file}',
      operationId: 'dashboard_asset',
      summary: "The dashboard's scripts, styles and images",
      tags: ['dashboard'],
      auth: 'none',
      params: DashboardAssetParams,
      responses: { 200: { description: 'the file', contentType: 'application/octet-stream' }, 404: err('no such file') },
    }),
  ];
}

function helpRoute<const O extends string>(path: string, operationId: O) {
  return route({
    service: 'api',
    method: 'GET',
    path,
    operationId,
    summary: path.startsWith('/api')
      ? "Help text for a diagnostic code of this instance's software, in DE or EN"
      : 'Help text for a diagnostic code (spec 4.2 path; the same as /api/instances/{id}/help)',
    tags: ['help'],
    auth: 'viewer',
    params: IdParams,
    query: HelpQuery,
    responses: {
      200: { description: 'the text', schema: HelpText },
      400: err('ill-formed id, missing or bad code or lang'),
      ...authErrors,
      404: { description: 'no such instance, or no text for this code in this language (`available` lists the languages there are)', schema: HelpMissing },
    },
  });
}

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

/**
 * The methods `service` serves on a path (empty: no such path), for 404 versus 405 and the `Allow`
 * header of a 405; the gateway and the api both answer with it.
 */
export function allowedMethods(service: Service): (path: string) => string[] {
  const patterns = routesOf(service).map((r) => ({ re: pathRegex(r.path), method: r.method }));
  return (path) => [...new Set(patterns.filter((p) => p.re.test(path)).map((p) => p.method))];
}

export function checkHandlers(service: Service, handlers: Record<string, unknown>): void {
  const wanted = new Set(routesOf(service).map((r) => r.operationId));
  const missing = [...wanted].filter((id) => !(id in handlers));
  const extra = Object.keys(handlers).filter((id) => !wanted.has(id));
  if (missing.length || extra.length) {
    throw new Error(`${service} handlers do not match lib/contract/routes.ts: missing [${missing.join(', ')}], not in the table [${extra.join(', ')}]`);
  }
}
