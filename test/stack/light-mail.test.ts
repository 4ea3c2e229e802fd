// E-mail notifications of traffic-light changes, against the real servers and a real SMTP server of
// this file's (test/helpers/smtp.ts): subscriptions through the api, one digest per subscriber when a
// fleet turns red at once (in the subscriber's language, capped, with a working unsubscribe link),
// nothing for those without a subscription, of another customer or removed from the customer, the
// send rate and its fairness between customers, and an SMTP server that is down for a while.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, get, eventually } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { smtpServer, type ReceivedMail } from '../helpers/smtp.js';
import { encodeBatch, encodeReport, subjects } from '../../lib/contract/messages.js';
import type { Customer } from '../../lib/store/customers.js';

const DASH = 'https://fleet.test.example';
const smtp = await smtpServer();
t.teardown(() => smtp.close());
const INTERVAL_S = 3;
const RATE = 4;
const s = await testStack(t, 'lightmail', {
  env: {
    HEARTBEAT_TIMEOUT_S: '2',
    LIGHT_SWEEP_INTERVAL_MS: '500',
    ...smtp.env,
    SMTP_TIMEOUT_MS: '3000',
    PUBLIC_DASHBOARD_URL: DASH,
    MAIL_DIGEST_INTERVAL_S: String(INTERVAL_S),
    MAIL_DIGEST_TICK_MS: '200',
    MAIL_RATE_PER_S: String(RATE),
    MAIL_DIGEST_MAX_LINES: '20',
  },
});

const url = `${s.apiUrl}/api/notifications/email`;
const put = (jwt: string, body: unknown, lang = 'en') => request('PUT', url, jwt, body, { 'Accept-Language': lang });

/** Heartbeats of `machines` of `customer`, straight to the stream as a gateway would publish them, all received at `at`. */
async function heartbeats(customer: Customer, machines: string[], at = Date.now()): Promise<void> {
  const js = s.nc.jetstream();
  const reports = machines.map((m) =>
    encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: customer.id, customer: customer.slug, machine: m, software: 'agent', tokenId: randomUUID(), receivedAt: at }, null),
  );
  await js.publish(subjects(s.env.SUBJECT_PREFIX!).reports, encodeBatch(reports), { msgID: randomUUID() });
}

async function lights(customer: Customer, machines: string[]): Promise<Record<string, number>> {
  const r = await s.pool.query<{ light: string; n: number }>(
    `SELECT il.light, count(*)::int AS n FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id WHERE i.customer_id = $1 AND m.slug = ANY($2) GROUP BY 1`,
    [customer.id, machines],
  );
  return Object.fromEntries(r.rows.map((x) => [x.light, x.n]));
}

const allAre = (customer: Customer, machines: string[], light: string, ms = 20_000) =>
  eventually(async () => (await lights(customer, machines))[light] === machines.length, ms, `${machines.length} instances ${light}`);

