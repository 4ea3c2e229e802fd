// The OpenAPI 3.1 description of both HTTP processes, generated from the route table
// (lib/contract/routes.ts) and its TypeBox schemas: the same schemas that validate requests describe them.
// Served by the api at GET /openapi.json and rendered at /docs.
//
// Two processes answer on two addresses: every operation carries `servers` naming the process that
// serves it (gateway: ingest; api: everything else), and `x-service` says the same in one word. A
// path + method both processes serve (/healthz, /readyz, /metrics) is one operation listing both.
// Every schema with a TypeBox `$id` becomes a named component (`#/components/schemas/<id>`); `$id`
// itself is dropped (in 3.1 it would change the base URI of the `$ref`s inside it).
import type { TSchema } from '@sinclair/typebox';
import { routes as allRoutes, type RouteSpec, type Auth, type Service } from './routes.js';

export interface OpenApiOptions {
  /** Public base URL of the gateway (ingest), e.g. https://ingest.example.com */
  gatewayUrl: string;
  /** Public base URL of the api (read API, dashboard); `/` for "the origin serving this document". */
  apiUrl: string;
  version: string;
  routes?: RouteSpec[];
}

const TAGS: Record<string, string> = {
  ingest: 'Agents report heartbeats, diagnostics, status snapshots and help texts (gateway). Bearer API token with the ingest scope.',
  auth: 'Dashboard login and sessions',
  instances: 'Instances (a software on a machine) and their traffic light',
  diagnostics: 'Stored diagnostics',
  status: 'Status reports and their full snapshot trees',
  help: 'Diagnostic help texts (DE and EN)',
  whitelist: 'Rules that mark diagnostics as harmless (suppressed)',
  rejections: 'The ingest rejection log',
  admin: 'System administrators only',
  'dead letters': 'Reports the workers could not store: list, inspect, replay (system administrators)',
  notifications: 'E-mail notifications of traffic-light changes: subscriptions and the unsubscribe link',
  customers: 'Customers as a whole: offboarding (system administrators)',
  docs: 'This description',
  operations: 'Liveness, readiness and metrics of each process',
  decommissioning: 'Retiring machines and instances: they leave the fleet, the counts and the licence; their history stays',
};

const AUTH_TEXT: Record<Auth, string> = {
  none: 'No authentication.',
  'ingest-token': 'API token with the `ingest` scope, for the customer in the path.',
  user: 'Any logged-in dashboard user (session JWT or cookie).',
  viewer: 'At least the viewer role in the active customer (session), or an API token with the `read` scope.',
  admin: 'At least the admin role in the active customer.',
  owner: 'The owner role in the active customer.',
  'system-admin': 'A system administrator (`is_system_admin`).',
};

type Json = Record<string, unknown>;

class Components {
  readonly schemas: Record<string, Json> = {};
  private byId = new Map<string, string>();

  /** A JSON copy of `s` with every `$id`-named subschema replaced by a `$ref`. */
  convert(s: unknown): unknown {
    if (Array.isArray(s)) return s.map((x) => this.convert(x));
    if (s === null || typeof s !== 'object') return s;
    const o = s as Json;
    if (typeof o.$id === 'string') return { $ref: `#/components/schemas/${this.register(o)}` };
    return this.plain(o);
  }

  private plain(o: Json): Json {
    const out: Json = {};
    for (const [k, v] of Object.entries(o)) {
      if (k === '$id') continue;
      out[k] = this.convert(v);
    }
    return out;
  }

  private register(o: Json): string {
    const id = String(o.$id).replace(/[^A-Za-z0-9._-]/g, '_');
    const body = this.plain(o);
    const text = JSON.stringify(body);
    const known = this.byId.get(text);
    if (known) return known;
    let name = id;
    for (let i = 2; this.schemas[name] !== undefined; i++) name = `${id}_${i}`;
    this.schemas[name] = body;
    this.byId.set(text, name);
    return name;
  }
}

function parameters(c: Components, where: 'path' | 'query', schema: TSchema | undefined): Json[] {
  if (!schema) return [];
  const props = (schema.properties ?? {}) as Record<string, TSchema>;
  const required = new Set<string>((schema.required as string[] | undefined) ?? []);
  return Object.entries(props).map(([name, p]) => {
    const param: Json = { name, in: where, required: where === 'path' || required.has(name), schema: c.convert(p) };
    if (typeof p.description === 'string') param.description = p.description;
    return param;
  });
}

