// Dashboard accounts beyond login: /auth/me with conversions, the customer switcher, members,
// API tokens in Settings -> Tokens (revocation on the gateway), onboarding progress.
import t from 'tap';
import { createHash } from 'node:crypto';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { createUser, addMembership } from '../../lib/store/accounts.js';
import { hashToken } from '../../lib/contract/ids.js';

const s = await testStack(t, 'accounts');
const api = (path: string) => `${s.apiUrl}${path}`;
const ingest = (slug: string, m: string, kind = 'heartbeat') => s.ingestUrl(m, kind, { customer: slug });
const claims = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString());


t.test('/auth/me: user, customers with roles, active customer, email_sha256, conversions listed then acked twice', async (t) => {
  const other = await s.newCustomer('me-other');
  const u = await createUser(s.pool, { email: '  Grace.Hopper@Example.com ', username: 'grace', password: 'grace password' });
  await addMembership(s.pool, u.id, s.customer.id, 'owner');
  await addMembership(s.pool, u.id, other.customer.id, 'viewer');
  const login = await post(api('/auth/login'), null, { email: 'grace.hopper@example.com', password: 'grace password' });
  t.equal(login.status, 200);
  const jwt = login.body.token;

  // The customer's first machine is a conversion for its members.
  t.equal((await post(ingest(s.customer.slug, 'first-box'), s.token, {})).status, 200);
  const me = await eventually(async () => {
    const r = await get(api('/auth/me'), jwt);
    return r.body.pending_conversions?.some((c: any) => c.kind === 'first_device') ? r : null;
  }, 10_000, 'first_device conversion');
  t.equal(me.status, 200);
  t.match(me.body.user, { id: u.id, email: 'Grace.Hopper@Example.com', username: 'grace', is_system_admin: false });
  t.equal(me.body.email_sha256, createHash('sha256').update('grace.hopper@example.com').digest('hex'), 'SHA-256 of the trimmed, lower-cased e-mail');
  t.equal(me.body.is_system_admin, false);
  t.same(
    me.body.customers.map((c: any) => [c.slug, c.role]).sort(),
    [
      [other.customer.slug, 'viewer'],
      [s.customer.slug, 'owner'],
    ].sort(),
  );
  t.match(me.body.active_customer, { id: s.customer.id, slug: s.customer.slug, role: 'owner', member: true });
  const kinds = me.body.pending_conversions.map((c: any) => c.kind).sort();
  t.same(kinds, ['first_device', 'signup']);
  const fd = me.body.pending_conversions.find((c: any) => c.kind === 'first_device');
  t.match(fd, { customer_id: s.customer.id, customer: s.customer.slug, value: { machine: 'first-box' } });

  const ids = me.body.pending_conversions.map((c: any) => c.id);
  const a1 = await post(api('/auth/conversions/ack'), jwt, { ids });
  t.same(a1.body, { ok: true, acked: 2 });
  const a2 = await post(api('/auth/conversions/ack'), jwt, { ids });
  t.equal(a2.status, 200, 'a second ack is fine');
  t.same(a2.body, { ok: true, acked: 0 }, 'and changes nothing');
  t.same((await get(api('/auth/me'), jwt)).body.pending_conversions, [], 'nothing pending any more');
  t.equal((await post(api('/auth/conversions/ack'), jwt, { ids: ['not-a-uuid'] })).status, 400);
  t.equal((await post(api('/auth/conversions/ack'), jwt, { ids: [] })).status, 400);

  // Someone else's conversion cannot be acked by this user.
  const stranger = await s.newUser(null);
  const sc = (await get(api('/auth/me'), stranger.jwt)).body.pending_conversions;
  t.equal(sc.length, 1, "the stranger's signup");
  t.same((await post(api('/auth/conversions/ack'), jwt, { ids: [sc[0].id] })).body, { ok: true, acked: 0 });
  t.equal((await get(api('/auth/me'), stranger.jwt)).body.pending_conversions.length, 1, 'still pending for its owner');

  t.equal((await get(api('/auth/me'), null)).status, 401);
  t.equal((await get(api('/auth/me'), s.token)).status, 403, 'an API token is not a dashboard user');
});

