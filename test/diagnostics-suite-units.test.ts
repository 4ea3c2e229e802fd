// Pure pieces of the diagnostics suite: the `*`/`?` matcher and rule order, typed snapshot leaves
// (check and resolve), instance ordering, the OpenAPI generator's shape.
import t from 'tap';
import { compilePattern, compileRule, matchRule, ruleOrder, type RuleRow } from '../lib/whitelist.js';
import { checkSnapshot, resolveSnapshot, formatBytes, formatDuration } from '../lib/snapshot.js';
import { instanceOrderBy, groupInstances } from '../api/instance-order.js';
import { openApiDocument } from '../lib/openapi.js';
import { routes } from '../lib/routes.js';
import { helpRows } from '../workers/help-texts.js';
import type { Report } from '../lib/messages.js';

t.test('wildcard patterns: * and ? only, whole value, everything else literal', async (t) => {
  const cases: [string, string, boolean][] = [
    ['web-1', 'web-1', true],
    ['web-1', 'web-10', false],
    ['web-*', 'web-', true],
    ['web-*', 'web-42', true],
    ['web-*', 'xweb-42', false],
    ['*-db', 'main-db', true],
    ['*-db', 'main-db2', false],
    ['*disk*', 'a disk b', true],
    ['line-?-pc', 'line-1-pc', true],
    ['line-?-pc', 'line-12-pc', false],
    ['line-?-pc*', 'line-3-pc-9', true],
    ['a*b*c', 'aXXbYYc', true],
    ['a*b*c', 'aXXbYY', false],
    ['*', '', true],
    ['?', '', false],
    ['??', 'é€', true],
    ['?', '😀', true],
    ['a.c', 'abc', false],
    ['a.c', 'a.c', true],
    ['(a|b)+', 'a', false],
    ['[ab]', 'a', false],
    ['[ab]', '[ab]', true],
    ['a\\*', 'a\\xyz', true],
  ];
  for (const [p, v, want] of cases) t.equal(compilePattern(p)(v), want, `${p} ~ ${v}`);
  t.equal(compilePattern('*DISK*full', true)('the disk is full'), true, 'folded case');
  // A pattern that would backtrack exponentially as a regex stays fast here.
  const evil = compilePattern('*a*a*a*a*a*a*a*a*a*a*b');
  const started = Date.now();
  t.equal(evil('a'.repeat(8192)), false);
  t.ok(Date.now() - started < 1000, `no catastrophic backtracking (${Date.now() - started} ms)`);
});

t.test('rules: code ranges, optional patterns, oldest rule wins', async (t) => {
  const row = (id: string, at: number, o: Partial<RuleRow>): RuleRow => ({
    id,
    customer_id: 'c',
    machine_pattern: null,
    software_pattern: null,
    code_from: 0,
    code_to: 0,
    message_pattern: null,
    enabled: true,
    created_at: new Date(at),
    ...o,
  });
  const rules = [
    row('b', 2, { code_from: 100, code_to: 199 }),
    row('a', 1, { code_from: 150, code_to: 150, software_pattern: 'scan*' }),
    row('c', 3, { code_from: 500, code_to: 500, machine_pattern: 'pc-?', message_pattern: '*timeout*' }),
  ]
    .map(compileRule)
    .sort(ruleOrder);
  t.equal(matchRule(rules, 'm', 'scanner', 150, ''), 'a', 'the older of two matching rules');
  t.equal(matchRule(rules, 'm', 'agent', 150, ''), 'b');
  t.equal(matchRule(rules, 'm', 'agent', 199, ''), 'b', 'range end inclusive');
  t.equal(matchRule(rules, 'm', 'agent', 200, ''), null);
  t.equal(matchRule(rules, 'pc-1', 'agent', 500, 'Read TIMEOUT on eth0'), 'c');
  t.equal(matchRule(rules, 'pc-10', 'agent', 500, 'timeout'), null);
  t.equal(matchRule(rules, 'pc-1', 'agent', 500, 'ok'), null);
});

