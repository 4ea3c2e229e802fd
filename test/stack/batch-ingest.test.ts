// Batch ingest (POST /api/ingest/{customer}/batch, docs/api.md "Batch ingest") against the real
// gateway, worker and api: mixed kinds for many machines stored exactly once; per-entry refusals next
// to accepted entries, each as the single route would refuse it, one rejection-log row each; the
// request refused whole; no entry reaching another customer; MAX_ITEMS and the body limits at and
// one past their boundary; unicode and the longest slugs; idempotency keys inside and across
// batches; the rate counting entries; two customers at once; commands offered; the CLI.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testStack, post, get, request, eventually, chRows, drained, afterMarker } from '../helpers/stack.js';
import { pipelined, type Answer } from '../helpers/http.js';
import { idempotentReportId } from '../../lib/contract/ids.js';
import { ROOT } from '../../deploy/service-process.js';

// The rejection log's per-source limit would drop rows of this file's many refusals (all from 127.0.0.1).
const s = await testStack(t, 'batch', { env: { REJECTION_LOG_RATE_PER_S: '100000', REJECTION_LOG_BURST: '100000' } });
await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [s.customer.id]);

const BODY_LIMIT = 1024 * 1024;
const BATCH_LIMIT = 4 * 1024 * 1024;
const MAX_ITEMS = 1000;

interface Entry {
  machine?: unknown;
  software?: unknown;
  kind?: unknown;
  body?: unknown;
  idempotency_key?: unknown;
  customer?: unknown;
}
const batchUrl = (customer = s.customer.slug, gateway = s.gatewayUrl) => `${gateway}/api/ingest/${customer}/batch`;
const batch = (entries: unknown[], o: { token?: string; customer?: string; gateway?: string; headers?: Record<string, string> } = {}) =>
  post(batchUrl(o.customer, o.gateway), o.token ?? s.token, { entries }, o.headers);
/** The entry alone, through its single route (the body as sent: `null` stays `null`). */
const single = (e: Entry, token = s.token) =>
  request('POST', s.ingestUrl(String(e.machine), String(e.kind), { software: String(e.software) }), token, e.body === undefined ? '{}' : JSON.stringify(e.body), {
    'Content-Type': 'application/json',
    ...(typeof e.idempotency_key === 'string' ? { 'Idempotency-Key': e.idempotency_key } : {}),
  });
const count = async (sql: string) => Number((await chRows<{ n: string }>(s.ch, sql))[0]!.n);
const statuses = (r: { body: { results: { status: number }[] } }) => r.body.results.map((x) => x.status);
const rejectionRows = (where: string) =>
  chRows<{ path: string; status: number; detail: string; customer_id: string; token_id: string; body_size: string }>(
    s.ch,
    `SELECT path, status, detail, customer_id, token_id, body_size FROM ingest_rejections FINAL WHERE ${where} ORDER BY path`,
  );
const instances = async (customerId: string, like: string) =>
  Number(
    (await s.pool.query<{ n: string }>(`SELECT count(*) AS n FROM instances i JOIN machines m ON m.id = i.machine_id WHERE i.customer_id = $1 AND m.slug LIKE $2`, [customerId, like])).rows[0]!
      .n,
  );
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * A POST through a raw socket that sends the headers first and the body only if no answer came
 * within 300 ms: a body announced over the limit is answered 413 before it is read, and the answer
 * is read here before anything else is written (writing into a connection the gateway closes can
 * lose the answer to a reset, so fetch may report only the broken pipe).
 */
function rawPost(url: string, token: string, body: string): Promise<{ status: number; body: any }> {
  const u = new URL(url);
  const bytes = Buffer.from(body);
  return new Promise((resolve, reject) => {
    let text = '';
    let timer: NodeJS.Timeout | undefined;
    const sock = connect(Number(u.port), u.hostname, () => {
      sock.write(`POST ${u.pathname} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${bytes.length}\r\nConnection: close\r\n\r\n`);
      timer = setTimeout(() => sock.write(bytes), 300);
    });
    sock.on('data', (d) => {
      clearTimeout(timer);
      text += d;
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      if (!m) return reject(new Error(`no answer: ${text.slice(0, 200)}`));
      const payload = text.slice(text.indexOf('\r\n\r\n') + 4);
      let parsed: unknown = payload;
      try {
        parsed = JSON.parse(payload);
      } catch {
        /* not JSON */
      }
      resolve({ status: Number(m[1]), body: parsed });
    });
  });
}

