// Dashboard login: e-mail or user name, scrypt hashes, a JWT with the decided claims (also as an
// HttpOnly SameSite cookie), rate-limited failures, and role checks against the route table.
import t from 'tap';
import { testStack, post, get } from '../helpers/stack.js';
import { createUser, DuplicateUserError, addMembership } from '../../lib/store/accounts.js';
import { createToken } from '../../lib/store/customers.js';

const s = await testStack(t, 'auth', { gateway: false, worker: false });
const login = (body: unknown, headers: Record<string, string> = {}) => post(`${s.apiUrl}/auth/login`, null, body, headers);

function claims(jwt: string) {
  return JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString());
}

t.test('login by e-mail (any case) and by user name; JWT claims', async (t) => {
  const u = await createUser(s.pool, { email: 'Ada@Example.com', username: 'ada', password: 'correct horse' });
  await addMembership(s.pool, u.id, s.customer.id, 'admin');
  const a = await login({ email: 'ada@example.COM', password: 'correct horse' });
  t.equal(a.status, 200);
  t.equal(a.body.token_type, 'Bearer');
  t.match(a.body.user, { id: u.id, email: 'Ada@Example.com', username: 'ada', is_system_admin: false });
  t.match(a.body.customer, { id: s.customer.id, slug: s.customer.slug, role: 'admin' });
  const c = claims(a.body.token);
  t.match(c, { sub: u.id, email: 'Ada@Example.com', is_system_admin: false, cid: s.customer.id });
  t.ok(c.exp > Date.now() / 1000 + 3600, 'expires in the future');
  const cookie = a.headers.get('set-cookie') ?? '';
  t.match(cookie, /fleet_session=/);
  t.match(cookie, /HttpOnly/i);
  t.match(cookie, /SameSite=Lax/i);

  const b = await login({ username: 'ADA', password: 'correct horse' });
  t.equal(b.status, 200, 'user name, case-insensitive');
  const c2 = await login({ login: 'ada', password: 'correct horse' });
  t.equal(c2.status, 200, 'generic login field');
});

t.test('duplicate e-mail in another case is refused', async (t) => {
  await createUser(s.pool, { email: 'dup@example.com', password: 'password1' });
  await t.rejects(createUser(s.pool, { email: 'DUP@example.com', password: 'password2' }), DuplicateUserError);
  await t.rejects(createUser(s.pool, { email: 'not-an-address', password: 'password2' }), /invalid e-mail/);
});

t.test('wrong password and unknown account: the same 401', async (t) => {
  await createUser(s.pool, { email: 'bob@example.com', password: 'bobs password' });
  const w = await login({ email: 'bob@example.com', password: 'nope' });
  t.equal(w.status, 401);
  t.type(w.body.detail, 'string');
  const u = await login({ email: 'nobody@example.com', password: 'nope' });
  t.equal(u.status, 401);
  t.equal(u.body.detail, w.body.detail);
  t.equal((await login({ password: 'x' })).status, 400);
  t.equal((await login({ email: 'bob@example.com' })).status, 400, 'password required');
});

// The X-Forwarded-For entries are not trusted here (no TRUST_PROXY): all five come from one address.
t.test('failed logins are rate-limited per account and address, then even the right password waits', async (t) => {
  await createUser(s.pool, { email: 'carol@example.com', password: 'carols password' });
  for (let i = 0; i < 5; i++) t.equal((await login({ email: 'carol@example.com', password: 'bad' }, { 'X-Forwarded-For': `10.0.0.${i}` })).status, 401);
  const r = await login({ email: 'carol@example.com', password: 'carols password' });
  t.equal(r.status, 429);
  t.ok(Number(r.headers.get('retry-after')) > 0);
  t.match(r.body.detail, /too many failed logins/);
});

t.test('failed logins are rate-limited per address across accounts', async (t) => {
  const api = await s.startApi({ LOGIN_MAX_FAILURES_PER_ADDRESS: '3', REDIS_PREFIX: `${s.env.REDIS_PREFIX}addr:` });
  for (let i = 0; i < 3; i++) t.equal((await post(`${api.url}/auth/login`, null, { email: `x${i}@example.com`, password: 'bad' })).status, 401);
  const r = await post(`${api.url}/auth/login`, null, { email: 'other@example.com', password: 'bad' });
  t.equal(r.status, 429);
  await api.proc.stop();
});

t.test('the session works as bearer and as cookie; logout clears the cookie', async (t) => {
  const u = await s.newUser('viewer');
  t.equal((await get(`${s.apiUrl}/api/instances`, u.jwt)).status, 200, 'bearer');
  const viaCookie = await fetch(`${s.apiUrl}/api/instances`, { headers: { Cookie: `fleet_session=${u.jwt}` } });
  t.equal(viaCookie.status, 200, 'cookie');
  const out = await post(`${s.apiUrl}/auth/logout`, null, {});
  t.equal(out.status, 200);
  t.match(out.headers.get('set-cookie') ?? '', /fleet_session=;/);
});

t.test('tampered, foreign and expired sessions: 401', async (t) => {
  const u = await s.newUser('viewer');
  const [h, p, sig] = u.jwt.split('.');
  const forged = Buffer.from(JSON.stringify({ ...claims(u.jwt), is_system_admin: true })).toString('base64url');
  t.equal((await get(`${s.apiUrl}/api/instances`, `${h}.${forged}.${sig}`)).status, 401, 'tampered payload');
  t.equal((await get(`${s.apiUrl}/api/instances`, `${h}.${p}.${sig}x`)).status, 401, 'bad signature');
  const other = await s.startApi({ JWT_SECRET: 'another-secret-another-secret-00' });
  t.equal((await get(`${other.url}/api/instances`, u.jwt)).status, 401, 'signed with another key');
  await other.proc.stop();
  const short = await s.startApi({ JWT_TTL_S: '1' });
  const r = await post(`${short.url}/auth/login`, null, { email: u.email, password: u.password });
  await new Promise((res) => setTimeout(res, 2100));
  t.equal((await get(`${short.url}/api/instances`, r.body.token)).status, 401, 'expired');
  await short.proc.stop();
});

t.test('roles: a user without a membership, a token without read scope', async (t) => {
  const loner = await s.newUser(null);
  const r = await get(`${s.apiUrl}/api/instances`, loner.jwt);
  t.equal(r.status, 403);
  t.match(r.body.detail, /no active customer/);
  const { token } = await createToken(s.pool, s.customer.id, 'ingest only', ['ingest']);
  const t2 = await get(`${s.apiUrl}/api/instances`, token);
  t.equal(t2.status, 403);
  t.match(t2.body.detail, /read scope/);
  const removed = await s.newUser('viewer');
  await s.pool.query('DELETE FROM memberships WHERE user_id = $1', [removed.id]);
  t.equal((await get(`${s.apiUrl}/api/instances`, removed.jwt)).status, 403, 'a removed membership takes effect at once');
});
