// Every bad input gets its status code, a {"detail"} body and a row in the rejection log; the
// rejection log never holds the token or the body, and a flood of bad requests stays bounded.
import t, { type Test } from 'tap';
import { connect } from 'node:net';
import { testStack, post, get, eventually, chRows, drained } from '../helpers/stack.js';
import { pipelined, upload } from '../helpers/http.js';
import { createToken, revokeToken } from '../../lib/store/customers.js';

const s = await testStack(t, 'errors', { api: false });
const c = s.customer.slug;
const url = (kind = 'heartbeat', customer = c, machine = 'm1', software = 'agent') => `${s.gatewayUrl}/api/ingest/${customer}/${machine}/${software}/${kind}`;

interface Rejection {
  status: number;
  detail: string;
  path: string;
  customer_id: string;
  token_id: string;
  method: string;
  body_size: string;
  remote: string;
  dropped: string;
}

async function rejectionFor(path: string, status: number): Promise<Rejection> {
  return eventually(async () => {
    const rows = await chRows<Rejection>(s.ch, `SELECT * FROM ingest_rejections FINAL WHERE path = '${path.replace(/'/g, "\\'")}' AND status = ${status}`);
    return rows[0];
  }, 10_000, `rejection row for ${status} ${path}`);
}

async function expectRejected(t: Test, res: { status: number; body: any }, status: number, path: string, detail: RegExp) {
  t.equal(res.status, status, `status ${status}`);
  t.type(res.body?.detail, 'string', 'body has a detail string');
  t.match(res.body.detail, detail);
  const row = await rejectionFor(path, status);
  t.match(row.detail, detail, 'rejection log row has the detail');
  t.notMatch(JSON.stringify(row), /fk_/, 'the rejection log never holds a token');
  return row;
}

/** Every subtest that had a 200 checks its own: nothing accepted is lost while it refuses the rest. */
async function expectStored(t: Test, machine: string, n: number) {
  await eventually(async () => {
    const rows = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE machine = '${machine}'`);
    return Number(rows[0]!.n) >= n;
  }, 10_000, `the accepted reports of ${machine} stored`);
  // Every report of the subtest was answered before: once the stream is drained, all are applied.
  await drained(s);
  const rows = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE machine = '${machine}'`);
  t.equal(Number(rows[0]!.n), n, `${n} accepted report(s) of ${machine} stored`);
}

t.test('missing token: 403', async (t) => {
  const path = `/api/ingest/${c}/nokey/agent/heartbeat`;
  await expectRejected(t, await post(`${s.gatewayUrl}${path}`, null, {}), 403, path, /missing bearer token/);
});

t.test('unknown token: 403', async (t) => {
  const path = `/api/ingest/${c}/badkey/agent/heartbeat`;
  const row = await expectRejected(t, await post(`${s.gatewayUrl}${path}`, 'fk_doesnotexist', {}), 403, path, /invalid token/);
  t.equal(row.token_id, '');
});

t.test('token of another customer: 403, logged with the token owner', async (t) => {
  const other = await s.newCustomer('intruder');
  const path = `/api/ingest/${c}/foreign/agent/heartbeat`;
  const row = await expectRejected(t, await post(`${s.gatewayUrl}${path}`, other.token, {}), 403, path, /not authorised for customer/);
  t.equal(row.customer_id, other.customer.id);
});

t.test('revoked token: refused within 5 s on the gateway', async (t) => {
  const { id, token } = await createToken(s.pool, s.customer.id, 'to revoke');
  t.equal((await post(url('heartbeat', c, 'rev'), token, {})).status, 200);
  t.ok(await revokeToken(s.pool, id));
  const started = Date.now();
  await eventually(async () => (await post(url('heartbeat', c, 'rev-poll'), token, {})).status === 403, 5000, 'revocation effective');
  t.ok(Date.now() - started <= 5000, `refused after ${Date.now() - started} ms`);
  const path = `/api/ingest/${c}/rev/agent/heartbeat`;
  await expectRejected(t, await post(`${s.gatewayUrl}${path}`, token, {}), 403, path, /revoked/);
  await expectStored(t, 'rev', 1);
});

t.test('a token created on another replica works at once', async (t) => {
  const { token } = await createToken(s.pool, s.customer.id, 'fresh');
  t.equal((await post(url('heartbeat', c, 'fresh'), token, {})).status, 200);
  await expectStored(t, 'fresh', 1);
});

t.test('a token without the ingest scope: 403', async (t) => {
  const { token } = await createToken(s.pool, s.customer.id, 'read only', ['read']);
  const path = `/api/ingest/${c}/ro/agent/heartbeat`;
  await eventually(async () => (await post(`${s.gatewayUrl}${path}`, token, {})).status === 403);
  await expectRejected(t, await post(`${s.gatewayUrl}${path}`, token, {}), 403, path, /ingest scope/);
});

t.test('bad slugs: 400', async (t) => {
  for (const [m, sw] of [['Bad_Machine', 'agent'], ['m1', '-leading-dash'], ['x'.repeat(65), 'agent']] as const) {
    const path = `/api/ingest/${c}/${m}/${sw}/heartbeat`;
    await expectRejected(t, await post(`${s.gatewayUrl}${path}`, s.token, {}), 400, path, /invalid (machine|software) slug/);
  }
});

t.test('malformed JSON: 400', async (t) => {
  const path = `/api/ingest/${c}/m1/agent/status`;
  await expectRejected(t, await post(`${s.gatewayUrl}${path}`, s.token, '{"status": "running"'), 400, path, /malformed JSON/);
});

t.test('wrong content type: 415', async (t) => {
  const path = `/api/ingest/${c}/ct/agent/heartbeat`;
  const r = await fetch(`${s.gatewayUrl}${path}`, { method: 'POST', headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'text/plain' }, body: '{}' });
  await expectRejected(t, { status: r.status, body: await r.json() }, 415, path, /Content-Type must be application\/json/);
  const ok = await post(url('heartbeat', c, 'ct'), s.token, {}, { 'Content-Type': 'application/json; charset=utf-8' });
  t.equal(ok.status, 200, 'a charset parameter is fine');
  await expectStored(t, 'ct', 1);
});