t.test('mixed kinds for many machines: every entry accepted in order, stored exactly once', async (t) => {
  const entries: Entry[] = [];
  for (let i = 0; i < 40; i++) {
    entries.push({ machine: `mix-${i}`, software: 'agent', kind: 'heartbeat', body: { version: `v${i}`, uptime_seconds: i } });
    entries.push({ machine: `mix-${i}`, software: 'edr', kind: 'diagnostics', body: { items: [{ code: 91001, severity: 1, message: `d${i}` }, { code: 91002, severity: 0 }] } });
    entries.push({ machine: `mix-${i}`, software: 'edr', kind: 'status', body: { status: i % 2 ? 'running' : 'degraded', snapshot: { n: i } } });
  }
  entries.push({ machine: 'mix-0', software: 'edr', kind: 'help', body: { items: [{ code: 91001, lang: 'en', text: 'disk' }, { code: 91001, lang: 'de', text: 'Platte' }] } });
  const r = await batch(entries);
  t.equal(r.status, 200);
  t.equal(r.body.ok, true);
  t.equal(r.body.accepted, entries.length);
  t.equal(r.body.rejected, 0);
  t.equal(r.body.results.length, entries.length);
  const want = entries.map((e) => (e.kind === 'diagnostics' ? 202 : 200));
  t.same(statuses(r), want, 'heartbeat and status 200, diagnostics 202 (no help texts yet), help 200, in entry order');
  t.same(r.body.results[0], { status: 200, id: r.body.results[0].id, ok: true }, "a heartbeat's result: the single route's answer with status and id");
  t.same(r.body.results[1].missing_help, [{ code: 91001, langs: ['de', 'en'] }, { code: 91002, langs: ['de', 'en'] }], 'missing_help as the single route gives it');
  t.same(r.body.results.at(-1), { status: 200, id: r.body.results.at(-1).id, ok: true, stored: 2 });
  const ids = r.body.results.map((x: { id: string }) => x.id);
  t.ok(ids.every((id: string) => UUID.test(id)), 'every accepted entry has its report id');
  t.equal(new Set(ids).size, ids.length, 'one report per entry');

  const hbIds = ids.filter((_: string, i: number) => entries[i]!.kind === 'heartbeat');
  await eventually(
    async () =>
      (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'mix-%'`)) === 40 &&
      (await count(`SELECT count() AS n FROM diagnostics FINAL WHERE machine LIKE 'mix-%'`)) === 80 &&
      (await count(`SELECT count() AS n FROM status_history FINAL WHERE machine LIKE 'mix-%'`)) === 40,
    30_000,
    'every report stored',
  );
  const stored = await chRows<{ report_id: string; version: string; machine: string }>(s.ch, `SELECT report_id, version, machine FROM heartbeats FINAL WHERE machine LIKE 'mix-%'`);
  t.same(stored.map((x) => x.report_id).sort(), [...hbIds].sort(), 'the heartbeat rows carry the answered report ids');
  t.ok(stored.every((x) => x.version === `v${x.machine.slice(4)}`), 'each body went to its own machine');
  t.equal(await instances(s.customer.id, 'mix-%'), 80, 'Postgres: 40 machines × 2 software');
  await eventually(async () => (await s.pool.query(`SELECT 1 FROM help_texts WHERE customer_id = $1 AND software = 'edr' AND code = 91001`, [s.customer.id])).rowCount === 2, 10_000, 'help texts stored');
  // Nothing more arrives later (each entry queued once): a marker heartbeat sent after the batch's
  // answer (afterMarker) is the only row added.
  await afterMarker(s, 'mix-marker');
  t.equal(await count(`SELECT count() AS n FROM heartbeats WHERE machine LIKE 'mix-%'`), 41, 'no second copy of any heartbeat, even before merges: the 40 and the marker');
  t.equal(await count(`SELECT count() AS n FROM status_history WHERE machine LIKE 'mix-%'`), 40);
  const light = await get(`${s.apiUrl}/api/instances?machine=mix-3&software=agent`, s.token);
  t.equal(light.body.items?.[0]?.light, 'green', 'the batch heartbeat drives the traffic light like any other');
});

/** The gateway's fleet_gateway_batch_entries_total, by `kind status`. */
async function batchEntryCounts(): Promise<Map<string, number>> {
  const text = await (await fetch(`${s.gatewayUrl}/metrics`)).text();
  const m = new Map<string, number>();
  for (const x of text.matchAll(/^fleet_gateway_batch_entries_total\{([^}]*)\} (\d+)$/gm)) {
    const labels = Object.fromEntries([...x[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    m.set(`${labels.kind} ${labels.status}`, Number(x[2]));
  }
  return m;
}

t.test('per-entry refusals next to accepted entries: the status and detail each would get alone, one log row each', async (t) => {
  const big = 'x'.repeat(300 * 1024);
  const helpOver = { items: Array.from({ length: 17 }, (_, i) => ({ code: i, lang: 'en', text: 'y'.repeat(65_000) })) };
  const entries: unknown[] = [
    { machine: 'per-ok1', software: 'agent', kind: 'heartbeat', body: {} },
    { machine: 'per-422', software: 'agent', kind: 'heartbeat', body: { uptime_seconds: -1 } },
    { machine: 'Bad_Slug', software: 'agent', kind: 'heartbeat', body: {} },
    { machine: 'per-kind', software: 'agent', kind: 'teleport', body: {} },
    { machine: 'per-snap', software: 'agent', kind: 'status', body: { status: 'running', snapshot: { big } } },
    { machine: 'per-big', software: 'agent', kind: 'help', body: helpOver },
    'not an entry',
    { machine: 'per-arr', software: 'agent', kind: 'heartbeat', body: [1] },
    { machine: 'per-key', software: 'agent', kind: 'heartbeat', body: {}, idempotency_key: 'k'.repeat(257) },
    { machine: 'per-nosw', kind: 'heartbeat', body: {} },
    { machine: 'per-ok2', software: 'agent', kind: 'diagnostics', body: { items: [{ code: 92001, severity: 2 }] } },
    { machine: 'per-nul', software: 'agent', kind: 'status', body: { status: 'running', message: 'a\u0000b' } },
    { machine: 'per-sev', software: 'agent', kind: 'diagnostics', body: { items: [{ code: 1, severity: 3 }] } },
    { machine: 'per-ok3', software: 'agent', kind: 'status', body: { status: 'error', snapshot: { v: { value: 5, type: 'bytes' } } } },
    { machine: 'per-typed', software: 'agent', kind: 'status', body: { status: 'running', snapshot: { v: { value: -5, type: 'bytes' } } } },
    { machine: 'per-null', software: 'agent', kind: 'heartbeat', body: null },
  ];
  const before = await batchEntryCounts();
  const r = await batch(entries);
  t.equal(r.status, 200);
  t.same(statuses(r), [200, 422, 400, 422, 413, 413, 422, 422, 400, 400, 202, 422, 422, 200, 422, 422]);
  // The counter adds each request's entries by kind and status (once per request, not per entry).
  const after = await batchEntryCounts();
  const delta = Object.fromEntries([...after].map(([k, v]) => [k, v - (before.get(k) ?? 0)]).filter(([, v]) => v !== 0));
  t.same(delta, {
    'heartbeat 200': 1,
    'heartbeat 422': 3,
    'heartbeat 400': 1,
    'invalid 400': 2,
    'invalid 422': 2,
    'status 413': 1,
    'status 422': 2,
    'status 200': 1,
    'help 413': 1,
    'diagnostics 202': 1,
    'diagnostics 422': 1,
  }, 'fleet_gateway_batch_entries_total by kind and status');
  t.equal(r.body.accepted, 3);
  t.equal(r.body.rejected, 13);
  const res = r.body.results;
  t.same(res[1].errors, [{ path: '/uptime_seconds', message: 'must be >= 0' }], 'paths relative to the entry body, as alone');
  t.match(res[2].detail, /^invalid machine slug "Bad_Slug"/);
  t.same(res[3].errors, [{ path: '/kind', message: 'must be one of heartbeat, diagnostics, status, help' }]);
  t.match(res[4].detail, /snapshot larger than 262144 bytes/);
  t.match(res[5].detail, new RegExp(`^body of ${Buffer.byteLength(JSON.stringify(helpOver))} bytes is over the limit of ${BODY_LIMIT} bytes$`));
  t.equal(res[6].detail, 'the entry must be a JSON object');
  t.equal(res[7].detail, 'the body must be a JSON object');
  t.equal(res[8].detail, 'idempotency_key longer than 256 characters');
  t.match(res[9].detail, /^invalid software slug ""/);
  t.match(res[14].detail, /typed snapshot leaf/);
  t.notOk(res.some((x: { status: number; detail?: string }) => x.status >= 400 && !x.detail), 'every refusal says why');

  // The same entries alone, through the single route: the same status and detail.
  for (const i of [1, 2, 4, 5, 7, 11, 12, 14, 15]) {
    const e = entries[i] as Entry;
    const alone = i === 5 ? await rawPost(s.ingestUrl('per-big', 'help'), s.token, JSON.stringify(helpOver)) : await single(e);
    t.equal(alone.status, res[i].status, `entry ${i} alone: ${alone.status}`);
    t.equal(alone.body.detail, res[i].detail, `entry ${i} alone: the same detail`);
  }
  const keyAlone = await post(s.ingestUrl('per-key', 'heartbeat'), s.token, {}, { 'Idempotency-Key': 'k'.repeat(257) });
  t.equal(keyAlone.status, 400, 'the header of 257 characters alone: 400 too');

  await eventually(async () => (await count(`SELECT count() AS n FROM status_history FINAL WHERE machine = 'per-ok3'`)) === 1, 20_000, 'accepted status stored');
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'per-ok1'`)) === 1, 20_000, 'accepted heartbeat stored');
  await eventually(async () => (await count(`SELECT count() AS n FROM diagnostics FINAL WHERE machine = 'per-ok2'`)) === 1, 20_000, 'accepted diagnostic stored');
  // A marker after the batch and the single requests, through the same gateway (afterMarker).
  await afterMarker(s, 'per-marker');
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine IN ('per-422', 'per-key', 'per-nosw', 'per-arr', 'per-null')`), 0, 'refused heartbeats not stored');
  t.equal(await count(`SELECT count() AS n FROM status_history FINAL WHERE machine IN ('per-snap', 'per-nul', 'per-typed')`), 0);
  t.equal(await instances(s.customer.id, 'per-%'), 4, 'only the accepted entries (and the marker) made instances');

  const rows = await eventually(async () => {
    const x = await rejectionRows(`path LIKE '/api/ingest/${s.customer.slug}/batch#%'`);
    return x.length >= 13 ? x : null;
  }, 20_000, 'one rejection row per refused entry');
  t.equal(rows.length, 13, 'exactly one row per refused entry');
  const byPath = new Map(rows.map((x) => [x.path, x]));
  res.forEach((x: { status: number; detail: string }, i: number) => {
    const row = byPath.get(`/api/ingest/${s.customer.slug}/batch#/entries/${i}`);
    if (x.status < 400) return t.notOk(row, `entry ${i} accepted: no row`);
    t.equal(row?.status, x.status, `entry ${i}: its status in the log`);
    t.ok(row?.detail.endsWith(x.detail), `entry ${i}: its detail in the log`);
    t.equal(row?.customer_id, s.customer.id, `entry ${i}: the request's customer`);
  });
  t.match(byPath.get(`/api/ingest/${s.customer.slug}/batch#/entries/1`)?.detail, /^heartbeat per-422\/agent: schema violation/);
  t.equal(Number(byPath.get(`/api/ingest/${s.customer.slug}/batch#/entries/5`)?.body_size), Buffer.byteLength(JSON.stringify(helpOver)), 'the entry body size');
  // The read API shows them to the customer.
  const api = await get(`${s.apiUrl}/api/ingest-rejections?status=413`, s.token);
  t.ok(api.body.items.some((x: { path: string }) => x.path.endsWith('#/entries/5')), 'the customer sees its entry rows');
});