t.test('typed snapshot leaves: known types checked, unknown and untyped left alone', async (t) => {
  const good = {
    cpu: { value: 42.5, type: 'percent', label: 'CPU' },
    mem: { value: 1536, type: 'bytes' },
    up: { value: 3725, type: 'duration_s', hint: 'since boot' },
    at: { value: '2026-07-01T10:00:00+02:00', type: 'timestamp' },
    mode: { value: 'active', type: 'enum', options: ['active', 'passive'] },
    n: { value: 3, type: 'integer', unit: 'files' },
    ok: { value: true, type: 'boolean' },
    name: { value: 'x', type: 'string' },
    future: { value: { any: 'thing' }, type: 'gauge-v2', extra: 1 },
    plain: { value: 5 },
    typeOnly: { type: 'disk' },
    nested: [{ t: { value: 1.5, type: 'number', unit: 'V' } }],
    legacy: 'untyped',
  };
  t.same(checkSnapshot(good), []);
  const bad = {
    a: { value: '42', type: 'percent' },
    b: { value: -1, type: 'bytes' },
    c: { value: 1.5, type: 'integer' },
    d: { value: 'yesterday', type: 'timestamp' },
    e: { value: 'x', type: 'enum', options: ['y'] },
    f: { value: 1, type: 'number', unit: 5 },
    'g/h': [{ value: null, type: 'boolean' }],
  };
  t.same(
    checkSnapshot(bad).map((e) => e.path).sort(),
    ['/snapshot/a/value', '/snapshot/b/value', '/snapshot/c/value', '/snapshot/d/value', '/snapshot/e/value', '/snapshot/f/unit', '/snapshot/g~1h/0/value'].sort(),
  );
  const r = resolveSnapshot(good) as Record<string, unknown>;
  t.same(r.cpu, { value: 42.5, type: 'percent', unit: '%', label: 'CPU', hint: null, display: '42.5 %' });
  t.same(r.mem, { value: 1536, type: 'bytes', unit: 'B', label: null, hint: null, display: '1.5 KiB' });
  t.same(r.up, { value: 3725, type: 'duration_s', unit: 's', label: null, hint: 'since boot', display: '1 h 2 min' });
  t.match(r.at, { display: '2026-07-01T08:00:00.000Z' });
  t.match(r.mode, { value: 'active', options: ['active', 'passive'], display: 'active' });
  t.match(r.n, { unit: 'files', display: '3 files' });
  t.same(r.future, good.future, 'unknown type kept as sent');
  t.same(r.plain, { value: 5 }, 'no type: unchanged');
  t.same(r.typeOnly, { type: 'disk' });
  t.match(r.nested, [{ t: { value: 1.5, unit: 'V', display: '1.5 V' } }]);
  t.equal(r.legacy, 'untyped');
  t.same(resolveSnapshot({ a: 1, b: [1, 'x', null], c: { d: false } }), { a: 1, b: [1, 'x', null], c: { d: false } }, 'a pre-5.10 tree is unchanged');
  t.equal(formatBytes(0), '0 B');
  t.equal(formatBytes(5 * 1024 ** 3), '5 GiB');
  t.equal(formatDuration(59.5), '59.5 s');
  t.equal(formatDuration(90061), '1 d 1 h');
});

t.test('instance order: known keys only, descending, group first', async (t) => {
  t.equal(instanceOrderBy(undefined, undefined), 'ORDER BY x.machine ASC NULLS LAST, x.software ASC NULLS LAST, x.machine ASC, x.software ASC, x.id ASC');
  t.match(instanceOrderBy('group,-sort_priority', 'group'), /^ORDER BY min\(x.group_priority\) OVER \(PARTITION BY x.group_name\) ASC NULLS LAST, x.group_name ASC NULLS LAST, x.group_name ASC NULLS LAST, x.sort_priority DESC NULLS LAST/);
  t.notMatch(instanceOrderBy('machine;DROP TABLE x', undefined), /DROP/);
  const groups = groupInstances([{ group: 'a' }, { group: 'a' }, { group: null }], 'group');
  t.same(groups.map((g) => [g.key, g.count]), [['a', 2], [null, 1]]);
});

t.test('help uploads: the newest text per key, later items and newer reports win', async (t) => {
  const rep = (id: string, at: number, items: unknown[]): Report => ({ id, k: 'help', c: 'c', cs: 'cs', m: 'm', s: 'sw', t: 't', at, b: { items } });
  const rows = helpRows([
    rep('r2', 20, [{ code: 1, lang: 'de', text: 'new' }]),
    rep('r1', 10, [{ code: 1, lang: 'de', text: 'old' }, { code: 1, lang: 'en', text: 'a' }, { code: 1, lang: 'en', text: 'b' }]),
  ]);
  t.same(rows.map((r) => [r.code, r.lang, r.text]), [[1, 'de', 'new'], [1, 'en', 'b']]);
});

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