t.test('switch-customer: members switch, a foreign customer is 403, a system admin may switch anywhere', async (t) => {
  const b = await s.newCustomer('sw-b');
  const foreign = await s.newCustomer('sw-foreign');
  const u = await s.newUser('admin');
  await addMembership(s.pool, u.id, b.customer.id, 'viewer');
  t.equal((await post(ingest(b.customer.slug, 'b-box'), b.token, {})).status, 200);

  const mine = await get(api('/api/auth/my-customers'), u.jwt);
  t.equal(mine.status, 200);
  t.same(mine.body.items.map((c: any) => `${c.slug}:${c.role}:${c.member}`).sort(), [`${b.customer.slug}:viewer:true`, `${s.customer.slug}:admin:true`].sort());
  t.equal(mine.body.active_customer_id, s.customer.id);

  const sw = await post(api('/api/auth/switch-customer'), u.jwt, { customer_id: b.customer.id });
  t.equal(sw.status, 200);
  t.match(sw.body.customer, { id: b.customer.id, slug: b.customer.slug, role: 'viewer' });
  t.match(claims(sw.body.token), { sub: u.id, email: u.email, is_system_admin: false, cid: b.customer.id });
  t.match(sw.headers.get('set-cookie') ?? '', /fleet_session=.*HttpOnly/i, 'the cookie is replaced');
  const list = await eventually(async () => {
    const r = await get(api('/api/instances'), sw.body.token);
    return r.body.items?.length ? r.body : null;
  });
  t.same(list.items.map((i: any) => i.machine), ['b-box'], 'the new session sees the other customer');
  t.equal((await get(api('/api/tokens'), sw.body.token)).status, 403, 'with the role it has there (viewer)');
  t.equal((await post(api('/api/auth/switch-customer'), u.jwt, { customer: b.customer.slug })).status, 200, 'by slug too');

  const f = await post(api('/api/auth/switch-customer'), u.jwt, { customer_id: foreign.customer.id });
  t.equal(f.status, 403, 'a customer the user does not belong to');
  t.match(f.body.detail, /not a member/);
  const g = await post(api('/api/auth/switch-customer'), u.jwt, { customer_id: '00000000-0000-4000-8000-000000000000' });
  t.equal(g.status, 403, 'an unknown customer looks the same (no probing)');
  t.equal((await post(api('/api/auth/switch-customer'), u.jwt, {})).status, 400);

  const admin = await s.newUser(null, { systemAdmin: true });
  t.match(claims(admin.jwt), { is_system_admin: true, cid: null });
  const any = await post(api('/api/auth/switch-customer'), admin.jwt, { customer_id: foreign.customer.id });
  t.equal(any.status, 200, 'a system admin may switch to any customer');
  t.match(any.body.customer, { id: foreign.customer.id, role: 'owner' });
  t.match(claims(any.body.token), { is_system_admin: true, cid: foreign.customer.id });
  t.equal((await get(api('/api/tokens'), any.body.token)).status, 200, 'and acts with owner rights there');
  const all = await get(api('/api/auth/my-customers'), any.body.token);
  t.ok(all.body.items.some((c: any) => c.id === foreign.customer.id && c.member === false), 'every customer is listed for a system admin');
  t.equal((await post(api('/api/auth/switch-customer'), admin.jwt, { customer_id: '00000000-0000-4000-8000-000000000000' })).status, 404);
  t.equal((await post(api('/api/auth/switch-customer'), s.token, { customer_id: b.customer.id })).status, 403, 'not for API tokens');
});

