// Traffic light with a 2 s heartbeat timeout: Redis expiry turns a silent instance red within the
// timeout + 1 s, a heartbeat turns it green, reports colour it as decided, every change is one
// event (ClickHouse, the api, the live stream of its own customer only).
import t from 'tap';
import { testStack, post, get, eventually, drained } from '../helpers/stack.js';
import { events, stored, openStream } from '../helpers/lights.js';
import { withExpiredEvents, ensureExpiryEvents } from '../../workers/light-expiry.js';
import { createLogger } from '../../lib/infra/log.js';

// The sweep is slowed right down here, so that red can only come from the expiry events.
const s = await testStack(t, 'light', { env: { HEARTBEAT_TIMEOUT_S: '2', LIGHT_SWEEP_INTERVAL_MS: '600000' } });
await s.procs.find((p) => p.name === 'api')!.waitFor((l) => l.msg === 'live traffic-light stream subscribed');
const ingest = (m: string, kind: string, sw = 'agent') => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/${m}/${sw}/${kind}`;
const viewer = await s.newUser('viewer');
const other = await s.newCustomer('other');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitStored(machine: string, light: string, ms = 10_000) {
  return eventually(async () => {
    const st = await stored(s, machine);
    return st?.light === light ? st : null;
  }, ms, `${machine} stored ${light}`);
}

t.test('silent: red within timeout + 1 s by the expiry event; a heartbeat: green again; each change once', async (t) => {
  const mine = await openStream(`${s.apiUrl}/api/fleet/stream`, viewer.jwt);
  const theirs = await openStream(`${s.apiUrl}/api/fleet/stream`, other.token);
  t.equal(mine.status, 200);
  t.match(mine.headers.get('content-type'), /^text\/event-stream/);
  t.equal(theirs.status, 200);

  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  const green = await waitStored('m1', 'green', 5000);
  const red = await waitStored('m1', 'red', 8000);
  const ev = await eventually(async () => {
    const e = await events(s, `machine = 'm1'`);
    return e.length === 2 ? e : null;
  }, 5000, 'two events in ClickHouse');
  t.match(ev[0], { seq: 1, from_light: 'grey', to_light: 'green', cause: 'report' });
  t.match(ev[1], { seq: 2, from_light: 'green', to_light: 'red', cause: 'expiry' });
  t.equal(ev[1]!.at_ms, green.last_heartbeat_ms! + 2000, 'red since last heartbeat + timeout');
  const late = ev[1]!.recorded_ms - ev[1]!.at_ms;
  t.ok(late >= 0 && late <= 1000, `recorded ${late} ms after the timeout (at most 1 s)`);
  t.match(ev[1]!.reason, /no heartbeat for more than 2 s/);
  t.equal(red.light_seq, 2);

  t.equal((await post(ingest('m1', 'heartbeat'), s.token, {})).status, 200);
  const back = await waitStored('m1', 'green', 5000);
  t.equal(back.light_seq, 3);
  const after = await eventually(async () => {
    const e = await events(s, `machine = 'm1'`);
    return e.length === 3 ? e : null;
  }, 5000, 'third event');
  t.match(after[2], { seq: 3, from_light: 'red', to_light: 'green', cause: 'report', reason: 'ok' });

  // The live stream of this customer saw the three changes, in order; the other customer's nothing.
  const seen = await eventually(async () => (mine.lights().length >= 3 ? mine.lights() : null), 5000, 'three live events');
  t.same(
    seen.map((e) => [e.machine, e.from, e.to, e.seq]),
    [
      ['m1', 'grey', 'green', 1],
      ['m1', 'green', 'red', 2],
      ['m1', 'red', 'green', 3],
    ],
  );
  t.equal(seen[1]!.cause, 'expiry');
  t.ok(mine.received.every((e) => e.id === `${green.id}.${JSON.parse(e.data).seq}`), 'SSE id = <instance>.<seq>');
  t.same(theirs.lights(), [], 'no event on another customer\'s stream');
  await Promise.all([mine.close(), theirs.close()]);

  // The api: the events newest first; another customer's token: 404.
  const api = await get(`${s.apiUrl}/api/instances/${green.id}/events`, s.token);
  t.equal(api.status, 200);
  t.same(api.body.items.map((e: { seq: number; to: string }) => [e.seq, e.to]), [[3, 'green'], [2, 'red'], [1, 'green']]);
  t.equal(api.body.items[1].cause, 'expiry');
  t.equal(api.body.items[1].id, `${green.id}.2`);
  t.equal((await get(`${s.apiUrl}/api/instances/${green.id}/events`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/instances/not-a-uuid/events`, s.token)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/instances/${green.id}/events?limit=0`, s.token)).status, 400);
});

t.test('reports colour the light as decided, each change one event', async (t) => {
  // Expired heartbeat keys, as the workers' expiry listeners see them (to know that m2's expired).
  const expired = new Set<string>();
  const sub = s.redis.duplicate();
  t.teardown(() => void sub.quit().catch(() => {}));
  sub.on('message', (_ch: string, key: string) => expired.add(key));
  await sub.subscribe(`__keyevent@${s.redis.options.db ?? 0}__:expired`);
  // Keep m2 heartbeating (every 300 ms, timeout 2 s) while its status and diagnostics change.
  let beating = true;
  const beat = (async () => {
    while (beating) {
      await post(ingest('m2', 'heartbeat'), s.token, {});
      await sleep(300);
    }
  })();
  try {
    await waitStored('m2', 'green');
    const steps: [string, unknown, string][] = [
      ['status', { status: 'degraded' }, 'yellow'],
      ['status', { status: 'error', message: 'boom' }, 'red'],
      ['status', { status: 'running' }, 'green'],
      ['diagnostics', { items: [{ code: 7, severity: 1, message: 'disk' }] }, 'yellow'],
      ['status', { status: 'stopped' }, 'grey'],
    ];
    for (const [kind, body, light] of steps) {
      t.ok([200, 202].includes((await post(ingest('m2', kind), s.token, body)).status), `${kind} accepted (202: help texts missing)`);
      await waitStored('m2', light, 5000);
      const i = (await get(`${s.apiUrl}/api/instances?machine=m2`, s.token)).body.items[0];
      t.equal(i.light, light, `api shows ${light}`);
    }
  } finally {
    beating = false;
    await beat;
  }
  const ev = await eventually(async () => {
    const e = await events(s, `machine = 'm2'`);
    return e.length === 6 ? e : null;
  }, 5000, 'six events');
  t.same(
    ev.map((e) => [e.seq, e.from_light, e.to_light, e.cause]),
    [
      [1, 'grey', 'green', 'report'],
      [2, 'green', 'yellow', 'report'],
      [3, 'yellow', 'red', 'report'],
      [4, 'red', 'green', 'report'],
      [5, 'green', 'yellow', 'report'],
      [6, 'yellow', 'grey', 'report'],
    ],
  );
  t.same(ev.map((e) => e.reason), ['ok', 'status degraded', 'status error', 'ok', 'warning or error diagnostic in the last 15 min', 'status stopped']);
  for (let i = 1; i < ev.length; i++) t.ok(ev[i]!.at_ms >= ev[i - 1]!.at_ms, 'event times move forward');
  // Stopped stays grey even when it falls silent: no event. Every heartbeat of m2 applied (its key
  // has its last expiry), then the key expired: Redis has published the event the workers judge m2 by.
  await drained(s);
  const m2 = (await stored(s, 'm2'))!;
  const key = `${s.env.REDIS_PREFIX}hb:${m2.id}`;
  // EXISTS expires a key that is past its time at once (Redis otherwise finds it by sampling).
  await eventually(async () => (await s.redis.exists(key)) === 0 && expired.has(key), 10_000, "m2's heartbeat key expired");
  // The marker: m2x heartbeats once, after m2's key expired, and falls silent too. The worker's one
  // expiry subscription gets m2x's event after m2's, and judges them in arrival order (one batch at a
  // time, each batch's changes written to ClickHouse before the next; m2 is grey, never deferred:
  // workers/light-expiry.ts). So once m2x's red (by expiry: the sweep is off) is in ClickHouse, m2 has
  // been judged silent, and a change would be in Postgres and ClickHouse.
  t.equal((await post(ingest('m2x', 'heartbeat'), s.token, {})).status, 200);
  await eventually(async () => (await events(s, `machine = 'm2x' AND to_light = 'red'`)).length === 1, 10_000, 'the marker: m2x red by expiry');
  t.match(await stored(s, 'm2'), { light: 'grey', light_seq: 6 }, 'm2 still grey, no change recorded');
  t.equal((await events(s, `machine = 'm2'`)).length, 6, 'no seventh event');
  t.same((await events(s, `machine = 'm2x'`)).map((e) => e.cause), ['report', 'expiry'], 'the marker turned red by its expiry event');
});

t.test('an instance that only sent a status stays grey: no event', async (t) => {
  t.equal((await post(ingest('m3', 'status'), s.token, { status: 'running' })).status, 200);
  // The row appears with the status report's transaction, which would also have recorded a change.
  const st = await eventually(async () => stored(s, 'm3'), 5000, 'm3 stored');
  t.match(st, { light: 'grey', light_seq: 0 }, 'grey, no change recorded');
  // The marker: a heartbeat turns m3 green. Every change takes the next light_seq of its instance
  // in the transaction that records it, so had anything before the heartbeat changed m3's colour,
  // the heartbeat's change would not be the first.
  t.equal((await post(ingest('m3', 'heartbeat'), s.token, {})).status, 200);
  const ev = await eventually(async () => (await events(s, `machine = 'm3' AND to_light = 'green'`))[0], 5000, "the marker's event");
  t.match(ev, { seq: 1, from_light: 'grey', to_light: 'green', cause: 'report' }, "the heartbeat's change is m3's first: the status alone made none");
});

t.test('summary and ?light= agree with the list; light_since is given', async (t) => {
  t.equal((await post(ingest('m4', 'heartbeat'), s.token, {})).status, 200);
  await waitStored('m4', 'green');
  const sum = await get(`${s.apiUrl}/api/fleet/summary`, viewer.jwt);
  t.equal(sum.status, 200);
  const all = await get(`${s.apiUrl}/api/instances`, viewer.jwt);
  const counts: Record<string, number> = { green: 0, yellow: 0, late: 0, red: 0, grey: 0, maintenance: 0 };
  for (const i of all.body.items) counts[i.light]++;
  t.same(sum.body, { total: all.body.total, lights: counts });
  t.ok(counts.green >= 1 && counts.grey >= 1, `counts ${JSON.stringify(counts)}`);
  for (const light of ['green', 'yellow', 'late', 'red', 'grey', 'maintenance']) {
    const l = await get(`${s.apiUrl}/api/instances?light=${light}`, viewer.jwt);
    t.equal(l.body.total, counts[light], `?light=${light}`);
    t.ok(l.body.items.every((i: { light: string }) => i.light === light));
  }
  t.equal((await get(`${s.apiUrl}/api/instances?light=blue`, viewer.jwt)).status, 400);
  const m4 = all.body.items.find((i: { machine: string }) => i.machine === 'm4');
  t.ok(Math.abs(Date.parse(m4.light_since) - Date.parse(m4.last_heartbeat_at)) < 1000, 'green since its first heartbeat');
  // Another customer counts nothing of this one's.
  t.same((await get(`${s.apiUrl}/api/fleet/summary`, other.token)).body, { total: 0, lights: { green: 0, yellow: 0, late: 0, red: 0, grey: 0, maintenance: 0 } });
});

t.test('live stream: credentials required', async (t) => {
  const none = await openStream(`${s.apiUrl}/api/fleet/stream`, null);
  t.equal(none.status, 401);
  t.type(none.body?.detail, 'string');
  const bad = await openStream(`${s.apiUrl}/api/fleet/stream`, 'not-a-jwt');
  t.equal(bad.status, 401);
});

t.test('expired-key events: the flags the workers add to notify-keyspace-events', async (t) => {
  t.equal(withExpiredEvents(''), 'Ex');
  t.equal(withExpiredEvents('Ex'), null);
  t.equal(withExpiredEvents('xE'), null);
  t.equal(withExpiredEvents('AKE'), null, 'A includes x');
  t.equal(withExpiredEvents('K$'), 'K$Ex');
  t.equal(withExpiredEvents('Eg'), 'Egx');
  t.equal(withExpiredEvents('Kx'), 'KxE');
  // On the test Redis they are on already: nothing to change, reported as fine.
  t.equal(await ensureExpiryEvents(s.redis, createLogger('test', 'silent')), true);
  const flags = ((await s.redis.config('GET', 'notify-keyspace-events')) as string[])[1]!;
  t.ok(withExpiredEvents(flags) === null, `flags ${flags}`);
});
