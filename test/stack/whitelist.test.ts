// Diagnostics whitelist: CRUD under /api/whitelist (viewer lists, admin changes; validated `*`/`?`
// patterns and code ranges), matching by wildcards, ranges and software, suppressed rows kept with
// the rule id, hidden from listings unless asked, not colouring the light; a rule change reaches
// every worker replica within 5 s.
import t from 'tap';
import { testStack, post, get, eventually, chRows } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { createToken } from '../../lib/store/customers.js';
import { SUFFIX_CHAIN_MAX } from '../../lib/domain/whitelist.js';

const s = await testStack(t, 'whitelist');
await s.startWorker(); // two worker replicas share the stream
const c = s.customer.slug;
const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');
const api = (path: string) => `${s.apiUrl}${path}`;
const ingest = (m: string, sw: string, kind: string) => `${s.gatewayUrl}/api/ingest/${c}/${m}/${sw}/${kind}`;

const send = (method: string, path: string, token: string, body?: unknown) => request(method, api(path), token, body);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('CRUD: viewer reads, admin writes; validation 400; other customers 404', async (t) => {
  const list0 = await get(api('/api/whitelist'), viewer.jwt);
  t.equal(list0.status, 200);
  t.same(list0.body, { items: [] });
  t.equal((await send('POST', '/api/whitelist', viewer.jwt, { code: 1 })).status, 403, 'viewer may not create');
  const { token: readToken } = await createToken(s.pool, s.customer.id, 'reader', ['read']);
  t.equal((await send('POST', '/api/whitelist', readToken, { code: 1 })).status, 403, 'a read token may not create');
  t.equal((await get(api('/api/whitelist'), readToken)).status, 200, 'a read token may list');

  const created = await send('POST', '/api/whitelist', admin.jwt, { machine: 'web-*', software: 'agent', code: 42, message: 'Timeout after ? s', note: 'known' });
  t.equal(created.status, 201);
  t.match(created.body, { machine: 'web-*', software: 'agent', code_from: 42, code_to: 42, message: 'Timeout after ? s', note: 'known', enabled: true });
  const id = created.body.id;
  t.match((await get(api(`/api/whitelist/${id}`), viewer.jwt)).body, { id, code_from: 42 });

  const bad: [unknown, RegExp][] = [
    [{}, /needs a code/],
    [{ code: 1, code_from: 1, code_to: 2 }, /either code/],
    [{ code_from: 5 }, /both code_from and code_to/],
    [{ code_from: 9, code_to: 3 }, /greater than/],
    [{ code: 1, machine: 'Web[0-9]+' }, /machine/],
    [{ code: 1, software: 'Agent' }, /software/],
    [{ code: 1, software: 'a'.repeat(129) }, /software/],
    [{ code: 1, message: 'tab\there' }, /message/],
    [{ code: 1, message: 'x'.repeat(513) }, /message/],
    [{ code: 1, regex: '.*' }, /regex|additional/],
    [{ code: 'one' }, /code/],
  ];
  for (const [body, detail] of bad) {
    const r = await send('POST', '/api/whitelist', admin.jwt, body);
    t.equal(r.status, 400, JSON.stringify(body));
    t.match(r.body.detail, detail);
  }

  const upd = await send('PUT', `/api/whitelist/${id}`, admin.jwt, { code_from: 40, code_to: 49, enabled: false });
  t.equal(upd.status, 200);
  t.match(upd.body, { id, machine: null, software: null, code_from: 40, code_to: 49, message: null, note: '', enabled: false }, 'PUT replaces the whole rule');
  t.equal((await send('PUT', `/api/whitelist/${id}`, viewer.jwt, { code: 1 })).status, 403);

  const other = await s.newCustomer('rival');
  const otherAdmin = await s.newUser('admin', { customer: other.customer });
  t.equal((await get(api(`/api/whitelist/${id}`), otherAdmin.jwt)).status, 404, "another customer's rule: 404");
  t.equal((await send('PUT', `/api/whitelist/${id}`, otherAdmin.jwt, { code: 1 })).status, 404);
  t.equal((await send('DELETE', `/api/whitelist/${id}`, otherAdmin.jwt)).status, 404);
  t.same((await get(api('/api/whitelist'), otherAdmin.jwt)).body.items, []);
  t.equal((await get(api('/api/whitelist/not-a-uuid'), admin.jwt)).status, 400);

  t.equal((await send('DELETE', `/api/whitelist/${id}`, viewer.jwt)).status, 403);
  t.equal((await send('DELETE', `/api/whitelist/${id}`, admin.jwt)).status, 204);
  t.equal((await send('DELETE', `/api/whitelist/${id}`, admin.jwt)).status, 404, 'gone');
  t.equal((await get(api(`/api/whitelist/${id}`), admin.jwt)).status, 404);
  t.same((await get(api('/api/whitelist'), admin.jwt)).body.items, []);
});