t.test('members: the owner lists, invites, changes roles and removes; the last owner stays', async (t) => {
  const c = await s.newCustomer('members');
  const owner = await s.newUser('owner', { customer: c.customer });
  const admin = await s.newUser('admin', { customer: c.customer });
  // New sessions land in the oldest membership: these users have only this one.
  const list = await get(api('/api/members'), owner.jwt);
  t.equal(list.status, 200);
  t.same(list.body.items.map((m: any) => [m.email, m.role]), [
    [owner.email, 'owner'],
    [admin.email, 'admin'],
  ]);
  t.equal((await get(api('/api/members'), admin.jwt)).status, 403, 'an admin cannot manage members');

  // Inviting creates no account and hands out no password (test/stack/account-lifecycle.test.ts follows the e-mail).
  const invited = await post(api('/api/members'), owner.jwt, { email: `New.Mate-${s.id}@example.com`, role: 'viewer' });
  t.equal(invited.status, 202);
  t.match(invited.body.invitation, { email: `New.Mate-${s.id}@example.com`, role: 'viewer', status: 'pending' });
  t.notOk('initial_password' in invited.body);
  t.equal((await s.pool.query('SELECT 1 FROM users WHERE lower(email) = $1', [`new.mate-${s.id}@example.com`])).rowCount, 0, 'no account made');

  // A member the CLI added (fleet user add-to-customer) is managed here like any other.
  const existing = await s.newUser(null);
  await addMembership(s.pool, existing.id, c.customer.id, 'admin');
  const relogin = await post(api('/auth/login'), null, { email: existing.email, password: existing.password });
  t.equal(relogin.body.customer.id, c.customer.id, 'the added user lands in the customer');
  const existingJwt = relogin.body.token;
  t.equal((await get(api('/api/instances'), existingJwt)).status, 200);
  t.equal((await post(api('/api/members'), owner.jwt, { email: existing.email.toUpperCase(), role: 'viewer' })).status, 409, 'already a member');
  t.equal((await post(api('/api/members'), owner.jwt, { email: 'not-an-address', role: 'viewer' })).status, 400);
  t.equal((await post(api('/api/members'), owner.jwt, { email: 'x@example.com', role: 'god' })).status, 400);

  const upd = await request('PUT', api(`/api/members/${existing.id}`), owner.jwt, { role: 'viewer' });
  t.equal(upd.status, 200);
  t.equal(upd.body.role, 'viewer');
  const demote = await request('PUT', api(`/api/members/${owner.id}`), owner.jwt, { role: 'admin' });
  t.equal(demote.status, 409, 'the last owner cannot be demoted');
  t.equal((await request('DELETE', api(`/api/members/${owner.id}`), owner.jwt)).status, 409, 'nor removed');
  t.equal((await request('PUT', api(`/api/members/${admin.id}`), owner.jwt, { role: 'owner' })).status, 200, 'a second owner');
  t.equal((await request('PUT', api(`/api/members/${owner.id}`), owner.jwt, { role: 'admin' })).status, 200, 'now the first may step down');

  const rm = await request('DELETE', api(`/api/members/${existing.id}`), admin.jwt);
  t.equal(rm.status, 200, 'the new owner removes a member');
  t.equal((await get(api('/api/instances'), existingJwt)).status, 401, 'who loses access at once: their sessions ended');
  t.equal((await request('DELETE', api(`/api/members/${existing.id}`), admin.jwt)).status, 404, 'removing again: 404');
  t.equal((await request('DELETE', api('/api/members/nope'), admin.jwt)).status, 400);
  const outsider = await s.newUser('owner');
  t.equal((await request('PUT', api(`/api/members/${outsider.id}`), admin.jwt, { role: 'viewer' })).status, 404, "another customer's member: 404");
});

