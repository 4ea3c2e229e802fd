// The api's copy of who a credential is (api/principal-cache.ts, migration 0027): a request's token
// or session row comes from memory, and every change to tokens, sessions, users, memberships or
// customers empties the copy through Postgres's notice, whoever made it (here: plain SQL, as the
// CLI, another replica or an operator would). Against the real Postgres, through buildApi.
import t from 'tap';
import { injectApi } from '../helpers/api.js';
import { testStack } from '../helpers/stack.js';
import { createUser, addMembership } from '../../lib/store/accounts.js';
import { createToken } from '../../lib/store/customers.js';
import { AUTH_CHANGED_CHANNEL } from '../../lib/store/schema.js';

const s = await testStack(t, 'principals', { gateway: false, worker: false, api: false });
const app = await injectApi(t, s);
const { cache, listener } = app.principals;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await sleep(10);
  }
}
const get = (url: string, bearer: string) => app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${bearer}` } });
const status = async (url: string, bearer: string) => (await get(url, bearer)).statusCode;
/** The api's own gauge of its LISTEN connection, and its lookups by result, from /metrics. */
async function gauges(): Promise<{ listening: number; lookups: Record<string, number> }> {
  const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
  const listening = Number(/^fleet_api_principal_cache_listening(?:\{[^}]*\})? (\S+)$/m.exec(text)?.[1]);
  const lookups: Record<string, number> = {};
  for (const m of text.matchAll(/^fleet_api_principal_lookups_total\{[^}]*result="(\w+)"[^}]*\} (\S+)$/gm)) lookups[m[1]!] = Number(m[2]);
  return { listening, lookups };
}
/** A change made with the triggers switched off (this session only): no notice goes out. */
const silently = async (sql: string, values: unknown[]) => {
  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query(`SET LOCAL session_replication_role = replica`);
    await c.query(sql, values);
    await c.query('COMMIT');
  } finally {
    c.release();
  }
};

await until('the LISTEN connection is up', () => listener!.up);

const password = 'a long enough password';
async function login(email: string): Promise<string> {
  const r = await app.inject({ method: 'POST', url: '/auth/login', payload: { email, password } });
  if (r.statusCode !== 200) throw new Error(`login ${r.statusCode} ${r.body}`);
  return r.json().token as string;
}

t.test('a token is read once, served from memory, and refused once a change is notified', async (t) => {
  const { token, id } = await createToken(s.pool, s.customer.id, 'reader', ['read']);
  const m0 = (await gauges()).lookups;
  t.equal(await status('/api/instances?limit=1', token), 200);
  t.equal(await status('/api/instances?limit=1', token), 200);
  const m1 = (await gauges()).lookups;
  t.same([m1.miss! - m0.miss!, m1.hit! - m0.hit!], [1, 1], 'one miss, then a hit');
  t.ok(cache.size > 0, 'the row is kept');
  // Revoked without a notice: the copy answers, so the request really did not ask Postgres.
  await silently(`UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, [id]);
  t.equal(await status('/api/instances?limit=1', token), 200, 'served from the copy');
  // Any notice on the channel empties it; the next request reads the revocation.
  await s.pool.query(`SELECT pg_notify($1, 'test')`, [AUTH_CHANGED_CHANNEL]);
  await until('the copy emptied', () => cache.size === 0);
  const r = await get('/api/instances?limit=1', token);
  t.equal(r.statusCode, 401);
  t.same(r.json(), { detail: 'token revoked' });
});

