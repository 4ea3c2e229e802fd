// The OpenAPI generator (lib/contract/openapi.ts): one operation per path and method, servers, components.
import t from 'tap';
import { openApiDocument } from '../../lib/contract/openapi.js';
import { routes } from '../../lib/contract/routes.js';

t.test('OpenAPI: one operation per path and method, servers per process, components by $id', async (t) => {
  const doc = openApiDocument({ gatewayUrl: 'http://gw', apiUrl: '/', version: '1.2.3' }) as any;
  t.equal(doc.openapi, '3.1.0');
  t.equal(doc.info.version, '1.2.3');
  const ops = Object.values(doc.paths).flatMap((item: any) => Object.values(item)) as any[];
  const keys = new Set(routes.map((r) => `${r.method} ${r.path}`));
  t.equal(ops.length, keys.size, 'every distinct route once');
  const hb = doc.paths['/api/ingest/{customer}/{machine}/{software}/heartbeat'].post;
  t.same(hb.servers, [{ url: 'http://gw', description: 'gateway: ingest' }]);
  t.equal(hb.requestBody.required, false, 'an empty heartbeat body is fine');
  t.same(hb.requestBody.content['application/json'].schema, { $ref: '#/components/schemas/Heartbeat' });
  t.same(doc.paths['/healthz'].get.servers.map((s: any) => s.url).sort(), ['/', 'http://gw'], 'served by both');
  t.notMatch(JSON.stringify(doc), /"\$id"/, 'no $id left');
  for (const ref of JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)) t.ok(doc.components.schemas[ref[1]!], `${ref[1]} defined`);
});