function security(auth: Auth): Json[] {
  if (auth === 'none') return [];
  if (auth === 'ingest-token') return [{ ingestToken: [] }];
  return [{ bearer: [] }, { sessionCookie: [] }];
}

function operation(c: Components, group: RouteSpec[], servers: Record<Service, Json>): Json {
  const r = group[0]!;
  const both = group.length > 1;
  const op: Json = {
    operationId: both ? r.operationId.replace(new RegExp(`^${r.service}_`), '') : r.operationId,
    summary: both ? group.map((g) => `${g.service}: ${g.summary}`).join('; ') : r.summary,
    description: `${AUTH_TEXT[r.auth]} Served by the ${group.map((g) => g.service).join(' and the ')}.`,
    tags: r.tags,
    'x-service': both ? group.map((g) => g.service) : r.service,
    'x-auth': r.auth,
    servers: group.map((g) => servers[g.service]),
    security: security(r.auth),
  };
  const params = [...parameters(c, 'path', r.params), ...parameters(c, 'query', r.query)];
  if (params.length) op.parameters = params;
  if (r.body) {
    const required = Array.isArray(r.body.required) && r.body.required.length > 0;
    op.requestBody = { required, content: { [r.bodyContentType ?? 'application/json']: { schema: c.convert(r.body) } } };
  } else if (r.bodyContentType) {
    op.requestBody = { required: true, content: { [r.bodyContentType]: { schema: { type: 'string', contentMediaType: r.bodyContentType } } } };
  }
  const responses: Json = {};
  for (const [code, resp] of Object.entries(r.responses)) {
    const out: Json = { description: resp.description };
    if (resp.schema) out.content = { [resp.contentType ?? 'application/json']: { schema: c.convert(resp.schema) } };
    else if (resp.contentType) out.content = { [resp.contentType]: { schema: { type: 'string' } } };
    responses[code] = out;
  }
  op.responses = responses;
  return op;
}

export function openApiDocument(o: OpenApiOptions): Json {
  const table = o.routes ?? allRoutes;
  const c = new Components();
  const servers: Record<Service, Json> = {
    api: { url: o.apiUrl, description: 'api: read API, dashboard sessions, this document' },
    gateway: { url: o.gatewayUrl, description: 'gateway: ingest' },
  };
  // path -> method -> routes (one per service serving it)
  const grouped = new Map<string, Map<string, RouteSpec[]>>();
  for (const r of table) {
    const byMethod = grouped.get(r.path) ?? new Map<string, RouteSpec[]>();
    grouped.set(r.path, byMethod);
    const list = byMethod.get(r.method) ?? [];
    list.push(r);
    byMethod.set(r.method, list);
  }
  const paths: Json = {};
  for (const [path, byMethod] of [...grouped].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const item: Json = {};
    for (const [method, group] of byMethod) item[method.toLowerCase()] = operation(c, group, servers);
    paths[path] = item;
  }
  const tagNames = [...new Set(table.flatMap((r) => r.tags))];
  return {
    openapi: '3.1.0',
    info: {
      title: 'fleet-ingest',
      version: o.version,
      description:
        'Fleet-monitoring ingest service. Two processes: the **gateway** serves the ingest paths (`/api/ingest/…`), ' +
        'the **api** everything else (both serve `/healthz`, `/readyz`, `/metrics`). Each operation lists its server. ' +
        'Every error body is `{"detail": "<string>"}`; a schema violation adds `errors: [{path, message}]`. ' +
        'Unknown path: 404; known path with another method: 405.',
    },
    servers: [servers.api, servers.gateway],
    tags: tagNames.map((name) => (TAGS[name] ? { name, description: TAGS[name] } : { name })),
    paths,
    components: {
      schemas: c.schemas,
      securitySchemes: {
        ingestToken: { type: 'http', scheme: 'bearer', description: 'API token (`fk_…`) with the ingest scope' },
        bearer: { type: 'http', scheme: 'bearer', description: 'dashboard session JWT (from POST /auth/login), or an API token with the read scope' },
        sessionCookie: { type: 'apiKey', in: 'cookie', name: 'fleet_session', description: 'the session cookie set by POST /auth/login' },
      },
    },
  };
}
