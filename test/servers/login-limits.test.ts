// Login against brute force (api/login-guard.ts), against the real api process. Every attempt is
// counted in Redis before its password is hashed, so concurrent guesses cannot outrun the counter;
// the limits fall on the (account, client address) pair and on the address (an IPv6 /64), so an
// attacker locks only themselves out; the account as a whole is slowed down (not locked) for
// clients that never logged in to it before; and an api process hashes a bounded number of
// passwords at once, answering 503 with Retry-After beyond its queue instead of queueing hundreds.
//
// The apis here trust loopback as their proxy, so X-Forwarded-For chooses the client address of
// each request (docs/operations.md "Behind a proxy").
import t from 'tap';
import { testStack, post } from '../helpers/stack.js';
import { createUser } from '../../lib/store/accounts.js';
import type { Answer } from '../helpers/http.js';

const s = await testStack(t, 'loginlim', { gateway: false, worker: false, api: false });
// The account slow-down starts after 5 failures and waits 300 s: long enough that no assertion
// below depends on how fast this machine hashes.
// 6 failures per address (20 by default), so that reaching it costs few password checks.
const PER_ADDRESS = 6;
const api = await s.startApi({ TRUST_PROXY: 'loopback', LOGIN_MAX_FAILURES_PER_ADDRESS: String(PER_ADDRESS), LOGIN_ACCOUNT_SLOWDOWN_AFTER: '5', LOGIN_ACCOUNT_DELAY_S: '300', LOGIN_ACCOUNT_DELAY_MAX_S: '300' });

function login(url: string, body: Record<string, string>, from: string, cookie?: string): Promise<Answer> {
  return post(`${url}/auth/login`, null, body, { 'X-Forwarded-For': from, ...(cookie ? { Cookie: cookie } : {}) });
}

let n = 0;
async function owner(): Promise<{ email: string; username: string; password: string }> {
  const k = ++n;
  const u = { email: `owner${k}-${s.id}@example.com`, username: `owner${k}-${s.id}`, password: `the owner's password ${k}` };
  await createUser(s.pool, u);
  return u;
}

const statuses = (rs: Answer[]) => rs.reduce<Record<number, number>>((m, r) => ({ ...m, [r.status]: (m[r.status] ?? 0) + 1 }), {});

/** The device cookie a successful login set (`fleet_device=…`), for the Cookie header. */
function deviceCookie(r: Answer): string {
  const c = r.headers.getSetCookie().find((x) => x.startsWith('fleet_device='));
  if (!c) throw new Error(`no device cookie in ${JSON.stringify(r.headers.getSetCookie())}`);
  return c.split(';')[0]!;
}

t.test('50 concurrent wrong passwords from one address: at most 5 answered 401, the rest 429', async (t) => {
  const u = await owner();
  const rs = await Promise.all(Array.from({ length: 50 }, () => login(api.url, { email: u.email, password: 'a wrong guess' }, '203.0.113.10')));
  const by = statuses(rs);
  t.comment(`answers: ${JSON.stringify(by)}`);
  t.ok((by[401] ?? 0) <= 5, `at most 5 guesses were checked (${by[401] ?? 0})`);
  t.equal((by[401] ?? 0) + (by[429] ?? 0), 50, 'every other attempt was refused before its hash');
  const limited = rs.filter((r) => r.status === 429);
  t.ok(limited.every((r) => Number(r.headers.get('retry-after')) >= 1), 'each 429 with Retry-After');
  t.ok(limited.every((r) => /too many failed logins for this account from your address/.test(r.body.detail)), 'and a detail naming the limit');
  // E-mail address and user name are one account: the other spelling gets no fresh five.
  const byName = await login(api.url, { username: u.username, password: 'another guess' }, '203.0.113.10');
  t.equal(byName.status, 429, 'the user name is counted with the e-mail address');
});

t.test('an attacker from one address cannot lock the owner out from another', async (t) => {
  const u = await owner();
  for (let i = 0; i < 30; i++) {
    const r = await login(api.url, { email: i % 2 ? u.email : u.username.toUpperCase(), password: `guess ${i}` }, '203.0.113.20');
    t.equal(r.status, i < 5 ? 401 : 429, `attempt ${i + 1}`);
  }
  const there = await login(api.url, { email: u.email, password: u.password }, '203.0.113.20');
  t.equal(there.status, 429, 'from the attacking address, even the right password waits');
  const ok = await login(api.url, { email: u.email, password: u.password }, '198.51.100.20');
  t.equal(ok.status, 200, 'the owner logs in from another address');
  t.ok(ok.body.token, 'with a session');
});

