// The OpenAPI 3.1 document (GET /openapi.json on the api) is valid, documents every route of both
// processes, and every documented route exists: each documented path and method is probed on the
// process that serves it (never 404 "no such endpoint" nor 405), and every other method on those
// paths, and paths nobody documents, answer 404 or 405. Everything derives from lib/contract/routes.ts and
// the document, so routes added later are covered without touching this file. HEAD and OPTIONS
// are left out: HTTP lets a server answer HEAD wherever it answers GET.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Validator } from '@seriousme/openapi-schema-validator';
import { testStack, get } from '../helpers/stack.js';
import { routes } from '../../lib/contract/routes.js';
import { DOCS_FILES } from '../../lib/contract/schemas/docs.js';

const s = await testStack(t, 'openapi', { worker: false });
const base: Record<string, string> = { api: s.apiUrl, gateway: s.gatewayUrl };
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'];

const res = await get(`${s.apiUrl}/openapi.json`, null);
const doc = res.body;

interface Op {
  'x-service': string | string[];
  servers: { url: string }[];
  parameters?: { name: string; in: string; schema: Record<string, unknown> }[];
  requestBody?: { content: Record<string, unknown> };
}

function ops(): { path: string; method: string; service: string; op: Op }[] {
  const out = [];
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Op>>)) {
    for (const [method, op] of Object.entries(item)) {
      const services = Array.isArray(op['x-service']) ? op['x-service'] : [op['x-service']];
      for (const service of services) out.push({ path, method: method.toUpperCase(), service, op });
    }
  }
  return out;
}

/** A value a path parameter's schema accepts, so the probe reaches the route, not a 400 for the form. */
function sample(schema: Record<string, unknown>): string {
  if (Array.isArray(schema.examples) && schema.examples.length) return String(schema.examples[0]);
  if (schema.format === 'uuid') return randomUUID();
  if (schema.type === 'integer' || schema.type === 'number') return String(schema.minimum ?? 0);
  if (Array.isArray(schema.anyOf)) return sample(schema.anyOf[0] as Record<string, unknown>);
  if (schema.const !== undefined) return String(schema.const);
  return 'probe';
}

function concrete(path: string, op?: Op): string {
  return path.replace(/\{(\w+)\}/g, (_m, name: string) => {
    const p = op?.parameters?.find((x) => x.in === 'path' && x.name === name);
    return encodeURIComponent(p ? sample(p.schema) : 'probe');
  });
}

async function probe(service: string, method: string, path: string, op?: Op) {
  const ct = op?.requestBody ? Object.keys(op.requestBody.content)[0]! : 'application/json';
  const hasBody = method === 'POST' || method === 'PUT' || method === 'PATCH';
  const r = await fetch(`${base[service]}${path}`, {
    method,
    headers: hasBody ? { 'Content-Type': ct } : {},
    body: hasBody ? (ct === 'application/json' ? '{}' : 'x') : undefined,
  });
  const text = await r.text();
  let detail = '';
  try {
    detail = JSON.parse(text).detail ?? '';
  } catch {
    /* not JSON: a page or a file */
  }
  return { status: r.status, detail };
}

const unknownEndpoint = (r: { status: number; detail: string }) => r.status === 405 || (r.status === 404 && /^no such endpoint/.test(r.detail));

t.test('GET /openapi.json is a valid OpenAPI 3.1 document', async (t) => {
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /application\/json/);
  t.equal(doc.openapi, '3.1.0');
  const v = new Validator();
  const result = await v.validate(structuredClone(doc));
  t.ok(result.valid, `valid: ${JSON.stringify(result.errors ?? '').slice(0, 2000)}`);
  // The validator is not a rubber stamp: a broken copy fails.
  const broken = structuredClone(doc);
  delete broken.info;
  broken.paths['/api/instances'].get.responses = 'none';
  t.notOk((await new Validator().validate(broken)).valid, 'a broken document is refused');
  t.ok(doc.tags.length > 0 && doc.paths['/api/instances'].get.tags.includes('instances'), 'tags');
  t.ok(doc.paths['/api/instances'].get.responses['200'].content['application/json'].schema.$ref, 'response models');
  t.same(doc.servers.map((x: { url: string }) => x.url).length, 2, 'servers: api and gateway');
});

t.test('the document and lib/contract/routes.ts list the same routes, each on its process', async (t) => {
  const documented = ops().map((o) => `${o.service} ${o.method} ${o.path}`).sort();
  const table = routes.map((r) => `${r.service} ${r.method} ${r.path}`).sort();
  t.same(documented, table);
  for (const o of ops()) {
    const gw = o.service === 'gateway';
    t.ok(o.op.servers.some((x) => (gw ? x.url !== doc.servers[0].url : x.url === doc.servers[0].url)), `${o.method} ${o.path}: server of the ${o.service}`);
  }
});

t.test('every documented route exists on its process', async (t) => {
  for (const o of ops()) {
    const r = await probe(o.service, o.method, concrete(o.path, o.op), o.op);
    t.notOk(unknownEndpoint(r), `${o.service} ${o.method} ${o.path} -> ${r.status} ${r.detail}`);
  }
});

t.test('undocumented methods and paths answer 404 or 405', async (t) => {
  const byPath = new Map<string, Map<string, Set<string>>>(); // service -> path -> methods
  for (const o of ops()) {
    const m = byPath.get(o.service) ?? new Map<string, Set<string>>();
    byPath.set(o.service, m);
    const set = m.get(o.path) ?? new Set<string>();
    set.add(o.method);
    m.set(o.path, set);
  }
  for (const [service, paths] of byPath) {
    for (const [path, methods] of paths) {
      const op = ops().find((o) => o.path === path && o.service === service)!.op;
      for (const method of METHODS.filter((x) => !methods.has(x))) {
        const r = await probe(service, method, concrete(path, op));
        t.ok(unknownEndpoint(r), `${service} ${method} ${path} -> ${r.status} ${r.detail}`);
      }
    }
  }
  for (const service of ['api', 'gateway']) {
    for (const path of ['/nope', '/api/nope', '/api/instances/x/y/z', '/api/ingest/a/b/c/teleport', '/openapi.yaml', '/docs/a/b']) {
      const r = await probe(service, 'GET', path);
      t.ok(r.status === 404 && /^no such endpoint/.test(r.detail), `${service} GET ${path} -> ${r.status} ${r.detail}`);
    }
  }
});

t.test('/docs renders the document with files served locally', async (t) => {
  const page = await fetch(`${s.apiUrl}/docs`);
  t.equal(page.status, 200);
  t.match(page.headers.get('content-type'), /text\/html/);
  const html = await page.text();
  t.match(html, /swagger-ui-bundle\.js/);
  t.notMatch(html, /https?:\/\//, 'nothing from another host (no CDN)');
  for (const f of DOCS_FILES) {
    const r = await fetch(`${s.apiUrl}/docs/${f}`);
    t.equal(r.status, 200, f);
    t.ok((await r.arrayBuffer()).byteLength > 0, `${f} not empty`);
    if (f.endsWith('.js')) t.match(r.headers.get('content-type'), /javascript/);
  }
  const init = await (await fetch(`${s.apiUrl}/docs/init.js`)).text();
  t.match(init, /\/openapi\.json/);
  t.equal((await fetch(`${s.apiUrl}/docs/index.html`)).status, 404, 'only the listed files');
  t.not((await fetch(`${s.apiUrl}/docs/..%2Fpackage.json`)).status, 200, 'no way out of the list');
});
