// The account life cycle against real servers: invitations by e-mail (an SMTP server of this file's
// own receives them; the test reads the link from the message), the cross-customer takeover they
// close, sessions that end at once (logout, password change, member removal, sign-out everywhere)
// on every api replica, live streams that close within seconds when their session or token ends,
// and password resets by single-use links.
import t from 'tap';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { openStream } from '../helpers/lights.js';
import { smtpServer, linkToken } from '../helpers/smtp.js';
import { createUser, addMembership } from '../../lib/store/accounts.js';
import { createToken } from '../../lib/store/customers.js';

const smtp = await smtpServer();
t.teardown(() => smtp.close());
const s = await testStack(t, 'lifecycle', {
  gateway: false,
  worker: false,
  env: {
    ...smtp.env,
    MAIL_FROM: 'Fleet <fleet@test.example>',
    PUBLIC_DASHBOARD_URL: 'https://fleet.test.example',
    SESSION_STREAM_RECHECK_MS: '500',
  },
});
const api = (path: string, base = s.apiUrl) => `${base}${path}`;
const login = (email: string, password: string, base = s.apiUrl) => post(api('/auth/login', base), null, { email, password });
const addr = (name: string) => `${name}-${s.id}@example.com`;

t.test('the cross-customer takeover: an owner who invites an address never gets into its account', async (t) => {
  const evil = await s.newCustomer('evil');
  const victim = await s.newCustomer('victim');
  const evilOwner = await s.newUser('owner', { customer: evil.customer });
  const victimOwner = await s.newUser('owner', { customer: victim.customer });
  const cfo = addr('cfo');

  // 1. The owner of `evil` adds the address (the old route).
  const a = await post(api('/api/members'), evilOwner.jwt, { email: cfo, role: 'viewer' });
  t.equal(a.status, 202, 'an invitation is pending, nothing more');
  t.notOk('initial_password' in a.body, 'no password handed to the inviter');
  t.notOk('created_user' in a.body, 'nothing about an account');
  t.notOk(JSON.stringify(a.body).includes('user_id'), 'no user id');
  // Whatever the inviter tries, there is no account to log into.
  t.equal((await login(cfo, a.body.initial_password ?? 'a guessed password')).status, 401, 'the inviter cannot log in as the invitee');
  const first = await smtp.mailTo(cfo);
  t.match(first.subject, /^Invitation to /);

  // 2. The owner removes what they added: revoking the invitation kills its link.
  const pending = (await get(api('/api/invitations'), evilOwner.jwt)).body.items;
  t.equal(pending.length, 1);
  t.equal((await request('DELETE', api(`/api/invitations/${pending[0].id}`), evilOwner.jwt)).status, 200);
  t.equal((await post(api('/auth/invitation/accept'), null, { token: linkToken(first), password: 'evil knows this one 1' })).status, 400, 'a revoked link is dead');

  // 3. The owner of `victim` adds the same address as admin: the same answer shape, and the real person is told.
  const b = await post(api('/api/members'), victimOwner.jwt, { email: cfo, role: 'admin' });
  t.equal(b.status, 202);
  t.same(Object.keys(b.body.invitation).sort(), Object.keys(a.body.invitation).sort());
  const mail = await smtp.mailTo(cfo, 1);
  t.same(mail.to, [cfo.toLowerCase()]);
  t.match(mail.text, /https:\/\/fleet\.test\.example\/invitation#token=inv_/);

  // 4. The real person chooses their own password through the link.
  const accepted = await post(api('/auth/invitation/accept'), null, { token: linkToken(mail), password: 'cfo chooses this one' });
  t.equal(accepted.status, 200);
  t.equal(accepted.body.created_account, true);
  t.match(accepted.body.customer, { id: victim.customer.id, role: 'admin' });
  t.equal((await get(api('/api/instances'), accepted.body.token)).status, 200, 'logged in, in victim');

  // 5. The first owner still cannot log in, nor switch anywhere as the CFO.
  t.equal((await login(cfo, 'a guessed password')).status, 401);
  t.same(
    (await get(api('/api/members'), victimOwner.jwt)).body.items.map((m: any) => m.email).sort(),
    [victimOwner.email, cfo].sort(),
    'victim has its owner and the CFO, nobody else',
  );
});

t.test('the answer to an invitation never tells whether the address has an account', async (t) => {
  const c = await s.newCustomer('enum');
  const owner = await s.newUser('owner', { customer: c.customer });
  const known = await createUser(s.pool, { email: addr('known'), password: 'known user password' });
  const unknown = addr('unknown');
  const k = await post(api('/api/invitations'), owner.jwt, { email: known.email, role: 'viewer' });
  const u = await post(api('/api/invitations'), owner.jwt, { email: unknown, role: 'viewer' });
  t.equal(k.status, u.status);
  const shape = (o: any): any => (o && typeof o === 'object' ? Object.fromEntries(Object.entries(o).map(([key, v]) => [key, shape(v)])) : typeof o);
  t.same(shape(k.body), shape(u.body), 'the same body shape');
  t.notOk(JSON.stringify(k.body).includes(known.id), 'no user id');
  // Both invitees get the same kind of e-mail.
  const mk = await smtp.mailTo(known.email);
  const mu = await smtp.mailTo(unknown);
  t.equal(mk.subject, mu.subject);
  t.equal(mk.text.replace(/#token=\S+/, '').replace(/\d+/g, '0'), mu.text.replace(/#token=\S+/, '').replace(/\d+/g, '0'));
  // Already a member of this very customer: its owner sees that in the member list anyway.
  t.equal((await post(api('/api/invitations'), owner.jwt, { email: owner.email, role: 'viewer' })).status, 409);
  t.equal((await post(api('/api/invitations'), owner.jwt, { email: 'nope', role: 'viewer' })).status, 400);
  const admin = await s.newUser('admin', { customer: c.customer });
  t.equal((await post(api('/api/invitations'), admin.jwt, { email: unknown, role: 'viewer' })).status, 403, 'owners only');
});

t.test('invitations: single use, expire, resend replaces the link, German e-mail; an existing account accepts after logging in as itself', async (t) => {
  const c = await s.newCustomer('inv');
  const owner = await s.newUser('owner', { customer: c.customer });
  const mate = addr('mate');

  const r = await post(api('/api/invitations'), owner.jwt, { email: mate, role: 'viewer', lang: 'de' });
  t.equal(r.status, 202);
  t.match(r.body.invitation, { email: mate, role: 'viewer', lang: 'de', status: 'pending' });
  const mail = await smtp.mailTo(mate);
  t.match(mail.subject, /^Einladung zu /, 'German, as asked');
  t.match(mail.text, /Einladung annehmen/);
  await eventually(async () => (await get(api('/api/invitations'), owner.jwt)).body.items.find((i: any) => i.email === mate)?.mail_status === 'sent', 10_000, 'mail_status sent');
  const token = linkToken(mail);

  const info = await post(api('/auth/invitation'), null, { token });
  t.match(info.body, { email: mate, role: 'viewer', has_account: false, customer: { slug: c.customer.slug } });
  t.equal((await post(api('/auth/invitation/accept'), null, { token })).status, 400, 'a new person must choose a password');
  const weak = await post(api('/auth/invitation/accept'), null, { token, password: 'password123' });
  t.equal(weak.status, 400);
  t.match(weak.body.detail, /at least 10|common/);
  t.equal((await post(api('/auth/invitation/accept'), null, { token, password: '1234567890' })).status, 400, 'a common password is refused');
  const ok = await post(api('/auth/invitation/accept'), null, { token, password: 'mate has a good one' });
  t.equal(ok.status, 200, 'the rules allowed it; the link was still unused');
  t.equal((await post(api('/auth/invitation/accept'), null, { token, password: 'mate has a good one' })).status, 400, 'single use');
  t.equal((await post(api('/auth/invitation'), null, { token })).status, 400, 'and no longer readable');
  t.equal((await login(mate, 'mate has a good one')).status, 200);
  t.same((await get(api('/api/invitations'), owner.jwt)).body.items, [], 'nothing pending');

  // Expiry (the link's time moved into the past: the api decides by the database clock).
  const late = addr('late');
  await post(api('/api/invitations'), owner.jwt, { email: late, role: 'admin' });
  const lateToken = linkToken(await smtp.mailTo(late));
  await s.pool.query(`UPDATE invitations SET expires_at = now() - interval '1 second' WHERE lower(email) = $1`, [late.toLowerCase()]);
  t.equal((await post(api('/auth/invitation/accept'), null, { token: lateToken, password: 'late but strong pw' })).status, 400, 'expired');
  const listed = (await get(api('/api/invitations'), owner.jwt)).body.items.find((i: any) => i.email === late);
  t.equal(listed.status, 'expired', 'listed as expired');
  // Resend: a new link, the old one dead.
  const again = await post(api(`/api/invitations/${listed.id}/resend`), owner.jwt, {});
  t.equal(again.status, 202);
  t.equal(again.body.invitation.status, 'pending');
  const newToken = linkToken(await smtp.mailTo(late, 1));
  t.not(newToken, lateToken);
  t.equal((await post(api('/auth/invitation/accept'), null, { token: lateToken, password: 'late but strong pw' })).status, 400, 'the old link stays dead');
  t.equal((await post(api('/auth/invitation/accept'), null, { token: newToken, password: 'late but strong pw' })).status, 200);
  t.equal((await post(api(`/api/invitations/${listed.id}/resend`), owner.jwt, {})).status, 404, 'accepted: nothing to resend');

  // An existing account: accepted only while logged in as that account.
  const existing = await s.newUser(null);
  const other = await s.newUser(null);
  await post(api('/api/invitations'), owner.jwt, { email: existing.email, role: 'admin' });
  const exToken = linkToken(await smtp.mailTo(existing.email));
  t.equal((await post(api('/auth/invitation'), null, { token: exToken })).body.has_account, true);
  t.equal((await post(api('/auth/invitation/accept'), null, { token: exToken, password: 'trying to set one' })).status, 401, 'not logged in: log in first');
  t.equal((await post(api('/auth/invitation/accept'), other.jwt, { token: exToken })).status, 403, 'logged in as someone else');
  const acc = await post(api('/auth/invitation/accept'), existing.jwt, { token: exToken });
  t.equal(acc.status, 200);
  t.equal(acc.body.created_account, false);
  t.match(acc.body.customer, { id: c.customer.id, role: 'admin' });
  t.equal((await login(existing.email, existing.password)).status, 200, 'the password did not change');
  t.equal((await get(api('/api/tokens'), acc.body.token)).status, 200, 'admin of the customer, in the same session');

  // Revoke.
  const gone = addr('gone');
  const g = await post(api('/api/invitations'), owner.jwt, { email: gone, role: 'viewer' });
  const goneToken = linkToken(await smtp.mailTo(gone));
  t.equal((await request('DELETE', api(`/api/invitations/${g.body.invitation.id}`), owner.jwt)).status, 200);
  t.equal((await request('DELETE', api(`/api/invitations/${g.body.invitation.id}`), owner.jwt)).status, 404);
  t.equal((await post(api('/auth/invitation/accept'), null, { token: goneToken, password: 'too late for this' })).status, 400);
  t.equal((await post(api('/auth/invitation/accept'), null, { token: 'inv_' + 'x'.repeat(43), password: 'too late for this' })).status, 400);
});

t.test('logout ends the session on its replica at once, on the other within the change notice, and its live stream within seconds', async (t) => {
  const second = await s.startApi();
  const u = await s.newUser('viewer');
  const a = (await login(u.email, u.password)).body.token;
  const b = (await login(u.email, u.password)).body.token;
  const stream = await openStream(api('/api/fleet/stream'), a);
  t.equal(stream.status, 200);
  t.equal((await get(api('/api/instances', second.url), a)).status, 200, 'the session holds on the second replica');

  const out = await request('POST', api('/auth/logout'), a);
  t.equal(out.status, 200);
  t.match(out.headers.get('set-cookie') ?? '', /fleet_session=;/, 'the cookie is cleared');
  t.equal((await get(api('/api/instances'), a)).status, 401, 'refused on this replica at once');
  // The other replica answers from its copy of the session row until Postgres's notice arrives
  // (docs/api.md "Who is calling, from memory"): milliseconds; a second is the test's bound.
  const since = Date.now();
  await eventually(async () => (await get(api('/api/instances', second.url), a)).status === 401, 1000, 'refused on the other replica');
  t.pass(`and on the other one, after ${Date.now() - since} ms`);
  await eventually(async () => stream.ended, 10_000, 'the live stream closed');
  t.match(stream.raw, /event: ended/);
  t.equal((await get(api('/api/instances'), b)).status, 200, 'the other session of the same user stays');
  const again = await openStream(api('/api/fleet/stream'), a);
  t.equal(again.status, 401, 'a reconnect is refused');
  await stream.close();
});

t.test('a password change ends every other session and their streams; the rules hold', async (t) => {
  const u = await s.newUser('viewer');
  const keep = (await login(u.email, u.password)).body.token;
  const other = (await login(u.email, u.password)).body.token;
  const stream = await openStream(api('/api/fleet/stream'), other);
  const keepStream = await openStream(api('/api/fleet/stream'), keep);
  t.equal(stream.status, 200);

  t.equal((await post(api('/auth/password'), keep, { current_password: 'not the password', new_password: 'a brand new password' })).status, 403);
  const guesser = await s.newUser('viewer');
  for (let i = 0; i < 5; i++) t.equal((await post(api('/auth/password'), guesser.jwt, { current_password: `guess ${i}`, new_password: 'a brand new password' })).status, 403);
  const limited = await post(api('/auth/password'), guesser.jwt, { current_password: guesser.password, new_password: 'a brand new password' });
  t.equal(limited.status, 429, 'after 5 wrong guesses even the right one waits');
  t.ok(Number(limited.headers.get('retry-after')) > 0, 'Retry-After');
  const short = await post(api('/auth/password'), keep, { current_password: u.password, new_password: 'short' });
  t.equal(short.status, 400);
  t.match(short.body.detail, /at least 10 characters/);
  t.equal((await post(api('/auth/password'), keep, { current_password: u.password, new_password: 'qwertyuiop' })).status, 400, 'a common password');
  t.equal((await post(api('/auth/password'), keep, { current_password: u.password, new_password: u.email })).status, 400, 'the e-mail address');
  t.equal((await get(api('/api/instances'), other)).status, 200, 'refused changes end nothing');

  const ch = await post(api('/auth/password'), keep, { current_password: u.password, new_password: 'a brand new password' });
  t.equal(ch.status, 200);
  t.ok(ch.body.sessions_ended >= 2, 'the other session and the one newUser opened');
  t.equal((await get(api('/api/instances'), other)).status, 401, 'the other session ended');
  t.equal((await get(api('/api/instances'), keep)).status, 200, 'this one stays');
  await eventually(async () => stream.ended, 10_000, "the other session's stream closed");
  t.equal((await login(u.email, u.password)).status, 401, 'the old password is gone');
  t.equal((await login(u.email, 'a brand new password')).status, 200);
  // A marker: a third session's stream, ended by its logout, closes in a later check; the kept stream is still open then.
  const third = (await login(u.email, 'a brand new password')).body.token;
  const thirdStream = await openStream(api('/api/fleet/stream'), third);
  t.equal(thirdStream.status, 200);
  await request('POST', api('/auth/logout'), third);
  await eventually(async () => thirdStream.ended, 10_000, 'the marker stream closed');
  t.notOk(keepStream.ended, "the changing session's stream stays open");
  await Promise.all([stream.close(), keepStream.close(), thirdStream.close()]);
});

t.test('removing a member ends their sessions and live stream; revoking a token ends its stream', async (t) => {
  const owner = await s.newUser('owner');
  const m = await s.newUser('viewer');
  const stream = await openStream(api('/api/fleet/stream'), m.jwt);
  t.equal(stream.status, 200);
  const { id: tokenId, token } = await createToken(s.pool, s.customer.id, 'reader', ['read']);
  const tokenStream = await openStream(api('/api/fleet/stream'), token);
  t.equal(tokenStream.status, 200);

  t.equal((await request('DELETE', api(`/api/members/${m.id}`), owner.jwt)).status, 200);
  t.equal((await get(api('/auth/me'), m.jwt)).status, 401, 'the session ended at once');
  await eventually(async () => stream.ended, 10_000, "the removed member's stream closed");

  // The token's stream outlived that check; now the token goes.
  t.notOk(tokenStream.ended);
  t.equal((await request('DELETE', api(`/api/tokens/${tokenId}`), owner.jwt)).status, 200);
  await eventually(async () => tokenStream.ended, 10_000, "the revoked token's stream closed");
  await Promise.all([stream.close(), tokenStream.close()]);
});

t.test("a token's stream closes when the token expires, not only when it is revoked", async (t) => {
  const { id: tokenId, token } = await createToken(s.pool, s.customer.id, 'expiring reader', ['read']);
  await s.pool.query(`UPDATE api_tokens SET expires_at = now() + interval '3 seconds' WHERE id = $1`, [tokenId]);
  const tokenStream = await openStream(api('/api/fleet/stream'), token);
  t.equal(tokenStream.status, 200, 'open while the token is valid');
  await eventually(async () => tokenStream.ended, 15_000, "the expired token's stream closed");
  t.equal((await get(api('/api/fleet/summary'), token)).status, 403, 'and its requests are refused');
  await tokenStream.close();
});

t.test("sign out everywhere: the user's own, and a system administrator's for any user", async (t) => {
  const u = await s.newUser('viewer');
  const two = (await login(u.email, u.password)).body.token;
  const admin = await s.newUser(null, { systemAdmin: true });
  const plain = await s.newUser('owner');
  t.equal((await post(api(`/api/admin/users/${u.id}/sign-out`), plain.jwt, {})).status, 403, 'owners cannot');
  const r = await post(api(`/api/admin/users/${u.id}/sign-out`), admin.jwt, {});
  t.equal(r.status, 200);
  t.equal(r.body.sessions_ended, 2);
  t.equal((await get(api('/auth/me'), u.jwt)).status, 401);
  t.equal((await get(api('/auth/me'), two)).status, 401);
  t.equal((await post(api('/api/admin/users/00000000-0000-4000-8000-000000000000/sign-out'), admin.jwt, {})).status, 404);

  const mine = (await login(u.email, u.password)).body.token;
  const mine2 = (await login(u.email, u.password)).body.token;
  const own = await post(api('/auth/logout-everywhere'), mine, {});
  t.same(own.body, { ok: true, sessions_ended: 2 });
  t.equal((await get(api('/auth/me'), mine2)).status, 401);
});

t.test('password reset: the same answer for any address, a single-use link that expires, every session ended', async (t) => {
  const u = await s.newUser('viewer');
  const nobody = addr('nobody');
  const known = await post(api('/auth/password-reset'), null, { email: u.email.toUpperCase() });
  const unknown = await post(api('/auth/password-reset'), null, { email: nobody });
  t.equal(known.status, 202);
  t.same(known.body, unknown.body, 'the same answer whether or not the account exists');
  t.equal(unknown.status, 202);
  const mail = await smtp.mailTo(u.email);
  t.match(mail.subject, /Reset your password/);
  t.match(mail.text, /https:\/\/fleet\.test\.example\/reset-password#token=rst_/);
  const token = linkToken(mail);

  t.equal((await post(api('/auth/password-reset/confirm'), null, { token, new_password: 'abc' })).status, 400, 'the rules hold');
  const done = await post(api('/auth/password-reset/confirm'), null, { token, new_password: 'reset to this one' });
  t.equal(done.status, 200);
  t.equal(done.body.sessions_ended, 1);
  t.equal((await get(api('/auth/me'), u.jwt)).status, 401, 'the session ended');
  t.equal((await post(api('/auth/password-reset/confirm'), null, { token, new_password: 'and again to this' })).status, 400, 'single use');
  t.equal((await login(u.email, 'reset to this one')).status, 200);
  t.equal((await login(u.email, u.password)).status, 401);

  // German, by Accept-Language; and expiry.
  await request('POST', api('/auth/password-reset'), null, { email: u.email }, { 'Accept-Language': 'de-DE,de;q=0.9' });
  const de = await smtp.mailTo(u.email, 1);
  t.equal(de.subject, 'Passwort zurücksetzen');
  await s.pool.query(`UPDATE password_resets SET expires_at = now() - interval '1 second' WHERE user_id = $1 AND used_at IS NULL`, [u.id]);
  t.equal((await post(api('/auth/password-reset/confirm'), null, { token: linkToken(de), new_password: 'expired link try' })).status, 400, 'expired');

  // No e-mail for the unknown address: a marker message to a known one arrives, and none for it.
  const marker = await s.newUser(null);
  await post(api('/auth/password-reset'), null, { email: marker.email });
  await smtp.mailTo(marker.email);
  t.equal(smtp.count(nobody), 0, 'nothing was sent to an address without an account');
});

t.test('password reset: at most PASSWORD_RESET_MAX_PER_HOUR e-mails per address, the same answer beyond', async (t) => {
  const u = await s.newUser(null);
  for (let i = 0; i < 7; i++) t.equal((await post(api('/auth/password-reset'), null, { email: u.email })).status, 202);
  await smtp.mailTo(u.email, 4);
  // A marker after the limit: a reset for another address arrives; still 5 for this one.
  const marker = await s.newUser(null);
  await post(api('/auth/password-reset'), null, { email: marker.email });
  await smtp.mailTo(marker.email);
  t.equal(smtp.count(u.email), 5);
});

t.test('an account made before sessions had rows: a JWT without a session id is refused', async (t) => {
  const u = await createUser(s.pool, { email: addr('legacy'), password: 'legacy password' });
  await addMembership(s.pool, u.id, s.customer.id, 'viewer');
  const { SignJWT } = await import('jose');
  const old = await new SignJWT({ email: u.email, is_system_admin: false, cid: s.customer.id })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(u.id)
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(s.env.JWT_SECRET!));
  t.equal((await get(api('/api/instances'), old)).status, 401);
});
