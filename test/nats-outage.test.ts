// NATS down: the gateway answers 503 with Retry-After (never 200) and recovers by itself; the
// reports accepted before and after the outage all arrive.
import t from 'tap';
import { testStack, post, get, eventually, chRows } from './helpers/stack.js';
import { OwnNats, freePort } from './helpers/nats-server.js';

const nats = new OwnNats(await freePort());
await nats.start();
t.teardown(() => nats.destroy());
const s = await testStack(t, 'outage', { natsUrl: nats.url, api: false });
const url = `${s.gatewayUrl}/api/ingest/${s.customer.slug}/m1/agent/heartbeat`;

t.test('503 while NATS is down, 200 again when it is back', async (t) => {
  t.equal((await post(url, s.token, {})).status, 200);
  await nats.stop();
  const down = await eventually(async () => {
    const r = await post(url, s.token, {});
    return r.status !== 200 ? r : null;
  }, 10_000, 'refusal while NATS is down');
  t.equal(down.status, 503);
  t.match(down.body.detail, /queue unavailable/);
  t.ok(Number(down.headers.get('retry-after')) >= 1, 'Retry-After set');
  t.equal((await get(`${s.gatewayUrl}/readyz`, null)).status, 503, 'not ready');
  // Nothing is acknowledged while the queue is away.
  const during = await Promise.all(Array.from({ length: 20 }, () => post(url, s.token, {})));
  t.notOk(during.some((r) => r.status === 200), 'no 200 during the outage');

  await nats.start();
  await eventually(async () => (await post(url, s.token, { version: 'after' })).status === 200, 30_000, 'recovered');
  t.equal((await get(`${s.gatewayUrl}/readyz`, null)).status, 200, 'ready again');
  await eventually(async () => {
    const r = await chRows<{ v: string }>(s.ch, `SELECT version AS v FROM heartbeats FINAL WHERE version = 'after'`);
    return r.length > 0;
  }, 30_000, 'the worker recovered too');
  const all = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL`);
  t.ok(Number(all[0]!.n) >= 2, 'reports from before and after the outage are stored');
});