t.test('tokens: create (shown once, hashed at rest), list, revoke; ingest refused within 5 s of the revocation', async (t) => {
  const admin = await s.newUser('admin');
  const viewer = await s.newUser('viewer');
  const created = await post(api('/api/tokens'), admin.jwt, { name: 'line 7', scopes: ['ingest'] });
  t.equal(created.status, 201);
  t.match(created.body, { name: 'line 7', scopes: ['ingest'], revoked_at: null });
  t.match(created.body.token, /^fk_/);
  const token = created.body.token;
  t.ok(token.startsWith(created.body.prefix));
  const row = await s.pool.query('SELECT token_hash FROM api_tokens WHERE id = $1', [created.body.id]);
  t.equal(row.rows[0].token_hash, hashToken(token), 'only the SHA-256 is stored');

  const list = await get(api('/api/tokens'), admin.jwt);
  t.equal(list.status, 200);
  t.ok(list.body.items.some((x: any) => x.id === created.body.id), 'listed');
  t.notOk(JSON.stringify(list.body).includes(token), 'never with its value');

  const url = ingest(s.customer.slug, 'tok-box');
  t.equal((await post(url, token, {})).status, 200, 'the new token ingests at once');
  t.equal((await get(api('/api/instances'), token)).status, 403, 'an ingest-only token cannot read');
  const reader = await post(api('/api/tokens'), admin.jwt, { name: 'grafana', scopes: ['read'] });
  t.equal((await get(api('/api/instances'), reader.body.token)).status, 200, 'a read token can');
  t.equal((await post(url, reader.body.token, {})).status, 403, 'but not ingest');
  t.same((await post(api('/api/tokens'), admin.jwt, {})).body.scopes, ['ingest'], 'default scope: ingest');

  const revokedAt = Date.now();
  const rev = await request('DELETE', api(`/api/tokens/${created.body.id}`), admin.jwt);
  t.equal(rev.status, 200);
  t.ok(rev.body.revoked_at);
  await eventually(async () => (await post(url, token, {})).status === 403, 5000, 'revoked token refused by the gateway within 5 s');
  t.ok(Date.now() - revokedAt < 5000, `refused ${Date.now() - revokedAt} ms after the revocation`);
  const again = await request('DELETE', api(`/api/tokens/${created.body.id}`), admin.jwt);
  t.equal(again.status, 200, 'revoking again is harmless');
  t.equal(again.body.revoked_at, rev.body.revoked_at, 'and keeps the first revocation time');

  t.equal((await post(api('/api/tokens'), viewer.jwt, { name: 'nope' })).status, 403, 'a viewer cannot create a token');
  t.equal((await get(api('/api/tokens'), viewer.jwt)).status, 403, 'nor list them');
  t.equal((await request('DELETE', api(`/api/tokens/${reader.body.id}`), viewer.jwt)).status, 403, 'nor revoke');
  t.equal((await post(api('/api/tokens'), reader.body.token, {})).status, 403, 'nor can a read token');
  t.equal((await post(api('/api/tokens'), admin.jwt, { scopes: ['root'] })).status, 400);
  t.equal((await post(api('/api/tokens'), admin.jwt, { scopes: [] })).status, 400);
  t.equal((await request('DELETE', api('/api/tokens/xyz'), admin.jwt)).status, 400);
  t.equal((await request('DELETE', api('/api/tokens/00000000-0000-4000-8000-000000000000'), admin.jwt)).status, 404);
});

t.test('onboarding: the steps tick as reports arrive', async (t) => {
  const c = await s.newCustomer('onboard');
  const owner = await s.newUser('owner', { customer: c.customer });
  const status = async () => (await get(api('/api/onboarding/status'), owner.jwt)).body;
  const first = await status();
  t.same(
    first.steps.map((x: any) => x.key),
    ['token_created', 'first_heartbeat', 'first_diagnostics', 'first_status', 'help_texts', 'teammate_invited'],
    'ordered steps',
  );
  t.same(first.steps.map((x: any) => x.done), [true, false, false, false, false, false], 'the customer was created with a token');
  t.match(first, { done: 1, total: 6, percent: 17, complete: false });
  t.ok(first.steps[0].done_at);
  t.equal(first.steps[1].done_at, null);

  const step = (key: string) => eventually(async () => (await status()).steps.find((x: any) => x.key === key && x.done), 10_000, key);
  const before = Date.now() - 1000;
  t.equal((await post(ingest(c.customer.slug, 'ob-1'), c.token, {})).status, 200);
  const hb = await step('first_heartbeat');
  t.ok(Date.parse(hb.done_at) >= before, 'done_at is the receive time');
  t.ok([200, 202].includes((await post(ingest(c.customer.slug, 'ob-1', 'diagnostics'), c.token, { items: [{ code: 1, severity: 0 }] })).status), 'diagnostics accepted (202: no help text yet)');
  await step('first_diagnostics');
  t.equal((await post(ingest(c.customer.slug, 'ob-1', 'status'), c.token, { status: 'running' })).status, 200);
  await step('first_status');
  t.equal((await post(api('/api/invitations'), owner.jwt, { email: `mate-${s.id}@example.com`, role: 'viewer' })).status, 202);
  await step('teammate_invited');
  // Help texts: recorded when a `help` report is applied (the help ingest of the diagnostics
  // suite), or found in its help_texts table when that exists.
  await s.pool.query(`INSERT INTO onboarding_milestones (customer_id, step, done_at) VALUES ($1, 'help', now())`, [c.customer.id]);
  await step('help_texts');
  const last = await status();
  t.match(last, { done: 6, total: 6, progress: 1, percent: 100, complete: true });
  const other = await status();
  t.same(other, last, 'stable');
});