t.test('limits: message patterns that would make matching costly are refused (400 per pattern, 409 per customer)', async (t) => {
  // A customer of its own, so that the other subtests see only their rules.
  const { customer } = await s.newCustomer('limits');
  const adm = await s.newUser('admin', { customer });
  const create = (body: unknown) => send('POST', '/api/whitelist', adm.jwt, body);
  const a = (k: number) => 'a'.repeat(k);
  const runs17 = Array.from({ length: 18 }, (_, i) => `x${i}`).join('?');
  const bad: [string, RegExp][] = [
    ['*d?sk*full*', /between two `\*`, a `\?` may only stand next to a `\*`/],
    [runs17, /at most 16 runs of wildcards .*WILDCARD_GROUPS_MAX.*has 17/],
  ];
  for (const [message, detail] of bad) {
    const r = await create({ code: 1, message });
    t.equal(r.status, 400, `${message} refused`);
    t.match(r.body.detail, detail);
  }
  // The pattern is fine now (its long text is anchored at the end), as are `?` next to `*`.
  for (const message of ['?*' + a(509) + 'b', '*?disk*full?*', runs17.replace(/\?x17$/, '')]) t.equal((await create({ code: 1, message })).status, 201, `${message.slice(0, 40)} accepted`);

  // Floating texts ending in one another: a, aa, …, a^8 is the most a customer may have.
  const chain: string[] = [];
  for (let k = 1; k <= SUFFIX_CHAIN_MAX; k++) {
    const r = await create({ code: 2, message: `*${a(k)}*` });
    t.equal(r.status, 201);
    chain.push(r.body.id);
  }
  const over = await create({ code: 2, message: `*x*${a(9)}*` });
  t.equal(over.status, 409, 'the 9th text of the chain refused');
  t.match(over.body.detail, /would have 9 texts between two `\*` that end in one another \("a{9}", "a{8}", .*at most 8 \(SUFFIX_CHAIN_MAX\)/);
  // A disabled rule is not matched, so it may be stored; enabling it is refused.
  const off = await create({ code: 2, message: `*${a(9)}*`, enabled: false });
  t.equal(off.status, 201, 'disabled: stored');
  const on = await send('PUT', `/api/whitelist/${off.body.id}`, adm.jwt, { code: 2, message: `*${a(9)}*` });
  t.equal(on.status, 409, 'enabling it refused');
  t.match(on.body.detail, /SUFFIX_CHAIN_MAX/);
  // Replacing a text of the chain by a longer one keeps it at 16: allowed.
  t.equal((await send('PUT', `/api/whitelist/${chain[0]}`, adm.jwt, { code: 2, message: `*${a(9)}*` })).status, 200, 'a replaced by a^9, chain still 8');
  const put = await send('PUT', `/api/whitelist/${chain[1]}`, adm.jwt, { code: 2, message: '*d?sk*' });
  t.equal(put.status, 400, 'update: per-pattern limit');
  t.match(put.body.detail, /between two `\*`/);
  const stored = (await get(api('/api/whitelist'), adm.jwt)).body.items as { message: string }[];
  t.equal(stored.length, 3 + SUFFIX_CHAIN_MAX + 1, 'nothing refused was stored');
  t.notOk(stored.some((r) => r.message === '*d?sk*' || r.message === `*x*${a(9)}*`), 'refused patterns are not there');
});

const rules: Record<string, string> = {};

interface Row {
  machine: string;
  software: string;
  code: string;
  message: string;
  suppressed: number;
  rule_id: string;
}

t.test('matching: wildcards, ranges, per software; suppressed rows kept with the rule id', async (t) => {
  for (const [name, body] of Object.entries({
    scanner: { software: 'scanner', code_from: 100, code_to: 199 },
    disk: { machine: 'line-?-pc*', code: 500, message: '*disk*full*' },
    agent900: { software: 'ag?nt', code: 900 },
  })) {
    const r = await send('POST', '/api/whitelist', admin.jwt, body);
    t.equal(r.status, 201, name);
    rules[name] = r.body.id;
  }
  t.same((await get(api('/api/whitelist'), viewer.jwt)).body.items.map((r: { id: string }) => r.id), [rules.scanner, rules.disk, rules.agent900], 'listed oldest first');
  // Every worker replica polls the rules every CACHE_REFRESH_MS: within 5 s all of them apply.
  await sleep(5000);
  const reports: [string, string, { code: number; message?: string; severity: number }[]][] = [
    ['line-1-pc7', 'agent', [
      { code: 500, message: 'Disk C: FULL now', severity: 2 },
      { code: 500, message: 'cpu hot', severity: 2 },
      { code: 150, message: 'scan', severity: 1 },
      { code: 900, severity: 1 },
    ]],
    ['line-12-pc', 'agent', [{ code: 500, message: 'disk full', severity: 2 }]],
    ['x1', 'scanner', [{ code: 150, severity: 2 }, { code: 199, severity: 1 }, { code: 200, severity: 1 }, { code: 99, severity: 1 }]],
  ];
  // Many separate requests, so that both worker replicas take some.
  for (let i = 0; i < 10; i++) {
    const rs = await Promise.all(reports.map(([m, sw, items]) => post(ingest(`${m}`, sw, 'diagnostics'), s.token, { items })));
    t.ok(rs.every((r) => r.status === 200 || r.status === 202), `round ${i} accepted`);
  }
  const rows = await eventually(async () => {
    const r = await chRows<Row>(s.ch, `SELECT machine, software, code, message, suppressed, rule_id FROM diagnostics FINAL`);
    return r.length === 10 * 9 ? r : null;
  }, 10_000, 'every diagnostic stored (none dropped)');
  const expect: [string, number, string, string][] = [
    ['line-1-pc7', 500, 'Disk C: FULL now', rules.disk!],
    ['line-1-pc7', 500, 'cpu hot', ''],
    ['line-1-pc7', 150, 'scan', ''],
    ['line-1-pc7', 900, '', rules.agent900!],
    ['line-12-pc', 500, 'disk full', ''],
    ['x1', 150, '', rules.scanner!],
    ['x1', 199, '', rules.scanner!],
    ['x1', 200, '', ''],
    ['x1', 99, '', ''],
  ];
  for (const [m, code, message, rule] of expect) {
    const mine = rows.filter((r) => r.machine === m && Number(r.code) === code && r.message === message);
    t.equal(mine.length, 10, `${m} ${code} ${message}: 10 rows`);
    t.ok(mine.every((r) => r.rule_id === rule && Number(r.suppressed) === (rule ? 1 : 0)), `${m} ${code} ${JSON.stringify(message)} -> ${rule ? 'suppressed' : 'kept visible'}`);
  }
});

t.test('suppressed diagnostics do not colour the light; listings hide them unless asked', async (t) => {
  t.equal((await post(ingest('quiet', 'scanner', 'heartbeat'), s.token, {})).status, 200);
  t.equal((await post(ingest('quiet', 'scanner', 'diagnostics'), s.token, { items: [{ code: 120, message: 'noise', severity: 2 }] })).status, 202);
  const inst = await eventually(async () => (await get(api('/api/instances?machine=quiet'), s.token)).body.items?.[0], 5000, 'instance');
  const all = await eventually(async () => {
    const r = await get(api(`/api/instances/${inst.id}/diagnostics?suppressed=include`), s.token);
    return r.body.items?.length === 1 ? r.body.items : null;
  }, 5000, 'suppressed row stored');
  t.match(all[0], { code: 120, suppressed: true, rule_id: rules.scanner });
  t.same((await get(api(`/api/instances/${inst.id}/diagnostics`), s.token)).body.items, [], 'hidden by default');
  t.equal((await get(api(`/api/instances/${inst.id}/diagnostics?suppressed=only`), s.token)).body.items.length, 1);
  t.equal((await get(api(`/api/instances/${inst.id}/diagnostics?suppressed=maybe`), s.token)).status, 400);
  t.equal((await get(api('/api/instances?machine=quiet'), s.token)).body.items[0].light, 'green', 'a suppressed error leaves the light green');

  t.equal((await post(ingest('quiet', 'scanner', 'diagnostics'), s.token, { items: [{ code: 300, message: 'real', severity: 1 }] })).status, 202);
  await eventually(async () => (await get(api('/api/instances?machine=quiet'), s.token)).body.items[0].light === 'yellow', 5000, 'an unsuppressed warning turns it yellow');
  // Postgres (the light) commits before the ClickHouse rows land: wait for the row, then compare.
  const visible = await eventually(async () => {
    const r = await get(api(`/api/instances/${inst.id}/diagnostics`), s.token);
    return r.body.items?.length ? r.body.items : null;
  }, 5000, 'the unsuppressed row listed');
  t.same(visible.map((d: { code: number }) => d.code), [300]);
});

t.test('deleting or disabling a rule stops suppression on every worker within 5 s', async (t) => {
  t.equal((await send('DELETE', `/api/whitelist/${rules.agent900}`, admin.jwt)).status, 204);
  const r = await send('PUT', `/api/whitelist/${rules.scanner}`, admin.jwt, { software: 'scanner', code_from: 100, code_to: 199, enabled: false });
  t.equal(r.status, 200);
  await sleep(5000);
  for (let i = 0; i < 10; i++) {
    t.ok([200, 202].includes((await post(ingest('after', 'agent', 'diagnostics'), s.token, { items: [{ code: 900, severity: 1 }] })).status));
    t.ok([200, 202].includes((await post(ingest('after', 'scanner', 'diagnostics'), s.token, { items: [{ code: 150, severity: 1 }] })).status));
  }
  const rows = await eventually(async () => {
    const x = await chRows<Row>(s.ch, `SELECT machine, software, code, message, suppressed, rule_id FROM diagnostics FINAL WHERE machine = 'after'`);
    return x.length === 20 ? x : null;
  }, 10_000, 'all stored');
  t.ok(rows.every((x) => Number(x.suppressed) === 0 && x.rule_id === ''), 'none suppressed any more');
  // Rows stored while the rules were active keep their rule id.
  const old = await chRows<Row>(s.ch, `SELECT count() AS n FROM diagnostics FINAL WHERE rule_id = '${rules.agent900}'`);
  t.equal(Number((old[0] as unknown as { n: string }).n), 10);
});
