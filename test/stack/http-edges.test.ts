// The gateway's HTTP edges, attacked through a raw socket (the real uWS process): conflicting
// Content-Length (request smuggling behind a proxy), Content-Length with Transfer-Encoding,
// malformed header lines, invalid UTF-8, the wrong method; and which address the rejection log
// records behind proxies (TRUST_PROXY: the right-most untrusted X-Forwarded-For entry).
import t from 'tap';
import { connect } from 'node:net';
import { testStack, post, get, eventually, chRows, afterMarker } from '../helpers/stack.js';

const s = await testStack(t, 'edges', { api: true });
const port = Number(new URL(s.gatewayUrl).port);
const path = (machine: string) => `/api/ingest/${s.customer.slug}/${machine}/agent/heartbeat`;
const head = (machine: string, extra: string) =>
  `POST ${path(machine)} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${s.token}\r\nContent-Type: application/json\r\n${extra}`;

/** Sends raw bytes; resolves with what came back and when the connection closed (or `waitMs` passed). */
function raw(bytes: string | Buffer, waitMs = 15_000, toPort = port): Promise<{ text: string; closedAfterMs: number | null }> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    let text = '';
    const sock = connect(toPort, '127.0.0.1', () => sock.write(bytes));
    sock.on('data', (d) => (text += d));
    const timer = setTimeout(() => {
      sock.destroy();
      resolve({ text, closedAfterMs: null });
    }, waitMs);
    sock.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closedAfterMs: Date.now() - t0 });
    });
    sock.on('error', () => {});
  });
}
const stored = async (machine: string) => (await chRows(s.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine = '${machine}'`)).length;

t.test('conflicting Content-Length headers: 400 and the connection closed at once; the smuggled rest is never read', async (t) => {
  const smuggled = `${head('smuggle-b', 'Content-Length: 2\r\n\r\n')}{}`;
  const r = await raw(`${head('smuggle-a', 'Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}')}${smuggled}`);
  t.match(r.text, /^HTTP\/1\.1 400 /);
  t.match(r.text, /conflicting Content-Length headers/);
  t.ok(r.closedAfterMs !== null && r.closedAfterMs < 2000, `closed after ${r.closedAfterMs} ms`);
  t.equal((r.text.match(/HTTP\/1\.1/g) ?? []).length, 1, 'one answer: the smuggled request was not served');
  // A repeat of the same length is one length (RFC 9112 allows it).
  const same = await raw(`${head('same-length', 'Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}')}`, 3000);
  t.match(same.text, /^HTTP\/1\.1 200 /);
  await eventually(async () => (await stored('same-length')) === 1, 10_000, 'the repeated-length report stored');
  // Markers from both machines, sent after the refused connection: had the gateway queued either
  // request, it would be stored before them (afterMarker), so each query finds exactly its marker.
  await afterMarker(s, 'smuggle-a');
  await afterMarker(s, 'smuggle-b');
  t.equal(await stored('smuggle-a'), 1, 'smuggle-a: only the marker');
  t.equal(await stored('smuggle-b'), 1, 'smuggle-b: only the marker');
});

t.test('Content-Length with Transfer-Encoding: uWS closes the connection at once, with no answer; nothing stored', async (t) => {
  const r = await raw(head('clte', 'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n'));
  t.equal(r.text, '', 'no answer');
  t.ok(r.closedAfterMs !== null && r.closedAfterMs < 2000, `closed after ${r.closedAfterMs} ms`);
  // A marker from the same machine after the connection closed: had the gateway queued the request,
  // it would be stored before the marker (afterMarker), and the query would find two rows.
  await afterMarker(s, 'clte');
  t.equal(await stored('clte'), 1, 'only the marker stored');
});

t.test('malformed header lines: no answer, the connection closed by uWS within about 10 s; others are served meanwhile', async (t) => {
  const bad = {
    nul: head('nul', 'X-A: a\0b\r\nContent-Length: 2\r\n\r\n{}'),
    'bare CR': head('cr', 'X-A: a\rb\r\nContent-Length: 2\r\n\r\n{}'),
    'space in name': head('sp', 'X A: b\r\nContent-Length: 2\r\n\r\n{}'),
    'obs-fold': head('fold', 'X-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}'),
  };
  const pending = Object.entries(bad).map(async ([name, bytes]) => [name, await raw(bytes, 15_000)] as const);
  // While they hang: ordinary requests are answered at once.
  for (let i = 0; i < 20; i++) {
    const t0 = Date.now();
    t.equal((await post(`${s.gatewayUrl}${path('meanwhile')}`, s.token, {})).status, 200);
    if (Date.now() - t0 > 1000) t.fail(`a request took ${Date.now() - t0} ms`);
  }
  for (const [name, r] of await Promise.all(pending)) {
    t.notMatch(r.text, /HTTP\/1\.1 200/, `${name}: never accepted`);
    t.ok(r.closedAfterMs !== null && r.closedAfterMs <= 13_000, `${name}: closed after ${r.closedAfterMs} ms`);
  }
  // Markers from the same machines after every bad connection closed (afterMarker): only they are stored.
  for (const m of ['nul', 'cr', 'sp', 'fold']) await afterMarker(s, m);
  for (const m of ['nul', 'cr', 'sp', 'fold']) t.equal(await stored(m), 1, `${m}: only the marker stored`);
});

t.test('a JSON body that is not valid UTF-8: 400, nothing stored', async (t) => {
  const body = Buffer.concat([Buffer.from('{"version":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]);
  const r = await raw(Buffer.concat([Buffer.from(head('utf8', `Content-Length: ${body.length}\r\n\r\n`)), body]), 3000);
  t.match(r.text, /^HTTP\/1\.1 400 /);
  t.match(r.text, /"detail":"the body is not valid UTF-8"/);
  const ok = Buffer.from('{"version":"\u00e9\u{1F600}"}');
  t.match((await raw(Buffer.concat([Buffer.from(head('utf8-ok', `Content-Length: ${ok.length}\r\n\r\n`)), ok]), 3000)).text, /^HTTP\/1\.1 200 /, 'valid UTF-8 is fine');
  await eventually(async () => (await stored('utf8-ok')) === 1, 10_000);
  await afterMarker(s, 'utf8');
  t.equal(await stored('utf8'), 1, 'only the marker stored');
});

t.test('405 with Allow, from the gateway and from the api alike', async (t) => {
  const g = await fetch(`${s.gatewayUrl}${path('m')}`);
  t.equal(g.status, 405);
  t.equal(g.headers.get('allow'), 'POST');
  t.match(await g.json(), { detail: /not allowed/ });
  const a = await fetch(`${s.apiUrl}/api/instances`, { method: 'DELETE' });
  t.equal(a.status, 405);
  t.equal(a.headers.get('allow'), 'GET');
  t.equal((await get(`${s.gatewayUrl}/api/nothing-here`, null)).status, 404);
});

t.test('X-Forwarded-For: without TRUST_PROXY it is ignored; with it, the right-most untrusted entry is the client', async (t) => {
  const refuse = (url: string, xff: string, machine: string) =>
    fetch(`${url}/api/ingest/${s.customer.slug}/${machine}/agent/heartbeat`, { method: 'POST', headers: { 'Content-Type': 'text/plain', Authorization: `Bearer ${s.token}`, 'X-Forwarded-For': xff }, body: '{}' });
  const remoteOf = (machine: string) =>
    eventually(async () => (await chRows<{ remote: string }>(s.ch, `SELECT remote FROM ingest_rejections FINAL WHERE path LIKE '%/${machine}/agent/heartbeat'`))[0]?.remote, 10_000, `rejection row of ${machine}`);

  t.equal((await refuse(s.gatewayUrl, '6.6.6.6', 'xff-none')).status, 415);
  t.match(await remoteOf('xff-none'), /127\.0\.0\.1/, 'no proxy trusted: the peer');

  const hop = await s.startGateway({ TRUST_PROXY: '1' });
  t.equal((await refuse(hop.url, '6.6.6.6, 203.0.113.7', 'xff-hop')).status, 415);
  t.equal(await remoteOf('xff-hop'), '203.0.113.7', 'one hop trusted: the address the proxy saw, not what the client claimed');

  const cidr = await s.startGateway({ TRUST_PROXY: '127.0.0.0/8,10.0.0.0/8' });
  t.equal((await refuse(cidr.url, '6.6.6.6, 203.0.113.8, 10.1.2.3', 'xff-cidr')).status, 415);
  t.equal(await remoteOf('xff-cidr'), '203.0.113.8', 'trusted proxies skipped from the right');

  // The api's login limiter counts by the same address: changing the left-most entry does not help.
  const api = await s.startApi({ TRUST_PROXY: '1', LOGIN_MAX_FAILURES_PER_ADDRESS: '3', LOGIN_MAX_FAILURES_PER_ACCOUNT: '100' });
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) {
    const r = await fetch(`${api.url}/auth/login`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Forwarded-For': `192.0.2.${i}, 198.51.100.9` },
      body: JSON.stringify({ email: `nobody-${i}@example.com`, password: 'wrong password' }),
    });
    statuses.push(r.status);
  }
  t.same(statuses.slice(0, 3), [401, 401, 401]);
  t.equal(statuses[4], 429, 'the fourth address-bound failure is throttled although the claimed address changed');
  const other = await fetch(`${api.url}/auth/login`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Forwarded-For': '198.51.100.10' },
    body: JSON.stringify({ email: 'nobody@example.com', password: 'x' }),
  });
  t.equal(other.status, 401, 'another client behind the same proxy is not');
});
