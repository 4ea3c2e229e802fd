// Webhooks: managed by admins through the api; on each change to or from red a signed POST,
// retried with exponential backoff until the receiver takes it; failures visible through the api.
// The receivers listen on 127.0.0.1, which the egress policy refuses unless allowed: this stack
// allows it (WEBHOOK_ALLOW_CIDRS), as an on-premises installation would its own receivers; what is
// refused without that is test/stack/webhook-egress.test.ts.
import t from 'tap';
import { Webhook } from 'standardwebhooks';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { stored } from '../helpers/lights.js';
import { verifyWebhook } from '../../lib/domain/webhook-signature.js';

// One delivery at a time (WEBHOOK_CONCURRENCY=1): the worker takes the BullMQ jobs in the order they
// were queued and finishes each before the next, so a receiver gets the events of a webhook in queue
// order. That is what lets a later event serve as the marker for an absence: whatever was queued
// before it has been POSTed (or skipped) by the time the later event arrives.
const s = await testStack(t, 'hooks', {
  env: { HEARTBEAT_TIMEOUT_S: '2', WEBHOOK_BACKOFF_MS: '200', WEBHOOK_ATTEMPTS: '4', WEBHOOK_CONCURRENCY: '1', LIGHT_SWEEP_INTERVAL_MS: '1000', WEBHOOK_ALLOW_CIDRS: '127.0.0.1/32' },
});
const ingest = (m: string, kind: string) => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/${m}/agent/${kind}`;
const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');
const other = await s.newCustomer('other');

interface Received {
  at: number;
  headers: IncomingMessage['headers'];
  body: string;
  answered: number;
}

/** A receiver that answers `plan[n]` to its n-th request (the last entry from then on). */
async function receiver(plan: number[], o: { host?: string; headers?: Record<string, string> } = {}): Promise<{ url: string; got: Received[]; server: Server }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const answered = plan[Math.min(got.length, plan.length - 1)]!;
      got.push({ at: Date.now(), headers: req.headers, body, answered });
      res.writeHead(answered, { 'Content-Type': 'text/plain', ...o.headers }).end(answered === 200 ? 'ok' : 'not now');
    });
  });
  const host = o.host ?? '127.0.0.1';
  await new Promise<void>((r) => server.listen(0, host, r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://${host}:${(server.address() as AddressInfo).port}/hook`, got, server };
}

const flaky = await receiver([500, 500, 200]);
const broken = await receiver([500]);
let hookId = '';
let secret = '';
let brokenId = '';

t.test('create, list: admin only; bad input 400; the secret shown once', async (t) => {
  t.equal((await post(`${s.apiUrl}/api/webhooks`, viewer.jwt, { url: flaky.url })).status, 403, 'viewer may not create');
  t.equal((await get(`${s.apiUrl}/api/webhooks`, viewer.jwt)).status, 403, 'viewer may not list');
  t.equal((await get(`${s.apiUrl}/api/webhooks`, s.token)).status, 403, 'an API token is a viewer');
  t.equal((await post(`${s.apiUrl}/api/webhooks`, null, { url: flaky.url })).status, 401);
  for (const body of [{ url: 'ftp://example.com/x' }, { url: 'not a url' }, { url: 'http://u:p@example.com/' }, { url: flaky.url, secret: 'short' }, { url: flaky.url, secret: 'whsec_not base64 at all!!' }, {}]) {
    const r = await post(`${s.apiUrl}/api/webhooks`, admin.jwt, body);
    t.equal(r.status, 400, `400 for ${JSON.stringify(body)}`);
    t.type(r.body.detail, 'string');
  }
  const r = await post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url: flaky.url, description: 'on-call' });
  t.equal(r.status, 201);
  t.match(r.body, { url: flaky.url, description: 'on-call', consecutive_failures: 0, last_error: null });
  t.match(r.body.secret, /^whsec_/);
  hookId = r.body.id;
  secret = r.body.secret;
  const b = await post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url: broken.url, secret: 'a-secret-of-my-own-choosing' });
  t.equal(b.status, 201);
  t.equal(b.body.secret, 'a-secret-of-my-own-choosing');
  brokenId = b.body.id;
  const list = await get(`${s.apiUrl}/api/webhooks`, admin.jwt);
  t.equal(list.status, 200);
  t.same(list.body.items.map((w: { id: string }) => w.id).sort(), [hookId, brokenId].sort());
  t.notOk(list.body.items.some((w: { secret?: string }) => 'secret' in w), 'never the secrets again');
  t.same((await get(`${s.apiUrl}/api/webhooks`, (await s.newUser('admin', { customer: other.customer })).jwt)).body.items, [], 'another customer sees none');
});