const header = (m: ReceivedMail, name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'im').exec(m.raw.slice(0, m.raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' '))?.[1] ?? '';
const unsubscribeUrl = (m: ReceivedMail) => {
  const u = /^(https?:\/\/\S+\/unsubscribe\?token=\S+)$/m.exec(m.text)?.[1];
  if (!u) throw new Error(`no unsubscribe link in: ${m.text}`);
  return u.replace(DASH, s.apiUrl);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const fleet = Array.from({ length: 50 }, (_, i) => `red-${String(i).padStart(2, '0')}`);
const owner = await s.newUser('owner');
const en = await s.newUser('admin');
const de = await s.newUser('viewer');
const silent = await s.newUser('viewer'); // a member without a subscription
const removed = await s.newUser('viewer');
const other = await s.newCustomer('othermail');
const outsider = await s.newUser('viewer', { customer: other.customer });

t.test('subscriptions: a member sets their own; bad input 400; tokens and non-members 403', async (t) => {
  const fresh = await request('GET', url, en.jwt, undefined, { 'Accept-Language': 'de-DE,de;q=0.9' });
  t.equal(fresh.status, 200);
  t.same(fresh.body, { customer: s.customer.slug, email: en.email, kinds: [], lang: 'de', available_kinds: ['red', 'late', 'yellow', 'green', 'maintenance'], digest_interval_s: INTERVAL_S }, 'none yet: nothing mailed, the language from Accept-Language');
  for (const body of [{ kinds: ['purple'] }, { kinds: ['red', 'red'] }, { kinds: ['red'], lang: 'fr' }, { kinds: ['red', 'late', 'yellow', 'green', 'maintenance', 'red'] }, {}]) {
    const r = await put(en.jwt, body);
    t.equal(r.status, 400, `400 for ${JSON.stringify(body)}`);
    t.type(r.body.detail, 'string');
  }
  t.equal((await get(url, s.token)).status, 403, 'an API token has no e-mail');
  t.equal((await put(s.token, { kinds: ['red'] })).status, 403);
  t.equal((await get(url, null)).status, 401);
  const admin = await s.newUser(null, { systemAdmin: true });
  const sw = await request('POST', `${s.apiUrl}/api/auth/switch-customer`, admin.jwt, { customer_id: s.customer.id });
  t.equal(sw.status, 200);
  t.equal((await put(sw.body.token, { kinds: ['red'] })).status, 403, 'a system administrator acting in a customer is no member of it');

  const r = await put(en.jwt, { kinds: ['green', 'red'] });
  t.equal(r.status, 200);
  t.same(r.body.kinds, ['red', 'green']);
  t.equal(r.body.lang, 'en');
  t.same((await get(url, en.jwt)).body.kinds, ['red', 'green'], 'stored');
  t.equal((await put(de.jwt, { kinds: ['red', 'green'], lang: 'de' })).body.lang, 'de');
  t.equal((await put(removed.jwt, { kinds: ['red'] })).status, 200);
  t.equal((await put(outsider.jwt, { kinds: ['red', 'yellow', 'green'] })).status, 200, 'subscribed in their own customer');
  t.same((await get(url, outsider.jwt)).body.customer, other.customer.slug);
  const row = await s.pool.query('SELECT count(*)::int AS n FROM mail_subscriptions WHERE customer_id = $1', [s.customer.id]);
  t.equal(row.rows[0].n, 3);
});

t.test('50 instances turn red at once: one digest per subscriber, in their language; nothing for others', async (t) => {
  // A member removed after subscribing gets no more mail.
  t.equal((await request('DELETE', `${s.apiUrl}/api/members/${removed.id}`, owner.jwt)).status, 200);
  // The other customer's subscriber (every kind) must get nothing of this customer's changes.
  await heartbeats(s.customer, fleet);
  await allAre(s.customer, fleet, 'green');
  await allAre(s.customer, fleet, 'red');
  const mEn = await smtp.mailTo(en.email, 0, 20_000);
  const mDe = await smtp.mailTo(de.email, 0, 20_000);
  // Another interval and more: no second mail (all 50 changes were in the first).
  await sleep((INTERVAL_S + 2) * 1000);
  t.equal(smtp.count(en.email), 1, 'one mail for 50 changes');
  t.equal(smtp.count(de.email), 1);
  t.equal(smtp.count(silent.email), 0, 'a member without a subscription: nothing');
  t.equal(smtp.count(removed.email), 0, 'a removed member: nothing');
  t.equal(smtp.count(outsider.email), 0, "another customer's subscriber: nothing");
  t.equal(smtp.count(owner.email), 0);

  t.match(mEn.subject, `${s.customer.slug}: 50 turned red`);
  t.match(mEn.text, /50 changes: 50 turned red/);
  t.equal((mEn.text.match(/^red-\d\d \/ agent +green -> red /gm) ?? []).length, 20, 'the first 20 changes listed (MAIL_DIGEST_MAX_LINES)');
  t.match(mEn.text, /… and 30 more/);
  t.match(mEn.text, `${DASH}/?light=red`);
  t.match(header(mEn, 'List-Unsubscribe'), new RegExp(`^<${DASH}/unsubscribe\\?token=[A-Za-z0-9_-]+>$`));
  t.match(header(mEn, 'Message-ID'), /^<digest\.[0-9a-f]{32}@fleet\.test\.example>$/);
  t.match(mDe.subject, `${s.customer.slug}: 50 auf Rot`);
  t.match(mDe.text, /50 Änderungen: 50 auf Rot/);
  t.match(mDe.text, /^red-\d\d \/ agent +grün -> rot /m);
  t.match(mDe.text, /… und 30 weitere/);
  t.match(mDe.text, /Abbestellen:/);
  t.not(unsubscribeUrl(mEn), unsubscribeUrl(mDe), 'a link per subscription');

  const waiting = await s.pool.query('SELECT count(*)::int AS n FROM mail_pending WHERE sent_at IS NULL');
  t.equal(waiting.rows[0].n, 0, 'nothing waits');
  const sent = await s.pool.query('SELECT user_id, count(*)::int AS n FROM mail_pending GROUP BY 1');
  t.same(Object.fromEntries(sent.rows.map((r) => [r.user_id, r.n])), { [en.id]: 50, [de.id]: 50 }, 'each change queued once per subscriber, none for the removed member');
});

t.test('the unsubscribe link works without login, once and again; a bad token is 400', async (t) => {
  const link = unsubscribeUrl(await smtp.mailTo(en.email));
  const r = await fetch(link);
  t.equal(r.status, 200);
  t.match(r.headers.get('content-type'), /text\/html/);
  const page = await r.text();
  t.match(page, 'Unsubscribed');
  t.match(page, en.email);
  t.equal((await fetch(link)).status, 200, 'again: the same answer');
  t.same((await get(url, en.jwt)).body.kinds, [], 'the subscription is off');
  for (const bad of [link.replace(/token=.*/, 'token=not-a-token'), `${s.apiUrl}/unsubscribe`, `${s.apiUrl}/unsubscribe?token=`]) {
    const b = await get(bad, null);
    t.equal(b.status, 400, bad);
    t.type(b.body.detail, 'string');
  }

  // The fleet recovers, and turns red again after HEARTBEAT_TIMEOUT_S (2 s), within one digest
  // interval (3 s): the German subscriber (red and recovered) gets both in one mail; the
  // unsubscribed one gets nothing.
  await heartbeats(s.customer, fleet);
  await allAre(s.customer, fleet, 'green');
  await allAre(s.customer, fleet, 'red');
  const m = await smtp.mailTo(de.email, 1, 20_000);
  t.match(m.subject, `${s.customer.slug}: 50 auf Rot, 50 wieder grün`);
  t.match(m.text, /100 Änderungen/);
  t.match(m.text, /^red-\d\d \/ agent +rot -> grün /m);
  t.match(m.text, /… und 80 weitere/);
  await sleep((INTERVAL_S + 2) * 1000);
  t.equal(smtp.count(en.email), 1, 'no mail after unsubscribing');
  t.equal(smtp.count(de.email), 2);
});

t.test('SMTP down for a while: the digest is sent when it is back, not lost, not doubled', async (t) => {
  await smtp.down();
  const before = smtp.count(de.email);
  // Green, and red again 2 s later: 100 changes for the German subscriber.
  await heartbeats(s.customer, fleet);
  await allAre(s.customer, fleet, 'green');
  await allAre(s.customer, fleet, 'red');
  // The digest was due and failed: the failure is recorded, the changes wait.
  await eventually(async () => (await s.pool.query('SELECT failures FROM mail_subscriptions WHERE user_id = $1', [de.id])).rows[0].failures >= 1, 20_000, 'a failed send');
  const waiting = await s.pool.query('SELECT count(*)::int AS n FROM mail_pending WHERE user_id = $1 AND sent_at IS NULL', [de.id]);
  t.equal(waiting.rows[0].n, 100, 'the 100 changes wait');
  await sleep(2000);
  t.equal(smtp.count(de.email), before, 'nothing while it is down');
  await smtp.up();
  const m = await smtp.mailTo(de.email, before, 30_000);
  t.match(m.subject, '50 auf Rot, 50 wieder grün');
  t.match(m.text, /… und 80 weitere/);
  await sleep((INTERVAL_S + 2) * 1000);
  t.equal(smtp.count(de.email), before + 1, 'exactly one digest after the outage');
  const row = await s.pool.query('SELECT failures, retry_at FROM mail_subscriptions WHERE user_id = $1', [de.id]);
  t.same(row.rows[0], { failures: 0, retry_at: null }, 'the failures are forgotten once it went out');
});

t.test('the send rate holds, and a customer with many subscribers does not hold back another', async (t) => {
  const busy = await s.newCustomer('busymail');
  const quiet = await s.newCustomer('quietmail');
  const many: Awaited<ReturnType<typeof s.newUser>>[] = [];
  for (let i = 0; i < 12; i++) many.push(await s.newUser('viewer', { customer: busy.customer }));
  const one = await s.newUser('viewer', { customer: quiet.customer });
  for (const u of [...many, one]) t.equal((await put(u.jwt, { kinds: ['red'] })).status, 200);
  const start = smtp.received.length;
  const at = Date.now();
  await heartbeats(busy.customer, ['b1', 'b2', 'b3'], at);
  await heartbeats(quiet.customer, ['q1'], at);
  await allAre(busy.customer, ['b1', 'b2', 'b3'], 'red');
  await allAre(quiet.customer, ['q1'], 'red');
  const mails = await eventually(async () => {
    const got = smtp.received.slice(start).filter((m) => [...many, one].some((u) => m.to.includes(u.email)));
    return got.length >= 13 ? got : null;
  }, 30_000, '13 mails');
  await sleep(2000);
  t.equal(smtp.received.slice(start).length, 13, 'one mail per subscriber');
  const times = mails.map((m) => m.at).sort((a, b) => a - b);
  // At most RATE sends per second (one more across the boundary of two runs).
  for (let i = 0; i < times.length; i++) {
    const inWindow = times.filter((x) => x >= times[i]! && x < times[i]! + 1000).length;
    t.ok(inWindow <= RATE + 1, `${inWindow} mails within a second from mail ${i + 1}`);
  }
  t.ok(times.at(-1)! - times[0]! >= ((13 - RATE - 1) / RATE) * 1000, `13 mails spread over ${times.at(-1)! - times[0]!} ms`);
  const quietAt = mails.findIndex((m) => m.to.includes(one.email));
  t.ok(quietAt >= 0 && quietAt < RATE + 2, `the quiet customer's subscriber is among the first (#${quietAt + 1} of 13)`);
});

t.test('a member removed while changes wait for the digest: no mail, the subscription and its changes are gone', async (t) => {
  const c = await s.newCustomer('leavermail');
  const leaver = await s.newUser('viewer', { customer: c.customer });
  t.equal((await put(leaver.jwt, { kinds: ['red'] })).status, 200);
  await heartbeats(c.customer, ['l1', 'l2']);
  await allAre(c.customer, ['l1', 'l2'], 'red');
  // Queued (the digest waits MAIL_DIGEST_INTERVAL_S), then the membership ends.
  await eventually(async () => (await s.pool.query('SELECT count(*)::int AS n FROM mail_pending WHERE user_id = $1 AND sent_at IS NULL', [leaver.id])).rows[0].n === 2, 5000, 'both changes wait');
  await s.pool.query('DELETE FROM memberships WHERE user_id = $1 AND customer_id = $2', [leaver.id, c.customer.id]);
  await eventually(async () => (await s.pool.query('SELECT 1 FROM mail_subscriptions WHERE user_id = $1', [leaver.id])).rowCount === 0, 20_000, 'the subscription deleted at send time');
  t.equal((await s.pool.query('SELECT count(*)::int AS n FROM mail_pending WHERE user_id = $1', [leaver.id])).rows[0].n, 0, 'its changes with it');
  await sleep(1000);
  t.equal(smtp.count(leaver.email), 0, 'no mail');
});