t.test('body over the limit: 413, by Content-Length and by counting', async (t) => {
  const path = `/api/ingest/${c}/big/agent/status`;
  const big = JSON.stringify({ status: 'running', message: 'x', snapshot: { blob: 'y'.repeat(1024 * 1024) } });
  // The gateway answers 413 before reading the body and closes: read the answer as an agent's client does (fetch fails with EPIPE on a loaded machine).
  await expectRejected(t, await upload('POST', `${s.gatewayUrl}${path}`, s.token, Buffer.from(big), { 'Content-Type': 'application/json' }), 413, path, /over the limit/);
  // Chunked upload without Content-Length: the gateway counts and stops at the limit.
  const res = await new Promise<string>((resolve, reject) => {
    const sock = connect(Number(new URL(s.gatewayUrl).port), '127.0.0.1');
    let out = '';
    sock.on('data', (d) => (out += d.toString()));
    sock.on('close', () => resolve(out));
    sock.on('error', reject);
    sock.write(`POST ${path}?chunked HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
    const chunk = 'a'.repeat(64 * 1024);
    for (let i = 0; i < 20; i++) sock.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
    sock.write('0\r\n\r\n');
    setTimeout(() => sock.end(), 2000);
  });
  t.match(res, /^HTTP\/1\.1 413/);
});

t.test('schema violations: 422 with the failing paths', async (t) => {
  const cases: [string, unknown, string, RegExp][] = [
    ['diagnostics', { items: [{ code: 1, message: 'x', severity: 3 }] }, '/items/0/severity', /severity/],
    ['diagnostics', { items: [] }, '/items', /fewer than 1/],
    ['diagnostics', { items: [{ message: 'no code', severity: 1 }] }, '/items/0/code', /code/],
    ['diagnostics', { items: Array.from({ length: 1001 }, () => ({ code: 1, severity: 0 })) }, '/items', /more than 1000/],
    ['status', { status: 'exploded' }, '/status', /status/],
    ['status', { message: 'no status' }, '/status', /status/],
    ['heartbeat', { ts: 'yesterday' }, '/ts', /date-time/],
    ['heartbeat', { uptime_seconds: 'long' }, '/uptime_seconds', /integer/],
    ['heartbeat', [1, 2], '/', /object/],
  ];
  for (const [kind, body, errPath, detail] of cases) {
    const machine = `v${cases.findIndex((x) => x[1] === body)}`;
    const path = `/api/ingest/${c}/${machine}/agent/${kind}`;
    const r = await post(`${s.gatewayUrl}${path}`, s.token, body);
    await expectRejected(t, r, 422, path, detail);
    t.ok(Array.isArray(r.body.errors) && r.body.errors.some((e: { path: string }) => e.path === errPath), `errors name ${errPath}: ${JSON.stringify(r.body.errors)}`);
  }
});

t.test('snapshot deeper than 32 levels: 422', async (t) => {
  let deep: Record<string, unknown> = { leaf: 1 };
  for (let i = 0; i < 40; i++) deep = { d: deep };
  const path = `/api/ingest/${c}/deep/agent/status`;
  await expectRejected(t, await post(`${s.gatewayUrl}${path}`, s.token, { status: 'running', snapshot: deep }), 422, path, /deeper than 32/);
});

t.test('unknown endpoint 404, wrong method 405 (both logged)', async (t) => {
  const p404 = `/api/ingest/${c}/m1/agent/teleport`;
  await expectRejected(t, await post(`${s.gatewayUrl}${p404}`, s.token, {}), 404, p404, /no such endpoint/);
  const p405 = `/api/ingest/${c}/m1/agent/heartbeat`;
  const r = await get(`${s.gatewayUrl}${p405}`, s.token);
  await expectRejected(t, r, 405, p405, /not allowed/);
});

t.test('a body that does not arrive in time: 408', async (t) => {
  const g = await s.startGateway({ BODY_TIMEOUT_MS: '1000' });
  const path = `/api/ingest/${c}/slow/agent/heartbeat`;
  const res = await new Promise<string>((resolve) => {
    const sock = connect(Number(new URL(g.url).port), '127.0.0.1');
    let out = '';
    sock.on('data', (d) => (out += d.toString()));
    sock.on('close', () => resolve(out));
    sock.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"ver`);
    setTimeout(() => sock.destroy(), 5000);
  });
  t.match(res, /^HTTP\/1\.1 408/);
  await rejectionFor(path, 408);
  await g.proc.stop();
});