t.test('to red: a receiver that fails twice gets the event on the third attempt, signed', async (t) => {
  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  await eventually(async () => (await stored(s, 'm1'))?.light === 'green', 5000, 'green');
  await eventually(async () => (await stored(s, 'm1'))?.light === 'red', 8000, 'red');
  await eventually(async () => flaky.got.length >= 3, 15_000, 'three attempts');
  const [a, b, c] = flaky.got;
  // grey -> green is not a webhook event. The marker is green -> red: had grey -> green been queued,
  // it would have been queued first (the heartbeat's message is acked only after its light events
  // are handed to the webhook queue, and red waits for the horizon to pass that message), and with
  // one delivery at a time it would have been the receiver's first request.
  const firstId = (await stored(s, 'm1'))!.id;
  t.equal(a!.headers['x-fleet-event-id'], `${firstId}.2`, 'grey -> green is not a webhook event: the first request is green -> red (seq 2)');
  t.same([a!.answered, b!.answered, c!.answered], [500, 500, 200]);
  t.same([a, b, c].map((x) => x!.headers['x-fleet-delivery-attempt']), ['1', '2', '3']);
  // Exponential backoff from 200 ms: at least 200 ms, then at least 400 ms (lower bounds only: a
  // loaded machine may add to either).
  t.ok(b!.at - a!.at >= 180 && c!.at - b!.at >= 380, `backoff grows: ${b!.at - a!.at} ms, then ${c!.at - b!.at} ms`);
  for (const x of [a, b, c]) {
    t.ok(verifyWebhook(secret, String(x!.headers['x-fleet-timestamp']), x!.body, String(x!.headers['x-fleet-signature'])), 'signature verifies');
    // The Standard Webhooks signature, checked by its reference library with the secret as given.
    t.doesNotThrow(() => new Webhook(secret).verify(x!.body, x!.headers as Record<string, string>), 'Standard Webhooks signature verifies');
    t.equal(x!.headers['webhook-timestamp'], x!.headers['x-fleet-timestamp']);
  }
  t.same([a, b, c].map((x) => x!.headers['webhook-id']), [c!.headers['x-fleet-event-id'], c!.headers['x-fleet-event-id'], c!.headers['x-fleet-event-id']], 'webhook-id: the event id, the same on every retry');
  t.throws(() => new Webhook('whsec_' + Buffer.alloc(32, 1).toString('base64')).verify(c!.body, c!.headers as Record<string, string>), 'not with another secret (Standard Webhooks)');
  t.notOk(verifyWebhook('whsec_wrong', String(c!.headers['x-fleet-timestamp']), c!.body, String(c!.headers['x-fleet-signature'])), 'not with another secret');
  t.notOk(verifyWebhook(secret, String(c!.headers['x-fleet-timestamp']), c!.body.replace('red', 'rot'), String(c!.headers['x-fleet-signature'])), 'not for another body');
  const body = JSON.parse(c!.body);
  const id = (await stored(s, 'm1'))!.id;
  t.match(body, { type: 'light.changed', id: `${id}.2`, instance_id: id, customer: s.customer.slug, machine: 'm1', software: 'agent', from: 'green', to: 'red', seq: 2 });
  t.equal(c!.headers['x-fleet-event-id'], `${id}.2`);
  t.match(c!.headers['content-type'], /application\/json/);

  const d = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/webhooks/${hookId}/deliveries`, admin.jwt);
    return r.body.items?.[0]?.state === 'delivered' ? r.body.items : null;
  }, 5000, 'delivery recorded');
  t.equal(d.length, 1);
  t.match(d[0], { event_id: `${id}.2`, instance_id: id, from: 'green', to: 'red', state: 'delivered', attempts: 3, last_status: 200, next_attempt_at: null });
  const hooks = (await get(`${s.apiUrl}/api/webhooks`, admin.jwt)).body.items;
  const h = hooks.find((w: { id: string }) => w.id === hookId);
  t.match(h, { consecutive_failures: 0, last_error: 'HTTP 500' });
  t.ok(h.last_success_at && h.last_failure_at, 'last success and last failure shown');
});

t.test('a receiver that keeps failing: the delivery is marked failed after WEBHOOK_ATTEMPTS, visible through the api', async (t) => {
  const d = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/webhooks/${brokenId}/deliveries?state=failed`, admin.jwt);
    return r.body.items?.length === 1 ? r.body.items : null;
  }, 15_000, 'failed delivery');
  t.match(d[0], { to: 'red', state: 'failed', attempts: 4, last_status: 500, last_error: 'HTTP 500', delivered_at: null, next_attempt_at: null });
  t.equal(broken.got.length, 4, 'exactly WEBHOOK_ATTEMPTS attempts');
  // A secret chosen at creation is the HMAC key as it is: the libraries' "raw" format.
  const x = broken.got[0]!;
  t.doesNotThrow(() => new Webhook('a-secret-of-my-own-choosing', { format: 'raw' }).verify(x.body, x.headers as Record<string, string>), 'raw secret verifies');
  const h = (await get(`${s.apiUrl}/api/webhooks`, admin.jwt)).body.items.find((w: { id: string }) => w.id === brokenId);
  t.match(h, { consecutive_failures: 4, last_error: 'HTTP 500', last_success_at: null });
  t.equal((await get(`${s.apiUrl}/api/webhooks/${brokenId}/deliveries?state=delivered`, admin.jwt)).body.items.length, 0);
  t.equal((await get(`${s.apiUrl}/api/webhooks/${brokenId}/deliveries?state=bogus`, admin.jwt)).status, 400);
});

