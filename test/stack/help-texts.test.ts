// Help texts: the help ingest stores DE and EN texts per customer, software and code; the diagnostics
// ingest answers 202 {ok, missing_help} while a reported code lacks one, decided by every gateway
// from its in-memory copy; a text stored through one gateway is honoured by another within 5 s.
// Lookup at /instances/{id}/help and /api/instances/{id}/help: 200, 404 with the languages there
// are, 400 for a bad code or lang.
import t from 'tap';
import { testStack, post, get, eventually } from '../helpers/stack.js';

const s = await testStack(t, 'help');
const gwB = await s.startGateway();
const ingest = (base: string, m: string, sw: string, kind: string) => s.ingestUrl(m, kind, { software: sw, gateway: base });

async function instanceId(machine: string, software: string): Promise<string> {
  return eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances?machine=${machine}&software=${software}`, s.token);
    return l.body.items?.[0]?.id;
  }, 5000, `instance ${machine}/${software}`);
}

t.test('diagnostics without help texts: 202 with the missing codes and languages, stored all the same', async (t) => {
  const r = await post(ingest(s.gatewayUrl, 'm1', 'agent', 'diagnostics'), s.token, {
    items: [
      { code: 7001, message: 'a', severity: 1 },
      { code: 7002, message: 'b', severity: 0 },
      { code: 7001, message: 'again', severity: 2 },
    ],
  });
  t.equal(r.status, 202);
  t.same(r.body, { ok: true, missing_help: [{ code: 7001, langs: ['de', 'en'] }, { code: 7002, langs: ['de', 'en'] }] }, 'each code once, in order');
  const id = await instanceId('m1', 'agent');
  await eventually(async () => (await get(`${s.apiUrl}/api/instances/${id}/diagnostics`, s.token)).body.items?.length === 3, 5000, 'all three stored');
});

t.test('help upload: 200 {ok, stored}; validation 422', async (t) => {
  const r = await post(ingest(s.gatewayUrl, 'build', 'agent', 'help'), s.token, {
    items: [
      { code: 7001, lang: 'de', title: 'Platte voll', text: 'Die Platte ist fast voll.' },
      { code: 7001, lang: 'en', title: 'Disk full', text: 'The disk is almost full.' },
      { code: 7002, lang: 'en', text: 'first version' },
      { code: 7002, lang: 'en', text: 'Informational.' },
    ],
  });
  t.equal(r.status, 200);
  t.same(r.body, { ok: true, stored: 3 }, 'distinct code and language pairs');
  for (const [body, path] of [
    [{ items: [{ code: 1, lang: 'fr', text: 'x' }] }, '/items/0/lang'],
    [{ items: [{ code: 1, lang: 'de' }] }, '/items/0/text'],
    [{ items: [{ code: 'x', lang: 'de', text: 'y' }] }, '/items/0/code'],
    [{ items: [] }, '/items'],
  ] as const) {
    const bad = await post(ingest(s.gatewayUrl, 'build', 'agent', 'help'), s.token, body);
    t.equal(bad.status, 422, JSON.stringify(body));
    t.ok(bad.body.errors.some((e: { path: string }) => e.path === path), `errors name ${path}`);
  }
  const noToken = await post(ingest(s.gatewayUrl, 'build', 'agent', 'help'), null, { items: [{ code: 1, lang: 'de', text: 'x' }] });
  t.equal(noToken.status, 403);
  t.notOk((await s.pool.query(`SELECT 1 FROM machines WHERE slug = 'build'`)).rows.length, 'a help upload creates no machine');
});

t.test('202 then 200: the text posted through gateway B is honoured by gateways A and B within 5 s', async (t) => {
  const body = { items: [{ code: 8100, message: 'new code', severity: 1 }] };
  for (const gw of [s.gatewayUrl, gwB.url]) {
    const r = await post(ingest(gw, 'm2', 'agent', 'diagnostics'), s.token, body);
    t.equal(r.status, 202, 'no text yet');
    t.same(r.body.missing_help, [{ code: 8100, langs: ['de', 'en'] }]);
  }
  t.equal((await post(ingest(gwB.url, 'build', 'agent', 'help'), s.token, { items: [{ code: 8100, lang: 'de', text: 'Neu.' }] })).status, 200);
  const t0 = Date.now();
  // Only DE so far: still 202, now naming EN alone (on both gateways).
  for (const gw of [s.gatewayUrl, gwB.url]) {
    const r = await eventually(async () => {
      const x = await post(ingest(gw, 'm2', 'agent', 'diagnostics'), s.token, body);
      return x.body.missing_help?.[0]?.langs?.length === 1 ? x : null;
    }, 5000, 'DE text honoured');
    t.equal(r.status, 202);
    t.same(r.body.missing_help, [{ code: 8100, langs: ['en'] }]);
  }
  t.ok(Date.now() - t0 <= 5000, `DE honoured by both gateways after ${Date.now() - t0} ms`);

  t.equal((await post(ingest(gwB.url, 'build', 'agent', 'help'), s.token, { items: [{ code: 8100, lang: 'en', text: 'New.' }] })).status, 200);
  const t1 = Date.now();
  for (const gw of [s.gatewayUrl, gwB.url]) {
    const r = await eventually(async () => {
      const x = await post(ingest(gw, 'm2', 'agent', 'diagnostics'), s.token, body);
      return x.status === 200 ? x : null;
    }, 5000, '200 once both texts exist');
    t.same(r.body, { ok: true });
  }
  t.ok(Date.now() - t1 <= 5000, `200 from both gateways after ${Date.now() - t1} ms`);
});

t.test('help texts are per software and per customer', async (t) => {
  // 7001 has both texts for `agent`, none for `other-sw`.
  await eventually(async () => (await post(ingest(s.gatewayUrl, 'm3', 'agent', 'diagnostics'), s.token, { items: [{ code: 7001, severity: 0 }] })).status === 200, 5000, '7001 covered for agent');
  const b = await post(ingest(s.gatewayUrl, 'm3', 'other-sw', 'diagnostics'), s.token, { items: [{ code: 7001, severity: 0 }] });
  t.equal(b.status, 202);
  const other = await s.newCustomer('helpless');
  const o = await post(`${s.gatewayUrl}/api/ingest/${other.customer.slug}/m1/agent/diagnostics`, other.token, { items: [{ code: 7001, severity: 0 }] });
  t.equal(o.status, 202, "another customer's texts do not count");
});

t.test('lookup: 200, 404 with the languages there are, 400 for bad code or lang; both paths', async (t) => {
  const id = await instanceId('m1', 'agent');
  for (const prefix of ['/api/instances', '/instances']) {
    const de = await get(`${s.apiUrl}${prefix}/${id}/help?code=7001&lang=de`, s.token);
    t.equal(de.status, 200, `${prefix} de`);
    t.match(de.body, { code: 7001, lang: 'de', software: 'agent', title: 'Platte voll', text: 'Die Platte ist fast voll.' });
    const en = await get(`${s.apiUrl}${prefix}/${id}/help?code=7001&lang=EN`, s.token);
    t.equal(en.status, 200, 'upper-case lang accepted');
    t.equal(en.body.text, 'The disk is almost full.');
    const latest = await get(`${s.apiUrl}${prefix}/${id}/help?code=7002&lang=en`, s.token);
    t.equal(latest.body.text, 'Informational.', 'the later item of the upload won');
    t.equal(latest.body.title, '');

    const missing = await get(`${s.apiUrl}${prefix}/${id}/help?code=7002&lang=de`, s.token);
    t.equal(missing.status, 404);
    t.type(missing.body.detail, 'string');
    t.same(missing.body.available, ['en']);
    const none = await get(`${s.apiUrl}${prefix}/${id}/help?code=999&lang=de`, s.token);
    t.equal(none.status, 404);
    t.same(none.body.available, []);

    for (const q of ['code=7001&lang=fr', 'code=abc&lang=de', 'lang=de', 'code=7001', 'code=1.5&lang=en', 'code=99999999999&lang=de']) {
      const bad = await get(`${s.apiUrl}${prefix}/${id}/help?${q}`, s.token);
      t.equal(bad.status, 400, `${prefix} ${q}`);
      t.type(bad.body.detail, 'string');
    }
    t.equal((await get(`${s.apiUrl}${prefix}/not-a-uuid/help?code=1&lang=de`, s.token)).status, 400);
    t.equal((await get(`${s.apiUrl}${prefix}/00000000-0000-4000-8000-000000000000/help?code=7001&lang=de`, s.token)).status, 404);
    t.equal((await get(`${s.apiUrl}${prefix}/${id}/help?code=7001&lang=de`, null)).status, 401);
  }
  const other = await s.newCustomer('peeker');
  t.equal((await get(`${s.apiUrl}/instances/${id}/help?code=7001&lang=de`, other.token)).status, 404, "another customer's instance: 404");
});

t.test('a later upload replaces the text; a redelivered or older one does not', async (t) => {
  const url = ingest(s.gatewayUrl, 'build', 'agent', 'help');
  t.equal((await post(url, s.token, { items: [{ code: 7001, lang: 'de', title: 'Neu', text: 'Zweite Fassung.' }] }, { 'Idempotency-Key': 'help-v2' })).status, 200);
  const id = await instanceId('m1', 'agent');
  await eventually(async () => (await get(`${s.apiUrl}/instances/${id}/help?code=7001&lang=de`, s.token)).body.text === 'Zweite Fassung.', 5000, 'second version');
  // The same upload again (same key: same report id and receive time) changes nothing.
  const before = (await s.pool.query(`SELECT updated_at FROM help_texts WHERE code = 7001 AND lang = 'de'`)).rows[0].updated_at.getTime();
  t.equal((await post(url, s.token, { items: [{ code: 7001, lang: 'de', title: 'Neu', text: 'Zweite Fassung.' }] }, { 'Idempotency-Key': 'help-v2' })).status, 200);
  // A marker queued after it: once the marker is stored, the repeat has been applied too (one worker, in order).
  t.equal((await post(url, s.token, { items: [{ code: 7999, lang: 'de', text: 'marker' }] })).status, 200);
  await eventually(async () => (await s.pool.query(`SELECT 1 FROM help_texts WHERE code = 7999`)).rows.length === 1, 5000, 'marker stored');
  const after = (await s.pool.query(`SELECT updated_at FROM help_texts WHERE code = 7001 AND lang = 'de'`)).rows[0].updated_at.getTime();
  t.equal(after, before, 'a repeated upload is a no-op');
});