t.test('each change that can alter a principal notifies; a use of a token does not', async (t) => {
  const { token, id } = await createToken(s.pool, s.customer.id, 'changes', ['read']);
  const other = await s.newCustomer('other');
  const user = await createUser(s.pool, { email: `changes-${s.id}@example.com`, password });
  await addMembership(s.pool, user.id, s.customer.id, 'viewer');
  const jwt = await login(user.email);
  const fill = async () => {
    t.equal(await status('/api/instances?limit=1', token), 200);
    t.equal(await status('/api/instances?limit=1', jwt), 200);
    t.ok(cache.size >= 2, 'both rows kept');
  };
  const changes: [string, string, unknown[]][] = [
    ["a token's scopes", `UPDATE api_tokens SET scopes = '{read,ingest}' WHERE id = $1`, [id]],
    ["a token's expiry", `UPDATE api_tokens SET expires_at = now() + interval '1 day' WHERE id = $1`, [id]],
    ["a customer's slug", `UPDATE customers SET slug = slug WHERE id = $1`, [s.customer.id]],
    ['a customer being deleted', `UPDATE customers SET deleting_at = NULL WHERE id = $1`, [other.customer.id]],
    ['a system administrator made', `UPDATE users SET is_system_admin = false WHERE id = $1`, [user.id]],
    ['a membership added', `INSERT INTO memberships (user_id, customer_id, role) VALUES ($1, $2, 'viewer')`, [user.id, other.customer.id]],
    ['a role changed', `UPDATE memberships SET role = 'viewer' WHERE user_id = $1`, [user.id]],
    ['a membership removed', `DELETE FROM memberships WHERE user_id = $1 AND customer_id = $2`, [user.id, other.customer.id]],
    ['a session revoked', `UPDATE sessions SET revoked_at = NULL WHERE user_id = $1`, [user.id]],
    ['a session deleted', `DELETE FROM sessions WHERE id = '00000000-0000-0000-0000-000000000000'`, []],
    ['a token deleted', `DELETE FROM api_tokens WHERE id = '00000000-0000-0000-0000-000000000000'`, []],
  ];
  for (const [what, sql, values] of changes) {
    await fill();
    await s.pool.query(sql, values);
    await until(`${what} empties the copy`, () => cache.size === 0);
    t.pass(`${what}: emptied`);
  }
  // Not changes of who calls: a use noted (every minute per token), a password hash rehashed, a
  // login's new session. Heard by a listener of the test's own: after them a notice of the test,
  // and none before it (notices arrive in commit order).
  const heard: string[] = [];
  const own = await s.pool.connect();
  t.teardown(() => own.release());
  own.on('notification', (n) => heard.push(n.payload ?? ''));
  await own.query(`LISTEN ${AUTH_CHANGED_CHANNEL}`);
  await s.pool.query(`UPDATE api_tokens SET last_used_at = now() WHERE id = $1`, [id]);
  await s.pool.query(`UPDATE users SET password_hash = password_hash WHERE id = $1`, [user.id]);
  await s.pool.query(`INSERT INTO sessions (user_id, expires_at) VALUES ($1, now() + interval '1 hour')`, [user.id]);
  await s.pool.query(`SELECT pg_notify($1, 'barrier')`, [AUTH_CHANGED_CHANNEL]);
  await until('the barrier arrives', () => heard.includes('barrier'));
  t.same(heard, ['barrier'], 'a use, a rehash and a new session notify nothing');
  // And each change above names its table (what an operator sees with LISTEN).
  await s.pool.query(`UPDATE memberships SET role = role WHERE user_id = $1`, [user.id]);
  await until('the membership notice arrives', () => heard.length === 2);
  t.equal(heard[1], 'memberships');
  await own.query(`UNLISTEN ${AUTH_CHANGED_CHANNEL}`);
});

t.test('a session revoked, a membership removed or a role changed by SQL holds within the notice', async (t) => {
  const user = await createUser(s.pool, { email: `sql-${s.id}@example.com`, password });
  await addMembership(s.pool, user.id, s.customer.id, 'admin');
  const jwt = await login(user.email);
  t.equal(await status('/api/tokens', jwt), 200, 'admin may list tokens');
  await s.pool.query(`UPDATE memberships SET role = 'viewer' WHERE user_id = $1`, [user.id]);
  await until('the role change holds', async () => (await status('/api/tokens', jwt)) === 403);
  t.equal(await status('/api/instances?limit=1', jwt), 200, 'a viewer still reads');
  await s.pool.query(`DELETE FROM memberships WHERE user_id = $1`, [user.id]);
  await until('the removal holds', async () => (await status('/api/instances?limit=1', jwt)) === 403);
  await addMembership(s.pool, user.id, s.customer.id, 'viewer');
  await until('the membership is back', async () => (await status('/api/instances?limit=1', jwt)) === 200);
  await s.pool.query(`UPDATE sessions SET revoked_at = now(), revoked_why = 'logout' WHERE user_id = $1`, [user.id]);
  await until('the revocation holds', async () => (await status('/api/instances?limit=1', jwt)) === 401);
});