/** The light events a receiver got, as `seq:from>to`, in the order they arrived. */
const eventsOf = (r: { got: Received[] }) => r.got.map((x) => JSON.parse(x.body) as { seq: number; from: string; to: string }).map((e) => `${e.seq}:${e.from}>${e.to}`);
const outboxRows = async (instanceId: string) => (await s.pool.query(`SELECT count(*)::int AS n FROM light_outbox_changes WHERE instance_id = $1`, [instanceId])).rows[0].n as number;

t.test('from red: green again is delivered too, once', async (t) => {
  const id = (await stored(s, 'm1'))!.id;
  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  await eventually(async () => flaky.got.length >= 4, 10_000, 'the red -> green delivery');
  t.match(JSON.parse(flaky.got[3]!.body), { from: 'red', to: 'green', seq: 3 });
  // Once. An event is handed to the webhook queue before its outbox row is deleted, and nothing
  // else queues it (workers/traffic-light.ts): with m1's outbox empty, every copy of seq 3 that
  // will ever be queued is queued. The marker is an event queued after that: m1 falls silent (red,
  // seq 4), then a heartbeat turns it green (seq 5). With one delivery at a time in queue order, a
  // second delivery of seq 3 would have reached the receiver before seq 5.
  await eventually(async () => (await outboxRows(id)) === 0, 10_000, "m1's outbox empty");
  await eventually(async () => (await stored(s, 'm1'))?.light === 'red', 8000, 'red again (seq 4)');
  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  await eventually(async () => eventsOf(flaky).includes('5:red>green'), 10_000, 'the marker: seq 5 delivered');
  const got = eventsOf(flaky);
  t.same(got.slice(3, got.indexOf('5:red>green') + 1), ['3:red>green', '4:green>red', '5:red>green'], 'red -> green (seq 3) delivered once, then the next two changes');
});