t.test('the request refused whole: 4xx {"detail"}, one rejection-log row, nothing stored', async (t) => {
  const url = batchUrl();
  const raw = (body: string, headers: Record<string, string> = {}, token: string | null = s.token) =>
    request('POST', url, token, body, { 'Content-Type': 'application/json', ...headers });
  const hb = [{ machine: 'whole-x', software: 'agent', kind: 'heartbeat', body: {} }];
  const cases: [string, Promise<{ status: number; body: any; headers: Headers }>, number, RegExp][] = [
    ['not JSON', raw('{"entries": ['), 400, /^malformed JSON/],
    [
      'not UTF-8',
      fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${s.token}` }, body: Buffer.from([0x7b, 0xff, 0x7d]) }).then(async (r) => ({
        status: r.status,
        body: await r.json(),
        headers: r.headers,
      })),
      400,
      /UTF-8/,
    ],
    ['an array', raw('[]'), 422, /must be a JSON object/],
    ['no entries', raw('{}'), 422, /schema violation: \/entries must have required property 'entries'/],
    ['empty entries', raw('{"entries":[]}'), 422, /\/entries must NOT have fewer than 1 items/],
    ['entries not an array', raw('{"entries":{"0":{}}}'), 422, /\/entries must be array/],
    ['an Idempotency-Key header', raw(JSON.stringify({ entries: hb }), { 'Idempotency-Key': 'k' }), 400, /give each entry its own idempotency_key/],
    ['text/plain', raw(JSON.stringify({ entries: hb }), { 'Content-Type': 'text/plain' }), 415, /Content-Type must be application\/json/],
    ['no token', raw(JSON.stringify({ entries: hb }), {}, null), 403, /missing bearer token/],
    ['an unknown token', raw(JSON.stringify({ entries: hb }), {}, 'fk_nonsense'), 403, /invalid token/],
    ['a bad customer slug', request('POST', batchUrl('Bad_Customer'), s.token, { entries: hb }), 400, /invalid customer slug/],
  ];
  for (const [what, p, status, detail] of cases) {
    const r = await p;
    t.equal(r.status, status, `${what}: ${status}`);
    t.match(r.body?.detail, detail, `${what}: detail`);
  }
  const over = await rawPost(url, s.token, 'x'.repeat(BATCH_LIMIT + 1));
  t.equal(over.status, 413, 'over BATCH_BODY_LIMIT_BYTES: 413');
  t.match(over.body.detail, /over the limit of 4194304 bytes/);
  const get405 = await fetch(url);
  t.equal(get405.status, 405);
  t.equal(get405.headers.get('allow'), 'POST');
  const rows = await eventually(async () => {
    const x = await rejectionRows(`path = '/api/ingest/${s.customer.slug}/batch' AND customer_id = '${s.customer.id}'`);
    return x.length >= 9 ? x : null;
  }, 20_000, 'rows of the refused requests');
  t.same(rows.map((x) => x.status).sort(), [400, 400, 400, 413, 415, 422, 422, 422, 422], 'one row per refused request of this customer (the token known)');
  await afterMarker(s, 'whole-x');
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'whole-x'`), 1, 'nothing of the refused requests stored: only the marker');
});

