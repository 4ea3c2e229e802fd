// No endpoint returns another customer's data. Every route of lib/contract/routes.ts (the list is derived
// from the table, so routes added later are walked too) is called with a second customer's
// credentials (its owner's session, its read token, its ingest token on the gateway), with the
// first customer's ids, slugs and ids of every row it owns in any table with a customer_id column
// in the path, the query and the body. No answer may contain anything of the first customer that
// the request did not itself carry, no answer is a 5xx, and the first customer's data is unchanged.
import t from 'tap';
import type { TSchema } from '@sinclair/typebox';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { routes, type RouteSpec } from '../../lib/contract/routes.js';
import { createToken } from '../../lib/store/customers.js';

const s = await testStack(t, 'isolation');
const A = s.customer;
const tag = s.id;
const machineA = `a-secret-m-${tag}`;
const softwareA = `a-secret-sw-${tag}`;

// Customer A with data of every kind, members and tokens.
const ownerA = await s.newUser('owner');
const viewerA = await s.newUser('viewer');
const readA = await createToken(s.pool, A.id, `a-read-${tag}`, ['read']);
const base = `${s.gatewayUrl}/api/ingest/${A.slug}/${machineA}/${softwareA}`;
// (No assertions outside t.test: tap would end the root test, and tear the stack down, early.)
async function must(p: Promise<{ status: number; body: unknown }>, what: string): Promise<void> {
  const r = await p;
  // 202: accepted, help texts missing (diagnostics).
  if (r.status !== 200 && r.status !== 202) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body)}`);
}
await must(post(`${base}/heartbeat`, s.token, { version: `a-secret-version-${tag}` }), 'heartbeat');
await must(post(`${base}/diagnostics`, s.token, { items: [{ code: 4711, severity: 2, message: `a-secret-diag-${tag}` }] }), 'diagnostics');
await must(post(`${base}/status`, s.token, { status: 'degraded', message: `a-secret-status-${tag}`, snapshot: { note: `a-secret-snap-${tag}` } }), 'status');
await eventually(async () => (await get(`${s.apiUrl}/api/instances`, readA.token)).body.items?.length === 1, 10_000, "A's instance");
await eventually(async () => (await s.pool.query(`SELECT 1 FROM conversions WHERE customer_id = $1 AND kind = 'first_device'`, [A.id])).rowCount === 1);

// Customer B: its own data and credentials.
const B = await s.newCustomer('iso-b');
const ownerB = await s.newUser('owner', { customer: B.customer });
const readB = await createToken(s.pool, B.customer.id, 'b-read', ['read']);
await must(post(`${s.gatewayUrl}/api/ingest/${B.customer.slug}/b-machine/b-sw/heartbeat`, B.token, {}), "B's heartbeat");
await eventually(async () => (await get(`${s.apiUrl}/api/instances`, readB.token)).body.items?.length === 1, 10_000, "B's instance");

/** Every uuid `id` of a row of A in any table with a customer_id column (tables added later too). */
async function idsOfA(): Promise<string[]> {
  const tables = await s.pool.query<{ table_name: string }>(
    `SELECT c.table_name FROM information_schema.columns c
       JOIN information_schema.columns i ON i.table_schema = c.table_schema AND i.table_name = c.table_name AND i.column_name = 'id' AND i.data_type = 'uuid'
       JOIN information_schema.tables tb ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name AND tb.table_type = 'BASE TABLE'
      WHERE c.table_schema = current_schema() AND c.column_name = 'customer_id'`,
  );
  const ids: string[] = [A.id];
  for (const { table_name } of tables.rows) {
    const r = await s.pool.query<{ id: string }>(`SELECT id::text FROM "${table_name}" WHERE customer_id = $1 LIMIT 50`, [A.id]);
    ids.push(...r.rows.map((x) => x.id));
  }
  return [...new Set(ids)];
}

const candidates = await idsOfA();
const aOnlyUsers = await s.pool.query<{ id: string; email: string }>(
  `SELECT u.id::text, u.email FROM users u WHERE EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.customer_id = $1)
      AND NOT EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.customer_id <> $1)`,
  [A.id],
);
const tokensA = await s.pool.query<{ prefix: string }>('SELECT prefix FROM api_tokens WHERE customer_id = $1', [A.id]);
const licenceA = await s.pool.query<{ licence_key: string }>('SELECT licence_key FROM licences WHERE customer_id = $1', [A.id]);
const userCandidates = aOnlyUsers.rows.map((u) => u.id);
const markers = [
  ...candidates,
  ...userCandidates,
  ...aOnlyUsers.rows.map((u) => u.email.toLowerCase()),
  ...tokensA.rows.map((x) => x.prefix),
  licenceA.rows[0]!.licence_key,
  A.slug,
  machineA,
  softwareA,
  `a-secret-version-${tag}`,
  `a-secret-diag-${tag}`,
  `a-secret-status-${tag}`,
  `a-secret-snap-${tag}`,
];

/** A sample value for a schema, with A's identifiers wherever an id, slug or reference goes. */
function sample(schema: TSchema | undefined, id: string, name = ''): unknown {
  if (!schema) return undefined;
  const sc = schema as any;
  if (sc.const !== undefined) return sc.const;
  if (sc.enum) return sc.enum[0];
  if (sc.anyOf || sc.oneOf) {
    const opts = (sc.anyOf ?? sc.oneOf).filter((o: any) => o.type !== 'null');
    return sample(opts[0], id, name);
  }
  switch (sc.type) {
    case 'object': {
      const o: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(sc.properties ?? {})) o[k] = sample(v as TSchema, id, k);
      return o;
    }
    case 'array':
      return Array.from({ length: Math.max(1, sc.minItems ?? 1) }, () => sample(sc.items, id, name));
    case 'integer':
    case 'number':
      return sc.minimum ?? 1;
    case 'boolean':
      return false;
    case 'string': {
      if (sc.format === 'uuid') return id;
      if (sc.format === 'date-time') return new Date().toISOString();
      if (/email/i.test(name)) return `probe-${Math.random().toString(36).slice(2)}@example.com`;
      if (/^(customer|slug)$/.test(name)) return A.slug;
      if (name === 'machine') return machineA;
      if (name === 'software') return softwareA;
      if (sc.pattern) return 'probe';
      return 'x'.repeat(Math.max(1, sc.minLength ?? 1));
    }
    default:
      return {};
  }
}

function pathFor(r: RouteSpec, id: string): string {
  return r.path.replace(/\{(\w+)\}/g, (_m, name: string) => {
    if (name === 'customer') return A.slug;
    if (name === 'machine') return machineA;
    if (name === 'software') return softwareA;
    if (name === 'n') return '0';
    return id;
  });
}

function queryFor(r: RouteSpec, id: string): string {
  const props = ((r.query as any)?.properties ?? {}) as Record<string, any>;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(props)) {
    if (/^(machine|software|customer|customer_id|id|instance_id|machine_id|user_id|token_id)$/.test(k) || v.format === 'uuid') {
      q.set(k, String(sample(v, id, k)));
    }
  }
  const str = q.toString();
  return str ? `?${str}` : '';
}

/** How long a route may take to answer before it counts as hanging (generous: the machine may be busy). */
const ANSWER_MS = 30_000;
/** How much of an event stream is read (it never ends by design). */
const STREAM_READ_MS = 2000;

/**
 * The whole answer; of an event stream (`text/event-stream`), what arrives within STREAM_READ_MS
 * of its headers. A route that sends no headers within ANSWER_MS, or another answer that does not
 * end within it, hangs: `hung` says so (status 0 is never an answer).
 */
async function call(method: string, url: string, token: string | null, body: unknown, contentType?: string) {
  const ac = new AbortController();
  let timer = setTimeout(() => ac.abort(), ANSWER_MS);
  const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
  let payload: string | undefined;
  if (body !== undefined) {
    headers['Content-Type'] = contentType ?? 'application/json';
    payload = contentType && !contentType.includes('json') ? 'probe' : JSON.stringify(body);
  }
  let status = 0;
  let text = '';
  let stream = false;
  let hung: string | null = null;
  try {
    const r = await fetch(url, { method, headers, body: payload, signal: ac.signal });
    status = r.status;
    stream = /^text\/event-stream/.test(r.headers.get('content-type') ?? '');
    if (stream) {
      clearTimeout(timer);
      timer = setTimeout(() => ac.abort(), STREAM_READ_MS);
    }
    const reader = r.body?.getReader();
    const dec = new TextDecoder();
    while (reader) {
      const { done, value } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
  } catch (e) {
    if ((e as Error).name !== 'AbortError') throw e;
    if (!stream) hung = status === 0 ? `no answer within ${ANSWER_MS} ms` : `answer ${status} not finished within ${ANSWER_MS} ms`;
  } finally {
    clearTimeout(timer);
  }
  return { status, text, hung };
}

/**
 * What an answer shows of A. The rejection log lists B's own refused requests, paths included: the
 * walk itself sent A's slugs in those paths, so the `path` of each row (and its `detail`, which
 * names the customer of the path) is B's echo, not A's data.
 */
function visibleText(operationId: string, text: string): string {
  if (operationId !== 'list_ingest_rejections') return text;
  try {
    const body = JSON.parse(text) as { items?: { path?: string; detail?: string }[] };
    for (const i of body.items ?? []) {
      delete i.path;
      delete i.detail;
    }
    return JSON.stringify(body);
  } catch {
    return text;
  }
}

async function walk(t: Test, who: string, creds: { api: string; gateway: string }): Promise<void> {
  let calls = 0;
  for (const r of routes as readonly RouteSpec[]) {
    const withParams = /\{\w+\}/.test(r.path.replace(/\{(customer|machine|software|n)\}/g, ''));
    // Every id of A wherever the route takes an id (path, query or body); once otherwise.
    const takesIds = withParams || JSON.stringify([r.query ?? null, r.body ?? null]).includes('"uuid"');
    const ids = takesIds ? [...candidates, ...userCandidates] : [candidates[0]!];
    const url0 = r.service === 'api' ? s.apiUrl : s.gatewayUrl;
    const token = r.service === 'api' ? creds.api : creds.gateway;
    for (const id of ids) {
      for (const q of new Set(['', queryFor(r, id)])) {
        const path = pathFor(r, id) + q;
        const body = r.body ? sample(r.body, id) : r.method === 'POST' || r.method === 'PUT' ? {} : undefined;
        const res = await call(r.method, url0 + path, token, body, r.bodyContentType);
        calls++;
        const sent = `${path} ${JSON.stringify(body ?? '')}`.toLowerCase();
        const seen = visibleText(r.operationId, res.text).toLowerCase();
        const leaked = markers.filter((m) => !sent.includes(m.toLowerCase()) && seen.includes(m.toLowerCase()));
        const label = `${who}: ${r.method} ${path}`;
        if (res.hung) t.fail(`${label} hangs: ${res.hung}`);
        if (leaked.length) t.fail(`${label} -> ${res.status} leaks ${leaked.join(', ')}: ${res.text.slice(0, 300)}`);
        if (res.status >= 500) t.fail(`${label} -> ${res.status}: ${res.text.slice(0, 300)}`);
        if (withParams && r.auth !== 'none' && res.status >= 200 && res.status < 300 && r.method !== 'GET') {
          t.fail(`${label} -> ${res.status}: a change through another customer's id`);
        }
      }
    }
  }
  t.ok(calls >= routes.length, `${who}: ${calls} calls over ${routes.length} routes, nothing of customer A`);
}