t.test("another customer's admin: 404 on this customer's webhooks; delete", async (t) => {
  const otherAdmin = await s.newUser('admin', { customer: other.customer });
  t.equal((await get(`${s.apiUrl}/api/webhooks/${hookId}/deliveries`, otherAdmin.jwt)).status, 404);
  const del = (id: string, jwt: string) => request('DELETE', `${s.apiUrl}/api/webhooks/${id}`, jwt);
  t.equal((await del(hookId, otherAdmin.jwt)).status, 404);
  t.equal((await del('not-a-uuid', admin.jwt)).status, 400);
  t.equal((await del(hookId, viewer.jwt)).status, 403);
  t.equal((await del(hookId, admin.jwt)).status, 204);
  t.equal((await del(hookId, admin.jwt)).status, 404);
  t.equal((await del(brokenId, admin.jwt)).status, 204);
  t.same((await get(`${s.apiUrl}/api/webhooks`, admin.jwt)).body.items, []);
  // No webhook, no delivery: m1 turns green and red again and nothing arrives. (With a 2 s timeout,
  // m1 may have turned red around the deletes: such an event may still be the webhook's to deliver.
  // Counted from the changes recorded once m1 is red after the deletes: seq > after.)
  await eventually(async () => (await stored(s, 'm1'))?.light === 'red', 8000, 'red after the deletes');
  const { id, light_seq: after } = (await stored(s, 'm1'))!;
  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  await eventually(async () => (await stored(s, 'm1'))?.light_seq === after + 2, 10_000, 'green, then red again, after the deletes');
  // The marker: a webhook created once those two changes are queued (or not) for the webhooks
  // (m1's outbox empty), and the change after them delivered to it. Had either change been queued
  // for a deleted webhook, it would have been queued before the marker's event, and with one
  // delivery at a time the deleted webhook's receiver would have got it first.
  await eventually(async () => (await outboxRows(id)) === 0, 10_000, "m1's outbox empty");
  const marker = await receiver([200]);
  t.equal((await post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url: marker.url })).status, 201);
  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  await eventually(async () => marker.got.length >= 1, 10_000, 'the marker: the next change delivered to a new webhook');
  t.match(JSON.parse(marker.got[0]!.body), { seq: after + 3, from: 'red', to: 'green' }, 'the marker is the change after the two');
  const late = eventsOf(flaky).filter((e) => Number(e.split(':')[0]) > after);
  t.same(late, [], 'nothing delivered for changes after the deletes');
});

t.test('a redirect is not followed, not even to an address the allow list leaves out: HTTP 302, and the target sees nothing', async (t) => {
  // 127.0.0.2 is loopback too, but outside WEBHOOK_ALLOW_CIDRS=127.0.0.1/32.
  const target = await receiver([200], { host: '127.0.0.2' });
  const redirecting = await receiver([302], { headers: { Location: target.url } });
  const c = await s.newCustomer('redir');
  const cAdmin = await s.newUser('admin', { customer: c.customer });
  t.equal((await post(`${s.apiUrl}/api/webhooks`, cAdmin.jwt, { url: target.url })).status, 400, 'the target itself may not be registered');
  const h = await post(`${s.apiUrl}/api/webhooks`, cAdmin.jwt, { url: redirecting.url });
  t.equal(h.status, 201);
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${c.customer.slug}/r1/agent/heartbeat`, c.token, {})).status, 200);
  const d = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/webhooks/${h.body.id}/deliveries?state=failed`, cAdmin.jwt);
    return r.body.items?.length === 1 ? r.body.items : null;
  }, 20_000, 'failed delivery');
  t.match(d[0], { to: 'red', state: 'failed', attempts: 4, last_status: 302, last_error: 'HTTP 302' });
  t.equal(redirecting.got.length, 4, 'every attempt reached the registered receiver');
  t.equal(target.got.length, 0, 'the redirect target got no request');
});