t.test("this replica's own writes hold for its next request, with no wait for the notice", async (t) => {
  const admin = await createUser(s.pool, { email: `own-${s.id}@example.com`, password });
  await addMembership(s.pool, admin.id, s.customer.id, 'admin');
  const jwt = await login(admin.email);
  for (let i = 0; i < 20; i++) {
    const { token, id } = await createToken(s.pool, s.customer.id, `own-${i}`, ['read']);
    t.equal(await status('/api/instances?limit=1', token), 200);
    const del = await app.inject({ method: 'DELETE', url: `/api/tokens/${id}`, headers: { authorization: `Bearer ${jwt}` } });
    if (del.statusCode !== 200) t.fail(`revoke ${del.statusCode}`);
    const code = await status('/api/instances?limit=1', token);
    if (code !== 401) t.fail(`round ${i}: the revoked token was answered ${code}`);
  }
  const mine = await login(admin.email);
  t.equal(await status('/api/instances?limit=1', mine), 200);
  const out = await app.inject({ method: 'POST', url: '/auth/logout', headers: { authorization: `Bearer ${mine}` } });
  t.equal(out.statusCode, 200);
  t.equal(await status('/api/instances?limit=1', mine), 401, 'logged out: refused at once');
});

t.test('a refused write (a failed login) leaves the copy as it is; a successful one empties it', async (t) => {
  const { token } = await createToken(s.pool, s.customer.id, 'flood', ['read']);
  t.equal(await status('/api/instances?limit=1', token), 200);
  const kept = cache.size;
  t.ok(kept > 0);
  for (let i = 0; i < 5; i++) {
    const r = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: `nobody-${i}@example.com`, password: 'wrong password here' } });
    t.equal(r.statusCode, 401);
  }
  t.equal(cache.size, kept, 'five failed logins: nothing emptied');
  const user = await createUser(s.pool, { email: `flood-${s.id}@example.com`, password });
  await addMembership(s.pool, user.id, s.customer.id, 'viewer');
  await until('the notices of the new membership have arrived', () => cache.size === 0);
  t.equal(await status('/api/instances?limit=1', token), 200);
  t.ok(cache.size > 0);
  await login(user.email);
  t.equal(cache.size, 0, 'a login that succeeded empties it');
});

t.test('an expiry needs no notice: the kept row is judged against the clock', async (t) => {
  const { token } = await createToken(s.pool, s.customer.id, 'short', ['read'], { expiresAt: new Date(Date.now() + 1500) });
  t.equal(await status('/api/instances?limit=1', token), 200);
  t.ok(cache.size > 0);
  await until('the token expires', async () => (await status('/api/instances?limit=1', token)) === 403, 4000);
  t.ok(cache.size > 0, 'refused from the copy, which nothing emptied');
  const user = await createUser(s.pool, { email: `expiry-${s.id}@example.com`, password });
  await addMembership(s.pool, user.id, s.customer.id, 'viewer');
  const jwt = await login(user.email);
  t.equal(await status('/api/instances?limit=1', jwt), 200);
  await silently(`UPDATE sessions SET expires_at = now() + interval '300 ms' WHERE user_id = $1`, [user.id]);
  // The session's row (with its old expiry) is in the copy: the silent change is unheard, so the
  // session stays open until a notice; afterwards the new expiry is read and judged by the clock.
  await s.pool.query(`SELECT pg_notify($1, 'test')`, [AUTH_CHANGED_CHANNEL]);
  await until('the copy emptied', () => cache.size === 0);
  await until('the session expires', async () => (await status('/api/instances?limit=1', jwt)) === 401);
});