type Test = { ok(v: unknown, m: string): unknown; fail(m: string): unknown };

async function stateOfA() {
  const q = async (sql: string) => (await s.pool.query(sql, [A.id])).rows;
  return {
    tokens: await q('SELECT id, revoked_at FROM api_tokens WHERE customer_id = $1 ORDER BY id'),
    members: await q('SELECT user_id, role FROM memberships WHERE customer_id = $1 ORDER BY user_id'),
    licence: await q('SELECT tier, device_limit, grace_days, over_limit_since, updated_at FROM licences WHERE customer_id = $1'),
    conversions: await q('SELECT id, acked_at FROM conversions WHERE customer_id = $1 ORDER BY id'),
    machines: await q('SELECT id, slug FROM machines WHERE customer_id = $1 ORDER BY id'),
    instances: await q('SELECT id, status, status_message FROM instances WHERE customer_id = $1 ORDER BY id'),
    customer: await q('SELECT slug, name FROM customers WHERE id = $1'),
  };
}

t.test("every route, with another customer's credentials, returns nothing of this customer", async (t) => {
  t.ok(candidates.length >= 5, `ids of A to probe with: ${candidates.length}`);
  const before = await stateOfA();
  await walk(t, "B's owner session", { api: ownerB.jwt, gateway: B.token });
  await walk(t, "B's read token", { api: readB.token, gateway: readB.token });
  t.same(await stateOfA(), before, "customer A's data is unchanged");

  // The walk is not blind: A's own credentials do see A's data.
  const own = await get(`${s.apiUrl}/api/instances`, ownerA.jwt);
  t.ok(JSON.stringify(own.body).includes(machineA), 'A sees its own instance');
  t.ok((await get(`${s.apiUrl}/api/members`, ownerA.jwt)).body.items.some((m: any) => m.user_id === viewerA.id), 'and its members');
});