t.test('over the per-token rate: 429 with Retry-After', async (t) => {
  // A bucket of 5 that refills one token a second, on a new gateway: created full at the first
  // request. Each request takes one token and time only adds, so five requests one after the other
  // all pass, however slow the machine.
  const g = await s.startGateway({ RATE_LIMIT_PER_S: '1', RATE_LIMIT_BURST: '5' });
  const path = `/api/ingest/${c}/rl/agent/heartbeat`;
  for (let i = 0; i < 5; i++) t.equal((await post(`${g.url}${path}`, s.token, {})).status, 200, `request ${i + 1} of the burst passes`);
  // Over it, whatever time has passed meanwhile: one write of 6 requests that take a token each if
  // one is left (text/plain: the rate is looked at before the Content-Type, so 415 with a token,
  // 429 without), then a heartbeat. The bucket holds at most its burst of 5, and the gateway handles
  // one read's requests in one synchronous pass (no refill in between): the heartbeat finds none.
  const drain = { path: `/api/ingest/${c}/rl-drain/agent/heartbeat`, token: s.token, headers: { 'Content-Type': 'text/plain' }, body: '{}' };
  const answers = await pipelined(g.url, [...Array<typeof drain>(6).fill(drain), { path, token: s.token, body: '{}' }]);
  const drains = answers.slice(0, 6).map((a) => a.status);
  t.ok(drains.every((x) => x === 415 || x === 429) && drains.filter((x) => x === 415).length <= 5, `at most the burst got a token (${drains.join(' ')})`);
  const limited = answers[6]!;
  t.equal(limited.status, 429, 'the heartbeat over the rate: 429');
  t.match(limited.body.detail, /over the rate limit of 1 requests\/s/);
  t.equal(limited.headers.get('retry-after'), '1');
  await rejectionFor(path, 429);
  await g.proc.stop();
  await expectStored(t, 'rl', 5);
});

t.test('a flood of bad requests writes a bounded number of rejection rows, with the dropped count', async (t) => {
  const g = await s.startGateway({ REJECTION_LOG_RATE_PER_S: '2', REJECTION_LOG_BURST: '5' });
  const path = `/api/ingest/${c}/flood/agent/heartbeat`;
  const n = 300;
  for (let i = 0; i < n; i += 50) {
    const rs = await Promise.all(Array.from({ length: 50 }, () => post(`${g.url}${path}`, 'fk_flood', {})));
    t.ok(rs.every((r) => r.status === 403));
  }
  // The dropped count arrives with the next 5-second summary.
  const rows = await eventually(async () => {
    const r = await chRows<{ n: string; dropped: string }>(s.ch, `SELECT count() AS n, sum(dropped) AS dropped FROM ingest_rejections FINAL WHERE path = '${path}'`);
    return Number(r[0]!.n) + Number(r[0]!.dropped) - (Number(r[0]!.dropped) > 0 ? 1 : 0) >= n ? r[0] : null;
  }, 15_000, 'every rejection written or counted');
  t.ok(Number(rows.n) < 30, `only ${rows.n} rows for ${n} rejections`);
  t.ok(Number(rows.dropped) > n - 30, `${rows.dropped} counted as dropped`);
  await g.proc.stop();
});