t.test('a row read while a notice arrives is not kept', async (t) => {
  // Several readers at once while changes notify: whatever the interleaving, the last answer after
  // the last change is the truth in Postgres.
  const { token, id } = await createToken(s.pool, s.customer.id, 'race', ['read']);
  for (let round = 0; round < 30; round++) {
    const readers = Array.from({ length: 8 }, () => status('/api/instances?limit=1', token));
    await s.pool.query(`UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, [id]);
    await Promise.all(readers);
    await until('revocation seen', async () => (await status('/api/instances?limit=1', token)) === 401);
    const again = await Promise.all(Array.from({ length: 4 }, () => status('/api/instances?limit=1', token)));
    if (again.some((c) => c !== 401)) t.fail(`round ${round}: revoked, then answered ${again}`);
    await s.pool.query(`UPDATE api_tokens SET revoked_at = NULL WHERE id = $1`, [id]);
    await until('unrevoked seen', async () => (await status('/api/instances?limit=1', token)) === 200);
  }
  t.pass('30 rounds');
});

t.test('while the LISTEN connection is down nothing is kept, and it comes back', async (t) => {
  const { token, id } = await createToken(s.pool, s.customer.id, 'down', ['read']);
  t.equal(await status('/api/instances?limit=1', token), 200);
  t.ok(cache.size > 0);
  const pid = listener!.pid;
  t.ok(pid, 'the listener has a backend');
  await s.pool.query('SELECT pg_terminate_backend($1)', [pid]);
  await until('the listener noticed', () => !listener!.up);
  t.equal((await gauges()).listening, 0, 'the gauge says so');
  t.equal(cache.size, 0, 'emptied: a notice may have gone unheard');
  const before = (await gauges()).lookups;
  t.notOk(cache.on);
  // While down, a change nobody hears is still seen at once: every request reads Postgres.
  await silently(`UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, [id]);
  t.equal(await status('/api/instances?limit=1', token), 401);
  t.equal(cache.size, 0, 'nothing kept while down');
  const after = (await gauges()).lookups;
  t.ok(after.off! > before.off!, `counted as off (${before.off} -> ${after.off})`);
  await until('the listener is back', () => listener!.up, 5000);
  t.equal((await gauges()).listening, 1);
  t.not(listener!.pid, pid, 'a new backend');
  const { token: fresh } = await createToken(s.pool, s.customer.id, 'back', ['read']);
  t.equal(await status('/api/instances?limit=1', fresh), 200);
  t.ok(cache.size > 0, 'kept again');
});

t.test('without the triggers (an api before the migration) the copy stays off', async (t) => {
  // Last: this removes the triggers from the file's database.
  await s.pool.query('DROP FUNCTION notify_auth_changed() CASCADE');
  await s.pool.query('SELECT pg_terminate_backend($1)', [listener!.pid]);
  await until('the listener noticed', () => !listener!.up);
  await sleep(2500); // two retries
  t.notOk(listener!.up, 'stays down while nothing would notify');
  const { token, id } = await createToken(s.pool, s.customer.id, 'no-triggers', ['read']);
  t.equal(await status('/api/instances?limit=1', token), 200);
  t.equal(cache.size, 0);
  await s.pool.query(`UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, [id]);
  t.equal(await status('/api/instances?limit=1', token), 401, 'read from Postgres at once');
});

t.test('API_PRINCIPAL_CACHE_MS=0: no copy, no LISTEN connection, the gauge at -1', async (t) => {
  const off = await injectApi(t, s, { API_PRINCIPAL_CACHE_MS: '0' });
  t.equal(off.principals.listener, null);
  const { token, id } = await createToken(s.pool, s.customer.id, 'off', ['read']);
  const ask = async () => (await off.inject({ method: 'GET', url: '/api/instances?limit=1', headers: { authorization: `Bearer ${token}` } })).statusCode;
  t.equal(await ask(), 200);
  t.equal(off.principals.cache.size, 0);
  await silently(`UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, [id]);
  t.equal(await ask(), 401, 'read from Postgres every time');
  const text = (await off.inject({ method: 'GET', url: '/metrics' })).body;
  t.match(text, /^fleet_api_principal_cache_listening(\{[^}]*\})? -1$/m);
});