t.test('no entry reaches another customer', async (t) => {
  const other = await s.newCustomer('other');
  const e = (m: string, extra: object = {}) => ({ machine: m, software: 'agent', kind: 'heartbeat', body: {}, ...extra });
  const r = await batch([e('cross-1', { customer: other.customer.slug }), e('cross-2', { customer: s.customer.slug }), e('cross-3')]);
  t.equal(r.status, 200);
  t.same(statuses(r), [403, 200, 200], "an entry naming another customer is 403; naming the path's customer is fine");
  t.match(r.body.results[0].detail, /cannot name another customer/);
  t.notMatch(r.body.results[0].detail, new RegExp(other.customer.slug), "the other customer's slug is not echoed");
  const path = await batch([e('cross-4')], { customer: other.customer.slug });
  t.equal(path.status, 403, "this customer's token on the other customer's path: 403 for the request");
  t.match(path.body.detail, /not authorised for customer/);
  const theirs = await batch([e('cross-5')], { customer: s.customer.slug, token: other.token });
  t.equal(theirs.status, 403, "the other customer's token on this path: 403");
  await eventually(async () => (await instances(s.customer.id, 'cross-%')) === 2, 20_000, 'the two accepted entries stored under this customer');
  await afterMarker(s, 'marker-cross');
  t.equal(await instances(other.customer.id, '%'), 0, 'nothing under the other customer');
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE customer_id = '${other.customer.id}'`), 0);
  const mine = await eventually(async () => {
    const x = await rejectionRows(`detail LIKE '%cannot name another customer%' OR path = '/api/ingest/${other.customer.slug}/batch'`);
    return x.length >= 2 ? x : null;
  }, 20_000, 'the refusals logged');
  t.ok(mine.every((x) => x.customer_id === s.customer.id), "rows caused by this customer's token carry this customer's id");
  await eventually(
    async () => (await count(`SELECT count() AS n FROM ingest_rejections FINAL WHERE customer_id = '${other.customer.id}' AND path = '/api/ingest/${s.customer.slug}/batch'`)) === 1,
    20_000,
    "the other customer's own attempt on this path is logged as its own",
  );
});

t.test('MAX_ITEMS entries: accepted and stored; one more: 422 for the request', async (t) => {
  const entries = Array.from({ length: MAX_ITEMS }, (_, i) => ({ machine: `max-${i}`, software: 'agent', kind: 'heartbeat', body: {} }));
  const r = await batch(entries);
  t.equal(r.status, 200);
  t.equal(r.body.accepted, MAX_ITEMS);
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'max-%'`)) === MAX_ITEMS, 60_000, 'all stored');
  await eventually(async () => (await instances(s.customer.id, 'max-%')) === MAX_ITEMS, 20_000, 'one instance each');
  const over = await batch([...entries.map((e) => ({ ...e, machine: `over-${e.machine}` })), { machine: 'over-last', software: 'agent', kind: 'heartbeat' }]);
  t.equal(over.status, 422);
  t.match(over.body.detail, /\/entries must NOT have more than 1000 items/);
  t.same(over.body.errors?.map((e: { path: string }) => e.path), ['/entries']);
  await afterMarker(s, 'over-marker');
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'over-%'`), 1, 'nothing of the refused batch stored: only the marker');
});

/** A JSON text of exactly `size` bytes: `make(pad)` with the padding found by measuring. */
function exactly(size: number, make: (pad: number) => unknown): string {
  let pad = 0;
  for (let i = 0; i < 3; i++) pad += size - Buffer.byteLength(JSON.stringify(make(pad)));
  const text = JSON.stringify(make(pad));
  if (Buffer.byteLength(text) !== size) throw new Error(`could not make ${size} bytes`);
  return text;
}

t.test('the largest batch body and the largest entry body: accepted; one byte more: 413', async (t) => {
  // 18 status snapshots of at most 240,000 bytes (under the 256 KiB of a snapshot) fill the 4 MiB batch.
  const entriesOf = (pad: number, tag: string) => ({
    entries: Array.from({ length: 18 }, (_, i) => ({ machine: `big-${tag}${i}`, software: 'agent', kind: 'status', body: { status: 'running', snapshot: { blob: 'z'.repeat(i === 17 ? pad : 240_000) } } })),
  });
  const full = exactly(BATCH_LIMIT, (pad) => entriesOf(pad, 'a'));
  const r = await request('POST', batchUrl(), s.token, full);
  t.equal(r.status, 200, `a body of exactly ${BATCH_LIMIT} bytes`);
  t.equal(r.body.accepted, 18, JSON.stringify(r.body.results?.filter((x: { status: number }) => x.status !== 200)).slice(0, 300));
  const over = exactly(BATCH_LIMIT + 1, (pad) => entriesOf(pad, 'b'));
  const o = await rawPost(batchUrl(), s.token, over);
  t.equal(o.status, 413, 'one byte more: 413');
  await eventually(async () => (await count(`SELECT count() AS n FROM status_history FINAL WHERE machine LIKE 'big-a%'`)) === 18, 30_000, 'the largest batch stored');
  await afterMarker(s, 'big-b-marker', { kind: 'status', body: { status: 'running' } });
  t.equal(await count(`SELECT count() AS n FROM status_history FINAL WHERE machine LIKE 'big-b%'`), 1, 'nothing of the refused batch stored: only the marker');

  // An entry body of exactly BODY_LIMIT_BYTES, as a single request may be; one byte more is 413 for that entry alone.
  const help = (pad: number) => ({ items: Array.from({ length: 17 }, (_, i) => ({ code: 93000 + i, lang: 'en', text: 'h'.repeat(i === 16 ? pad : 62_000) })) });
  const atLimit = JSON.parse(exactly(BODY_LIMIT, help));
  const overLimit = JSON.parse(exactly(BODY_LIMIT + 1, help));
  const e = await batch([
    { machine: 'body-a', software: 'bigsw', kind: 'help', body: atLimit },
    { machine: 'body-b', software: 'bigsw2', kind: 'help', body: overLimit },
  ]);
  t.same(statuses(e), [200, 413]);
  t.equal(e.body.results[0].stored, 17);
  t.equal((await post(s.ingestUrl('body-c', 'help', { software: 'bigsw3' }), s.token, atLimit)).status, 200, 'the same body alone: 200');
  const alone = await rawPost(s.ingestUrl('body-d', 'help', { software: 'bigsw4' }), s.token, JSON.stringify(overLimit));
  t.equal(alone.status, 413, 'one byte more alone: 413 too');
  t.equal(alone.body.detail, e.body.results[1].detail, 'with the same detail');
  await eventually(async () => (await s.pool.query(`SELECT 1 FROM help_texts WHERE customer_id = $1 AND software = 'bigsw'`, [s.customer.id])).rowCount === 17, 20_000, 'the largest entry stored');
  await afterMarker(s, 'body-b', { kind: 'help', software: 'bigsw2', body: { items: [{ code: 1, lang: 'en', text: 'marker' }] } });
  t.equal((await s.pool.query(`SELECT 1 FROM help_texts WHERE customer_id = $1 AND software = 'bigsw2'`, [s.customer.id])).rowCount, 1, 'nothing of the entry over the limit stored: only the marker');
});

t.test('unicode bodies stored exactly; the longest slugs accepted, one character more or non-ASCII refused', async (t) => {
  const m64 = `u${'-'.repeat(62)}9`;
  const s64 = 'a'.repeat(64);
  const text = 'e\u0301 \u05D0\u05D1 \u{1F600}\u200B\uFEFF\u4e2d "q" \\ \t';
  const r = await batch([
    { machine: m64, software: s64, kind: 'heartbeat', body: { version: text, group: '\u{1F600}'.repeat(256) } },
    { machine: `${m64}x`, software: 'agent', kind: 'heartbeat', body: {} },
    { machine: 'maschine-ä', software: 'agent', kind: 'heartbeat', body: {} },
    { machine: 'uni-ok', software: `${s64}b`, kind: 'heartbeat', body: {} },
    { machine: 'uni-ok', software: 'agent', kind: 'status', body: { status: 'running', message: text, snapshot: { [text]: text } } },
  ]);
  t.same(statuses(r), [200, 400, 400, 400, 200]);
  t.match(r.body.results[1].detail, /invalid machine slug/);
  t.match(r.body.results[2].detail, /invalid machine slug "maschine-ä"/);
  t.match(r.body.results[3].detail, /invalid software slug/);
  const hb = await eventually(async () => (await chRows<{ version: string; group_name: string; software: string }>(s.ch, `SELECT version, group_name, software FROM heartbeats FINAL WHERE machine = '${m64}'`))[0], 20_000, 'stored');
  t.same(hb, { version: text, group_name: '\u{1F600}'.repeat(256), software: s64 }, 'exactly as sent');
  const st = await eventually(async () => (await chRows<{ message: string; snapshot: string }>(s.ch, `SELECT message, snapshot FROM status_history FINAL WHERE machine = 'uni-ok'`))[0], 20_000, 'stored');
  t.equal(st.message, text);
  t.same(JSON.parse(st.snapshot), { [text]: text });
});

t.test('idempotency keys: repeated inside one batch, across batches and with the single route: stored once', async (t) => {
  const k1 = `idem-${s.id}-1`;
  const k2 = `idem-${s.id}-2`;
  const e1 = { machine: 'idem-1', software: 'agent', kind: 'heartbeat', body: { version: 'once' }, idempotency_key: k1 };
  const e2 = { machine: 'idem-2', software: 'agent', kind: 'diagnostics', body: { items: [{ code: 94001, severity: 0 }] }, idempotency_key: k2 };
  const a = await batch([e1, e1, e2, e1]);
  t.same(statuses(a), [200, 200, 202, 200], 'every copy answered accepted');
  const id1 = idempotentReportId(s.customer.id, 'heartbeat', 'idem-1', 'agent', k1);
  const id2 = idempotentReportId(s.customer.id, 'diagnostics', 'idem-2', 'agent', k2);
  t.same(a.body.results.map((x: { id: string }) => x.id), [id1, id1, id2, id1], 'the id the single route derives from the key and its endpoint');
  const b = await batch([e2, e1]);
  t.same(b.body.results.map((x: { id: string }) => x.id), [id2, id1], 'across batches: the same ids');
  t.equal((await single(e1)).status, 200, 'and the single route with the header');
  const [c, d] = await Promise.all([batch([e1, e2]), batch([e2, e1])]);
  t.same([c.status, d.status], [200, 200], 'concurrent copies too');
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'idem-1'`)) === 1, 20_000, 'heartbeat stored');
  await eventually(async () => (await count(`SELECT count() AS n FROM diagnostics FINAL WHERE machine = 'idem-2'`)) === 1, 20_000, 'diagnostic stored');
  // Every copy was answered, so JetStream had it: once the stream is drained, all are applied.
  await drained(s);
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'idem-1'`), 1, 'still once');
  t.equal(await count(`SELECT count() AS n FROM diagnostics FINAL WHERE machine = 'idem-2'`), 1, 'still once');
  t.equal(await count(`SELECT uniqExact(received_ms) AS n FROM heartbeats WHERE machine = 'idem-1'`), 1, 'every copy took the first receive time');
});

t.test('the rate counts entries against the same per-token budget as single requests', async (t) => {
  // A token bucket of 10 that refills one token a second. The gateway is new, so the bucket is
  // created full by this batch's one take: exactly 10 entries get a token, however slow the machine.
  const gw = await s.startGateway({ RATE_LIMIT_PER_S: '1', RATE_LIMIT_BURST: '10' });
  const entries = Array.from({ length: 15 }, (_, i) => ({ machine: `rate-${i}`, software: 'agent', kind: 'heartbeat', body: {} }));
  const r = await batch(entries, { gateway: gw.url });
  t.equal(r.status, 200);
  t.same(statuses(r), [...Array(10).fill(200), ...Array(5).fill(429)], 'the burst of 10 accepted in entry order, the rest 429 alone');
  t.match(r.body.results[10].detail, /over the rate limit of 1 requests\/s/);
  t.ok(r.body.results[10].retry_after >= 1, 'retry_after on the entry');
  t.ok(Number(r.headers.get('retry-after')) >= 1, 'Retry-After on the 200');
  // No token left, whatever time has passed meanwhile: one write of 11 requests that each take a
  // token if one is left (a text/plain heartbeat: the rate is looked at before the Content-Type,
  // so 415 with a token, 429 without), then a single heartbeat and a batch. The bucket holds at most
  // its burst of 10, and the gateway handles one read's requests in one synchronous pass (a refill
  // of 1/s cannot add a token in between), so the 11 leave nothing for the last two.
  const drain = { path: `/api/ingest/${s.customer.slug}/rate-drain/agent/heartbeat`, token: s.token, headers: { 'Content-Type': 'text/plain' }, body: '{}' };
  const answers = await pipelined(gw.url, [
    ...Array<typeof drain>(11).fill(drain),
    { path: `/api/ingest/${s.customer.slug}/rate-single/agent/heartbeat`, token: s.token, body: '{}' },
    { path: `/api/ingest/${s.customer.slug}/batch`, token: s.token, body: JSON.stringify({ entries: entries.slice(0, 3) }) },
  ]);
  const drains = answers.slice(0, 11).map((a) => a.status);
  t.ok(drains.every((x) => x === 415 || x === 429) && drains.filter((x) => x === 415).length <= 10, `the drain: at most the burst got a token (${drains.join(' ')})`);
  const [next, again] = answers.slice(11) as [Answer, Answer];
  t.equal(next.status, 429, 'a single request with no token left: 429');
  t.equal(again.status, 429, 'a batch with no token left: 429 for the request');
  t.match(again.body.detail, /over the rate limit/);
  t.ok(Number(again.headers.get('retry-after')) >= 1);
  // Refused before its body was read (no token left): one row for the request.
  await eventually(async () => (await rejectionRows(`status = 429 AND path = '/api/ingest/${s.customer.slug}/batch'`)).length >= 1, 20_000, 'the refused batch logged');
  await drained(s); // every record the gateway published is written
  const rows = await rejectionRows(`status = 429 AND path = '/api/ingest/${s.customer.slug}/batch'`);
  t.equal(rows.length, 1, 'one row for the batch refused before its body');
  t.match(rows[0]!.detail, /over the rate limit/);
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'rate-%'`)) >= 10, 20_000, 'the accepted ones stored');
  // Everything the gateway took was published before its answers: applied once the stream is drained.
  await drained(s);
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'rate-%'`), 10, 'exactly the 10 accepted entries stored');
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine IN ('rate-10','rate-11','rate-12','rate-13','rate-14', 'rate-single', 'rate-drain')`), 0, 'the 429 ones not stored');
  const entryRows = await eventually(async () => {
    const x = await rejectionRows(`status = 429 AND match(detail, '^heartbeat rate-1[0-4]/agent: over the rate limit')`);
    return x.length >= 5 ? x : null;
  }, 20_000, 'the 429 entries logged');
  t.same(entryRows.map((x) => x.path.split('#')[1]).sort(), ['/entries/10', '/entries/11', '/entries/12', '/entries/13', '/entries/14'], 'one row per entry over the rate');
  await gw.proc.stop('SIGTERM');
});

