// The read API against slow clients (api/server.ts): a request whose headers or body dribble in is
// cut off at API_REQUEST_TIMEOUT_MS with a 408 while other clients are served, an idle keep-alive
// connection is closed after API_KEEPALIVE_TIMEOUT_MS, and the live stream (a response that lasts)
// outlives both the request timeout and the idle timeout. Raw sockets, against the real api process.
import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import { request } from 'node:http';
import { Agent, setGlobalDispatcher } from 'undici';
import { testStack, get } from '../helpers/stack.js';

const REQUEST_MS = 3000;
const IDLE_MS = 2000;
const KEEPALIVE_MS = 1500;
// fetch keeps idle connections for 4 s by default: one the api closed after KEEPALIVE_MS, reused by
// fetch just then, fails with "other side closed" (a race of the client's pool, seen on a loaded
// machine between the stack's start-up probes and the first login). This file's fetch lets an idle
// connection go well before the api does.
setGlobalDispatcher(new Agent({ keepAliveTimeout: 200, keepAliveMaxTimeout: 200 }));
const s = await testStack(t, 'apitimeouts', {
  gateway: false,
  worker: false,
  env: {
    API_REQUEST_TIMEOUT_MS: String(REQUEST_MS),
    API_IDLE_TIMEOUT_MS: String(IDLE_MS),
    API_KEEPALIVE_TIMEOUT_MS: String(KEEPALIVE_MS),
    // Quieter than the idle timeout: the stream must not be taken for an idle connection.
    SSE_KEEPALIVE_S: '3',
  },
});
const { hostname, port } = new URL(s.apiUrl);
// Logged in before the slow clients below: fetch keeps its connection pooled, and one the api closes
// for idleness just as fetch reuses it fails with "other side closed" (a race of the client's pool,
// not of the api).
const viewer = await s.newUser('viewer');

interface Raw {
  sock: Socket;
  received: () => string;
  closedAt: Promise<number>;
}

function raw(): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const sock = connect(Number(port), hostname, () => resolve({ sock, received: () => data, closedAt }));
    let data = '';
    sock.on('data', (d) => (data += d.toString()));
    sock.on('error', () => {});
    const closedAt = new Promise<number>((r) => sock.on('close', () => r(Date.now())));
    sock.once('error', reject);
  });
}

/** Writes `chunks` one every `everyMs` until the socket closes; resolves with how many were sent. */
async function dribble(sock: Socket, chunks: string[], everyMs: number): Promise<number> {
  let n = 0;
  for (const c of chunks) {
    if (sock.destroyed || !sock.writable) break;
    sock.write(c);
    n++;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return n;
}

/** GETs /healthz every 200 ms until `until` settles; returns the statuses and the slowest answer. */
async function othersMeanwhile(until: Promise<unknown>): Promise<{ statuses: number[]; slowestMs: number }> {
  let done = false;
  void until.finally(() => (done = true));
  const statuses: number[] = [];
  let slowestMs = 0;
  while (!done) {
    const start = Date.now();
    statuses.push((await get(`${s.apiUrl}/healthz`, null)).status);
    slowestMs = Math.max(slowestMs, Date.now() - start);
    await new Promise((r) => setTimeout(r, 200));
  }
  return { statuses, slowestMs };
}

t.test('a body dribbled in (Content-Length: 500, one byte every 500 ms) is cut off at the request timeout with 408; others are served meanwhile', async (t) => {
  const c = await raw();
  const start = Date.now();
  c.sock.write(`POST /auth/login HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{`);
  const sent = dribble(c.sock, Array(500).fill(' '), 500);
  const others = await othersMeanwhile(c.closedAt);
  const closed = (await c.closedAt) - start;
  t.ok(closed >= REQUEST_MS - 100, `not before the timeout (${closed} ms)`);
  t.ok(closed <= REQUEST_MS + 1500, `closed within the timeout plus one check interval and slack (${closed} ms)`);
  t.match(c.received(), /^HTTP\/1\.1 408 Request Timeout\r\n/);
  t.match(c.received(), /Connection: close/);
  t.match(c.received(), /\{"detail":"request headers and body not complete within 3000 ms"\}$/);
  t.ok((await sent) < 20, 'the client could not keep going');
  t.ok(others.statuses.length >= 5 && others.statuses.every((x) => x === 200), `others served meanwhile (${others.statuses.length} requests)`);
  t.ok(others.slowestMs < 1000, `promptly (slowest ${others.slowestMs} ms)`);
});

t.test('headers dribbled in are cut off the same way', async (t) => {
  const c = await raw();
  const start = Date.now();
  c.sock.write(`GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\n`);
  void dribble(c.sock, Array(200).fill('X-Slow: 1\r\n'), 400);
  const closed = (await c.closedAt) - start;
  t.ok(closed >= REQUEST_MS - 100 && closed <= REQUEST_MS + 1500, `closed at ${closed} ms`);
  t.match(c.received(), /^HTTP\/1\.1 408 /);
});

t.test('a connection that never sends a request is closed', async (t) => {
  const c = await raw();
  const start = Date.now();
  const closed = (await c.closedAt) - start;
  t.ok(closed <= REQUEST_MS + 1500, `closed after ${closed} ms`);
});

t.test('an idle keep-alive connection is closed after API_KEEPALIVE_TIMEOUT_MS; a request on time is answered', async (t) => {
  const c = await raw();
  c.sock.write(`GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`);
  while (!c.received().includes('{"ok":true}')) await new Promise((r) => setTimeout(r, 20));
  const answered = Date.now();
  await new Promise((r) => setTimeout(r, 500));
  c.sock.write(`GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`);
  await new Promise((r) => setTimeout(r, 300));
  t.equal(c.received().split('{"ok":true}').length - 1, 2, 'the second request on the connection was answered');
  const second = Date.now() - 300;
  const closed = (await c.closedAt) - second;
  // Node advertises the timeout to the client and closes its side about a second later.
  t.match(c.received(), /Keep-Alive: timeout=1\r\n/);
  t.ok(closed >= KEEPALIVE_MS - 400 && closed <= KEEPALIVE_MS + 2000, `closed ${closed} ms after the last answer`);
  t.ok(Date.now() - answered > KEEPALIVE_MS, 'the keep-alive timer restarts with each request');
});

t.test('the live stream stays open well past the request and idle timeouts', async (t) => {
  const chunks: { at: number; text: string }[] = [];
  const start = Date.now();
  const req = request(`${s.apiUrl}/api/fleet/stream`, { headers: { Authorization: `Bearer ${viewer.jwt}` } });
  let closedAt = 0;
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    req.on('response', resolve);
    req.on('error', reject);
    req.end();
  });
  t.equal(res.statusCode, 200);
  res.on('data', (d: Buffer) => chunks.push({ at: Date.now() - start, text: d.toString() }));
  res.on('close', () => (closedAt = Date.now() - start));
  const holdMs = 3 * REQUEST_MS;
  await new Promise((r) => setTimeout(r, holdMs));
  t.equal(closedAt, 0, `still open after ${holdMs} ms (request timeout ${REQUEST_MS} ms, idle timeout ${IDLE_MS} ms)`);
  const keepalives = chunks.filter((c) => c.text.includes(': keepalive')).length;
  t.ok(keepalives >= 2, `keep-alive comments kept arriving (${keepalives})`);
  req.destroy();
});