t.test('many addresses against one account: slowed down for new clients, not for the browser the owner logged in with', async (t) => {
  const u = await owner();
  const first = await login(api.url, { email: u.email, password: u.password }, '198.51.100.30');
  t.equal(first.status, 200);
  const cookie = deviceCookie(first);
  t.match(first.headers.getSetCookie().find((c) => c.startsWith('fleet_device='))!, /HttpOnly/i, 'the device cookie is HttpOnly');

  // 12 addresses, one guess each: no address and no pair reaches its limit, the account does.
  const rs: Answer[] = [];
  for (let i = 0; i < 12; i++) rs.push(await login(api.url, { email: u.email, password: `guess ${i}` }, `192.0.2.${100 + i}`));
  t.same(rs.map((r) => r.status), [401, 401, 401, 401, 401, 401, 429, 429, 429, 429, 429, 429], 'five failures, one more attempt, then one attempt per 300 s');
  const slowed = rs[11]!;
  t.ok(Number(slowed.headers.get('retry-after')) > 0 && Number(slowed.headers.get('retry-after')) <= 300, `Retry-After within the slow-down (${slowed.headers.get('retry-after')})`);
  t.match(slowed.body.detail, /slowed down/);

  const newClient = await login(api.url, { email: u.email, password: u.password }, '198.51.100.31');
  t.equal(newClient.status, 429, 'a client that never logged in to the account waits its turn');
  const known = await login(api.url, { email: u.email, password: u.password }, '198.51.100.31', cookie);
  t.equal(known.status, 200, 'the browser that logged in before is not slowed down');

  // The cookie is the account's: it does not speed up guesses on another account.
  const v = await owner();
  for (let i = 0; i < 6; i++) await login(api.url, { email: v.email, password: `guess ${i}` }, `192.0.2.${150 + i}`);
  const foreign = await login(api.url, { email: v.email, password: 'guess with a cookie' }, '192.0.2.160', cookie);
  t.equal(foreign.status, 429, "another account's device cookie counts as none");
  const forged = await login(api.url, { email: u.email, password: u.password }, '198.51.100.32', `${cookie.slice(0, -4)}AAAA`);
  t.equal(forged.status, 429, 'a tampered device cookie counts as none');
});

t.test('IPv6 addresses count by their /64; IPv4-mapped addresses as the IPv4 address', async (t) => {
  const base = '2001:db8:77:1';
  const rs: Answer[] = [];
  for (let i = 1; i <= PER_ADDRESS; i++) rs.push(await login(api.url, { email: `nobody${i}-${s.id}@example.com`, password: 'x' }, `${base}:${i.toString(16)}:0:0:${i.toString(16)}`));
  t.same(rs.map((r) => r.status), rs.map(() => 401), `${PER_ADDRESS} failures from ${PER_ADDRESS} addresses of one /64`);
  const sameNet = await login(api.url, { email: `nobody-more-${s.id}@example.com`, password: 'x' }, `${base}:ffff:ffff:ffff:ffff`);
  t.equal(sameNet.status, 429, 'the next from anywhere in the /64 is refused');
  t.match(sameNet.body.detail, /too many failed logins from your address/);
  const nextNet = await login(api.url, { email: `nobody-more-${s.id}@example.com`, password: 'x' }, '2001:db8:77:2::1');
  t.equal(nextNet.status, 401, 'the neighbouring /64 is another client');

  for (let i = 0; i < PER_ADDRESS; i++) {
    t.equal((await login(api.url, { email: `v4-${i}-${s.id}@example.com`, password: 'x' }, i % 2 ? '198.51.100.77' : '::ffff:198.51.100.77')).status, 401);
  }
  const mapped = await login(api.url, { email: `v4-more-${s.id}@example.com`, password: 'x' }, '::ffff:c633:644d');
  t.equal(mapped.status, 429, '::ffff:198.51.100.77 in any spelling is 198.51.100.77');
  t.equal((await login(api.url, { email: `v4-more-${s.id}@example.com`, password: 'x' }, '198.51.100.78')).status, 401, 'its neighbour is not');
});

t.test('a burst of logins: the right password is checked behind at most the bounded queue, or answered 503 with Retry-After', async (t) => {
  // One password check at a time and 3 waiting; the limits per address and account are not what
  // stops this burst (every attempt comes from its own address, for its own account).
  const C = 1;
  const Q = 3;
  const small = await s.startApi({ TRUST_PROXY: 'loopback', LOGIN_HASH_CONCURRENCY: String(C), LOGIN_HASH_QUEUE: String(Q) });
  const u = await owner();
  let answered401 = 0;
  let firstBusy!: () => void;
  const busy = new Promise<void>((r) => (firstBusy = r));
  const burst = Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      login(small.url, { email: `burst${i}-${s.id}@example.com`, password: 'wrong' }, `10.77.${i >> 8}.${i & 255}`).then((r) => {
        if (r.status === 401) answered401++;
        if (r.status === 503) firstBusy();
        return r;
      }),
    ),
  );
  await busy; // the queue is full now
  const before = answered401;
  const mine = await login(small.url, { email: u.email, password: u.password }, '198.51.100.40');
  const during = answered401 - before;
  if (mine.status === 200) {
    // FIFO: ahead of it at most C checking and Q − 1 waiting, plus one answer that may have been on its way back when it was sent.
    t.ok(during <= C + Q, `checked behind ${during} other attempts (bound ${C + Q})`);
  } else {
    t.equal(mine.status, 503, 'or refused at once');
    t.ok(Number(mine.headers.get('retry-after')) >= 1, 'with Retry-After');
  }
  const rs = await burst;
  const by = statuses(rs);
  t.comment(`burst answers: ${JSON.stringify(by)}; the right password: ${mine.status} after ${during} other checks`);
  t.same(Object.keys(by).sort(), ['401', '503'], 'every attempt was checked (401) or refused at once (503)');
  const refused = rs.filter((r) => r.status === 503);
  t.ok(refused.every((r) => Number(r.headers.get('retry-after')) >= 1), 'each 503 with Retry-After');
  t.ok(refused.every((r) => /login busy/.test(r.body.detail)), 'saying why');
  // A refused attempt is not counted: the address of a 503 holds no failure.
  const refusedAt = rs.findIndex((r) => r.status === 503);
  const count = await s.redis.get(`${s.env.REDIS_PREFIX}login:addr:10.77.${refusedAt >> 8}.${refusedAt & 255}`);
  t.equal(Number(count ?? 0), 0, 'no count for an attempt answered 503');
  const again = await login(small.url, { email: u.email, password: u.password }, '198.51.100.41');
  t.equal(again.status, 200, 'the burst is over: the right password logs in');
  await small.proc.stop();
});
