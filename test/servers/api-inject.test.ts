// The api in-process: buildApi() over this file's own Postgres and ClickHouse databases, requests
// through Fastify's inject (no port, no process). The middle layer between the unit tests and the
// tests that start processes: routes, validation, typed handlers, rules next to the data.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';
import { injectApi } from '../helpers/api.js';
import { createUser, addMembership } from '../../lib/store/accounts.js';

const s = await testStack(t, 'inject', { gateway: false, worker: false, api: false });
const app = await injectApi(t, s);

const password = 'a long enough password';
const owner = await createUser(s.pool, { email: `owner-${s.id}@example.com`, password });
await addMembership(s.pool, owner.id, s.customer.id, 'owner');
const login = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: `owner-${s.id}@example.com`, password } });
const jwt = login.json().token as string;
const auth = { authorization: `Bearer ${jwt}` };

t.test('login and a typed, validated query', async (t) => {
  t.equal(login.statusCode, 200);
  const list = await app.inject({ method: 'GET', url: '/api/instances?limit=5', headers: auth });
  t.equal(list.statusCode, 200);
  t.same(list.json(), { items: [], total: 0, next: null });
  const bad = await app.inject({ method: 'GET', url: '/api/instances?limit=-1', headers: auth });
  t.equal(bad.statusCode, 400);
  t.match(bad.json(), { detail: /limit/ });
  const unauth = await app.inject({ method: 'GET', url: '/api/instances' });
  t.equal(unauth.statusCode, 401);
});

t.test('404 for an id of no one, and 405 with Allow from the route table', async (t) => {
  const r = await app.inject({ method: 'GET', url: `/api/instances/${randomUUID()}`, headers: auth });
  t.equal(r.statusCode, 404);
  t.same(r.json(), { detail: 'no such instance' });
  const m = await app.inject({ method: 'PATCH', url: '/api/instances', headers: auth });
  t.equal(m.statusCode, 405);
  t.equal(m.headers.allow, 'GET');
});

t.test('the last owner cannot be demoted or removed; with a second owner it can', async (t) => {
  const demote = await app.inject({ method: 'PUT', url: `/api/members/${owner.id}`, headers: auth, payload: { role: 'viewer' } });
  t.equal(demote.statusCode, 409);
  t.match(demote.json(), { detail: /last owner cannot be demoted/ });
  const remove = await app.inject({ method: 'DELETE', url: `/api/members/${owner.id}`, headers: auth });
  t.equal(remove.statusCode, 409);
  const second = await createUser(s.pool, { email: `second-${s.id}@example.com`, password });
  await addMembership(s.pool, second.id, s.customer.id, 'owner');
  const stranger = await app.inject({ method: 'PUT', url: `/api/members/${randomUUID()}`, headers: auth, payload: { role: 'admin' } });
  t.equal(stranger.statusCode, 404, 'not a member: 404');
  const ok = await app.inject({ method: 'PUT', url: `/api/members/${owner.id}`, headers: auth, payload: { role: 'admin' } });
  t.equal(ok.statusCode, 200);
  t.equal(ok.json().role, 'admin');
});

t.test("a command's args that Postgres cannot store (NUL in a key or a value) are refused with 422 and the path", async (t) => {
  for (const [args, path] of [
    [{ 'k\u0000': 1 }, '/args/k\u0000'],
    [{ k: 'v\u0000' }, '/args/k'],
    [{ k: ['\ud800'] }, '/args/k/0'],
  ] as const) {
    const r = await app.inject({ method: 'POST', url: `/api/instances/${randomUUID()}/commands`, headers: auth, payload: { module: 'm', command: 'c', args } });
    t.equal(r.statusCode, 422, JSON.stringify(args));
    t.same(r.json().errors?.map((e: { path: string }) => e.path), [path]);
  }
});