t.test("two customers' batches at once: each stored under its own customer, exactly once", async (t) => {
  const b = await s.newCustomer('second');
  await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [b.customer.id]);
  const make = (j: number) => Array.from({ length: 60 }, (_, i) => ({ machine: `conc-${j}-${i}`, software: 'agent', kind: 'heartbeat', body: { version: `${j}` } }));
  const sends = [];
  for (let j = 0; j < 4; j++) {
    sends.push(batch(make(j)).then((r) => ({ who: 'a', r })));
    sends.push(batch(make(j), { customer: b.customer.slug, token: b.token }).then((r) => ({ who: 'b', r })));
  }
  const answers = await Promise.all(sends);
  t.ok(answers.every((x) => x.r.status === 200 && x.r.body.accepted === 60), 'every batch fully accepted');
  const idsOf = (who: string) => answers.filter((x) => x.who === who).flatMap((x) => x.r.body.results.map((y: { id: string }) => y.id));
  for (const [who, cust] of [['a', s.customer], ['b', b.customer]] as const) {
    await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE customer_id = '${cust.id}' AND machine LIKE 'conc-%'`)) === 240, 30_000, `customer ${who}: 240 rows`);
    const rows = await chRows<{ report_id: string }>(s.ch, `SELECT report_id FROM heartbeats FINAL WHERE customer_id = '${cust.id}' AND machine LIKE 'conc-%'`);
    t.same(rows.map((x) => x.report_id).sort(), idsOf(who).sort(), `customer ${who}: exactly its own reports`);
    t.equal(await instances(cust.id, 'conc-%'), 240, `customer ${who}: 240 instances`);
  }
});

t.test('pending agent commands are offered in the results of heartbeat and status entries, as the single route offers them', async (t) => {
  const admin = await s.newUser('admin');
  const snapshot = { modules: { updater: { commands: [{ name: 'check' }] } } };
  t.equal((await post(s.ingestUrl('cmd-1', 'status'), s.token, { status: 'running', snapshot })).status, 200);
  const id = await eventually(async () => {
    const i = (await get(`${s.apiUrl}/api/instances?machine=cmd-1`, s.token)).body.items?.[0];
    if (!i) return null;
    return (await get(`${s.apiUrl}/api/instances/${i.id}/commands/available`, admin.jwt)).body.items?.length ? (i.id as string) : null;
  }, 20_000, 'instance with its snapshot');
  const q = await post(`${s.apiUrl}/api/instances/${id}/commands`, admin.jwt, { module: 'updater', command: 'check' });
  t.equal(q.status, 201);
  const entries = [
    { machine: 'cmd-1', software: 'agent', kind: 'heartbeat', body: {} },
    { machine: 'cmd-1', software: 'agent', kind: 'diagnostics', body: { items: [{ code: 95001, severity: 0 }] } },
    { machine: 'cmd-2', software: 'agent', kind: 'heartbeat', body: {} },
    { machine: 'cmd-1', software: 'agent', kind: 'status', body: { status: 'running' } },
  ];
  const r = await eventually(async () => {
    const x = await batch(entries);
    return x.body.results?.[0]?.commands ? x : null;
  }, 10_000, 'the command offered');
  t.same(r.body.results[0].commands.map((c: { id: string }) => c.id), [q.body.id], 'heartbeat entry: the command');
  t.notOk(r.body.results[1].commands, 'diagnostics offer none');
  t.notOk(r.body.results[2].commands, "another instance's entry: none");
  t.same(r.body.results[3].commands.map((c: { id: string }) => c.id), [q.body.id], 'status entry: the command');
  const alone = await post(s.ingestUrl('cmd-1', 'heartbeat'), s.token, {});
  t.same(alone.body.commands, r.body.results[0].commands, 'the single route offers the same');
  await eventually(async () => {
    const c = (await get(`${s.apiUrl}/api/instances/${id}/commands`, admin.jwt)).body.items?.find((x: { id: string }) => x.id === q.body.id);
    return c?.state === 'delivered';
  }, 20_000, 'recorded as delivered by the worker');
});

t.test('fleet ingest-batch: sends a file, prints each entry result, exit 0 or 4', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fleet-batch-'));
  const fleet = (...args: string[]) =>
    spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), 'ingest-batch', '--customer', s.customer.slug, '--url', s.gatewayUrl, ...args], {
      env: { ...process.env, ...s.env, FLEET_TOKEN: s.token },
      encoding: 'utf8',
    });
  const ok = join(dir, 'ok.json');
  writeFileSync(ok, JSON.stringify({ entries: Array.from({ length: 25 }, (_, i) => ({ machine: `cli-${i}`, software: 'agent', kind: 'heartbeat', body: { version: 'cli' } })) }));
  const r = fleet('--file', ok, '--batch-size', '10');
  t.equal(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  t.equal(lines.length, 25);
  t.same(lines.map((x) => x.index), [...Array(25).keys()]);
  t.ok(lines.every((x) => x.status === 200 && UUID.test(x.id)));
  t.match(r.stderr, /25 entries: 25 accepted, 0 refused/);
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'cli-%'`)) === 25, 20_000, 'stored');
  // The same file again: the keys the CLI derived make it a repeat, stored once.
  const again = fleet('--file', ok);
  t.equal(again.status, 0, again.stderr);
  t.same(again.stdout.trim().split('\n').map((l) => JSON.parse(l).id), lines.map((x) => x.id), 'the same report ids');
  await drained(s); // the second run's entries were answered: applied once the stream is drained
  t.equal(await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'cli-%'`), 25, 'still 25');

  const mixed = join(dir, 'mixed.ndjson');
  writeFileSync(mixed, [{ machine: 'cli-x', software: 'agent', kind: 'heartbeat' }, { machine: 'cli-y', software: 'agent', kind: 'status', body: { status: 'sleeping' } }].map((e) => JSON.stringify(e)).join('\n') + '\n');
  const m = fleet('--file', mixed);
  t.equal(m.status, 4, 'some refused: exit 4');
  const ml = m.stdout.trim().split('\n').map((l) => JSON.parse(l));
  t.same(ml.map((x) => x.status), [200, 422]);
  t.match(ml[1].detail, /schema violation/);
  const bad = fleet('--file', ok, '--token', 'fk_wrong');
  t.equal(bad.status, 1, 'the whole batch refused: exit 1');
  t.match(bad.stderr, /403/);
});

t.test('licence gate per machine: an entry for a new machine of a customer past its grace period is 403, known machines accepted', async (t) => {
  // A customer of its own (the others here have a raised limit): 2 known machines, limit 1, grace period over.
  const c = await s.newCustomer('lic');
  const hb = (m: string, kind = 'heartbeat', body: unknown = {}) => ({ machine: m, software: 'agent', kind, body });
  const seed = await batch([hb('lic-1'), hb('lic-2')], { customer: c.customer.slug, token: c.token });
  t.same(statuses(seed), [200, 200]);
  await eventually(async () => (await instances(c.customer.id, 'lic-%')) === 2, 20_000, 'the two machines known');
  await s.pool.query(`UPDATE licences SET device_limit = 1, over_limit_since = now() - interval '15 days' WHERE customer_id = $1`, [c.customer.id]);
  let p = 0;
  await eventually(async () => (await s.report(`lic-probe-${p++}`, 'heartbeat', {}, { customer: c.customer.slug, token: c.token })).status === 403, 10_000, 'the gateway enforces the limit');

  const entries = [
    hb('lic-1'),
    hb('lic-new'),
    hb('lic-2', 'status', { status: 'running' }),
    hb('lic-new2', 'diagnostics', { items: [{ code: 96001, severity: 1 }] }),
    hb('lic-new', 'status', { status: 'running' }),
    hb('lic-new3', 'help', { items: [{ code: 96001, lang: 'en', text: 'help creates no machine' }] }),
  ];
  const r = await batch(entries, { customer: c.customer.slug, token: c.token });
  t.equal(r.status, 200);
  t.same(statuses(r), [200, 403, 200, 403, 403, 200], 'new machines refused per entry, known machines and help accepted');
  t.match(r.body.results[1].detail, /licence limit reached/);
  t.match(r.body.results[1].detail, /"lic-new"/);
  for (const i of [1, 3]) {
    const e = entries[i]!;
    const alone = await post(s.ingestUrl(e.machine, e.kind, { customer: c.customer.slug }), c.token, e.body);
    t.equal(alone.status, 403, `entry ${i} alone: 403`);
    t.equal(alone.body.detail, r.body.results[i].detail, `entry ${i} alone: the same detail`);
  }
  await eventually(async () => (await count(`SELECT count() AS n FROM status_history FINAL WHERE customer_id = '${c.customer.id}' AND machine = 'lic-2'`)) === 1, 20_000, 'the known machine stored');
  await afterMarker(s, 'lic-1', { customer: c.customer.slug, token: c.token });
  t.equal(await instances(c.customer.id, 'lic-new%'), 0, 'no refused machine stored');
  const rows = await eventually(async () => {
    const x = await rejectionRows(`customer_id = '${c.customer.id}' AND path LIKE '%/batch#/entries/%'`);
    return x.length >= 3 ? x : null;
  }, 20_000, 'the refused entries logged');
  t.same(rows.map((x) => [x.path.split('#')[1], Number(x.status)]), [['/entries/1', 403], ['/entries/3', 403], ['/entries/4', 403]], 'one 403 row per refused entry, under this customer');
});

t.test('the OpenAPI document describes the batch route with its schemas', async (t) => {
  const doc = (await get(`${s.apiUrl}/openapi.json`, null)).body;
  const op = doc.paths['/api/ingest/{customer}/batch']?.post;
  t.ok(op, 'documented');
  t.same(op.requestBody.content['application/json'].schema, { $ref: '#/components/schemas/BatchIngest' });
  t.same(op.responses['200'].content['application/json'].schema, { $ref: '#/components/schemas/BatchAnswer' });
  t.equal(doc.components.schemas.BatchIngest.properties.entries.maxItems, MAX_ITEMS);
  const entry = doc.components.schemas.BatchIngest.properties.entries.items;
  t.same(entry, { $ref: '#/components/schemas/BatchEntry' });
  const bodies = doc.components.schemas.BatchEntry.anyOf.map((x: any) => x.properties.body.$ref).sort();
  t.same(bodies, ['#/components/schemas/Diagnostics', '#/components/schemas/Heartbeat', '#/components/schemas/HelpUpload', '#/components/schemas/Status'], "each kind's body is the single route's schema");
});
