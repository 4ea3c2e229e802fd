// Maintenance windows and the traffic light, through the whole stack: a silent instance in a window
// shows maintenance, not red, and no webhook fires; when the window ends its deadline starts again
// from the end (green, then red one timeout later, each change at its exact time); a heartbeat
// inside the window changes nothing until it ends; overlapping windows chain; a window deleted
// mid-way ends the maintenance at once; another customer's instance of the same name is untouched.
// (The windows' own times, daylight-saving changes included, are test/unit/maintenance.test.ts.)
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { testStack, get, post, eventually, chRows } from '../helpers/stack.js';
import { request } from '../helpers/http.js';

const TIMEOUT_MS = 4000;
const s = await testStack(t, 'mwlight', {
  env: { HEARTBEAT_TIMEOUT_S: String(TIMEOUT_MS / 1000), LIGHT_SWEEP_INTERVAL_MS: '250', WEBHOOK_BACKOFF_MS: '200', WEBHOOK_ALLOW_CIDRS: '127.0.0.1/32' },
});
const admin = await s.newUser('admin');
const other = await s.newCustomer('mwother');
const otherAdmin = await s.newUser('admin', { customer: other.customer });
const WINDOWS = `${s.apiUrl}/api/maintenance-windows`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const beat = async (machine: string, software = 'agent', token = s.token, slug = s.customer.slug) => {
  const r = await post(`${s.gatewayUrl}/api/ingest/${slug}/${machine}/${software}/heartbeat`, token, {});
  if (r.status !== 200) throw new Error(`heartbeat ${r.status}`);
};

interface Inst {
  id: string;
  machine_id: string;
  light: string;
  light_since: string;
  last_heartbeat_at: string;
  deadline: string | null;
  maintenance_until: string | null;
}
const find = async (machine: string, jwt = admin.jwt): Promise<Inst | undefined> => (await get(`${s.apiUrl}/api/instances?machine=${machine}`, jwt)).body.items?.[0];
const until = (machine: string, light: string, ms = 10_000, jwt = admin.jwt) =>
  eventually(async () => {
    const i = await find(machine, jwt);
    return i?.light === light ? i : null;
  }, ms, `${machine} ${light}`);
const changes = (id: string) =>
  chRows<{ from_light: string; to_light: string; at_ms: string }>(s.ch, `SELECT from_light, to_light, at_ms FROM light_events FINAL WHERE instance_id = '${id}' ORDER BY seq`);
const path = (c: { from_light: string; to_light: string }[]) => c.map((e) => `${e.from_light}>${e.to_light}`);

async function window(body: Record<string, unknown>): Promise<{ id: string; endsAt: number }> {
  const r = await post(WINDOWS, admin.jwt, body);
  if (r.status !== 201) throw new Error(`window ${r.status} ${JSON.stringify(r.body)}`);
  return { id: r.body.id as string, endsAt: Date.parse(body.ends_at as string) };
}

const hooks: Record<string, unknown>[] = [];
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (d: Buffer) => (body += d.toString()));
  req.on('end', () => {
    hooks.push(JSON.parse(body) as Record<string, unknown>);
    res.writeHead(200).end('ok');
  });
});
await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
t.teardown(() => new Promise<void>((r) => receiver.close(() => r())));
t.equal((await post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook` })).status, 201);

/** The customer's instances by machine, in one request. */
async function byMachine(jwt = admin.jwt): Promise<Map<string, Inst>> {
  const r = await get(`${s.apiUrl}/api/instances?limit=100`, jwt);
  return new Map((r.body.items as (Inst & { machine: string })[]).map((i) => [i.machine, i]));
}
const sleepUntil = (t0: number) => sleep(Math.max(0, t0 - Date.now()));

t.test('silent through a window: maintenance, not red; after it green, then red one timeout after its end; webhooks only for that red', async (t) => {
  const sw = (m: string) => (m === 'mw-c' ? 'db-1' : 'agent');
  const all = ['mw-a', 'mw-b', 'mw-c', 'mw-d'];
  for (const m of all) await beat(m, sw(m));
  await beat('mw-c', 'db-1', other.token, other.customer.slug);
  const [a, b, c, d] = await Promise.all(all.map((m) => eventually(() => find(m), 10_000, m)));
  const theirs = (await eventually(() => find('mw-c', otherAdmin.jwt), 10_000, 'theirs'))!;
  // Fresh heartbeats, then the windows at once: they begin while all are green.
  for (const m of all) await beat(m, sw(m));
  await eventually(async () => {
    const now = await byMachine();
    return all.every((m) => now.get(m)?.light === 'green');
  }, 5000, 'all four green');

  // a: one instance, 7 s. b: its machine, 5 s, with a heartbeat inside. c: a software pattern for
  // 5 s and the instance from 4 s to 8 s (overlapping: one maintenance until 8 s). d: 60 s, deleted.
  const w0 = Date.now();
  const iso = (ms: number) => new Date(w0 + ms).toISOString();
  const wa = await window({ scope: 'instance', instance_id: a!.id, starts_at: iso(0), ends_at: iso(7000), description: 'a' });
  const wb = await window({ scope: 'machine', machine_id: b!.machine_id, starts_at: iso(0), ends_at: iso(5000) });
  await window({ scope: 'software', software_pattern: 'db-*', starts_at: iso(0), ends_at: iso(5000) });
  const wc2 = await window({ scope: 'instance', instance_id: c!.id, starts_at: iso(4000), ends_at: iso(8000) });
  const wd = await window({ scope: 'instance', instance_id: d!.id, starts_at: iso(0), ends_at: iso(60_000) });

  await eventually(async () => {
    const now = await byMachine();
    return all.every((m) => now.get(m)?.light === 'maintenance');
  }, 3000, 'all four in maintenance');
  const inA = (await byMachine()).get('mw-a')!;
  t.equal(Date.parse(inA.maintenance_until!), wa.endsAt, 'in maintenance until the window ends');
  t.equal(Date.parse((await byMachine()).get('mw-c')!.maintenance_until!), wc2.endsAt, 'the overlapping windows chained: until the later end');
  await sleepUntil(w0 + 1500);
  await beat('mw-b'); // a heartbeat inside b's window
  await sleepUntil(w0 + 2200);
  t.equal((await find('mw-b'))?.light, 'maintenance', 'b: a heartbeat inside the window leaves it in maintenance');
  // Past their timeouts (4 s after their last heartbeats, before w0), a, c and d are still in
  // maintenance; the other customer's db-1 is red.
  await sleepUntil(w0 + 4300);
  const mid = await byMachine();
  for (const m of ['mw-a', 'mw-c', 'mw-d']) t.equal(mid.get(m)?.light, 'maintenance', `${m} in maintenance, not red`);
  t.equal((await find('mw-c', otherAdmin.jwt))?.light, 'red', "another customer's instance of the same software is not in the window");
  t.equal(theirs.id, (await find('mw-c', otherAdmin.jwt))?.id);

  // d's window deleted: its maintenance ends now, and its deadline starts again from now.
  const deletedAt = Date.now();
  t.equal((await request('DELETE', `${WINDOWS}/${wd.id}`, admin.jwt)).status, 204);
  const dBack = await until('mw-d', 'green', 3000);
  t.ok(Date.parse(dBack.deadline!) >= deletedAt + TIMEOUT_MS - 50, 'd: its deadline starts again at the deletion');
  t.equal((await find('mw-a'))?.light, 'maintenance', "a: another window's deletion leaves it in its own");

  // b's window ended (5 s): green, deadline from the end (the heartbeat inside was earlier); then a's.
  const bAfter = await until('mw-b', 'green', 5000);
  t.equal(Date.parse(bAfter.deadline!), wb.endsAt + TIMEOUT_MS, 'b: deadline = window end + timeout');
  const aAfter = await until('mw-a', 'green', 5000);
  t.equal(Date.parse(aAfter.deadline!), wa.endsAt + TIMEOUT_MS, 'a: deadline = window end + timeout');

  // Each one's changes from the window on (before it: its first green, or a red if set-up was slow).
  const fromWindow = (id: string) =>
    eventually(async () => {
      const every = await changes(id);
      const i = path(every).indexOf('green>maintenance');
      return i >= 0 && every.length >= i + 3 ? every.slice(i) : null;
    }, 20_000, `the changes of ${id} from its window on`);
  const evA = await fromWindow(a!.id);
  t.same(path(evA), ['green>maintenance', 'maintenance>green', 'green>red']);
  t.equal(Number(evA[0]!.at_ms), w0, 'a entered maintenance when its window began, not when a worker noticed');
  t.equal(Number(evA[1]!.at_ms), wa.endsAt, 'a left maintenance at its end');
  t.equal(Number(evA[2]!.at_ms), wa.endsAt + TIMEOUT_MS, 'a turned red one timeout after it');
  const evB = await fromWindow(b!.id);
  t.same(path(evB), ['green>maintenance', 'maintenance>green', 'green>red'], 'b: the heartbeat inside changed nothing');
  t.equal(Number(evB[2]!.at_ms), wb.endsAt + TIMEOUT_MS);
  const evC = await fromWindow(c!.id);
  t.same(path(evC), ['green>maintenance', 'maintenance>green', 'green>red'], 'c: one maintenance for the two windows');
  t.equal(Number(evC[0]!.at_ms), w0, 'c: from the start of the pattern window');
  t.equal(Number(evC[1]!.at_ms), wc2.endsAt, 'c left maintenance when the later window ended');
  t.equal(Number(evC[2]!.at_ms), wc2.endsAt + TIMEOUT_MS);
  const evD = await fromWindow(d!.id);
  t.same(path(evD), ['green>maintenance', 'maintenance>green', 'green>red']);
  t.ok(Number(evD[2]!.at_ms) >= deletedAt + TIMEOUT_MS - 50, 'd turned red one timeout after the deletion');

  // Webhooks: nothing into or out of maintenance; each instance's red after its window, once.
  const ids = [a!.id, b!.id, c!.id, d!.id];
  const evs = [evA, evB, evC, evD];
  const after = (k: number) => hooks.filter((h) => h.instance_id === ids[k] && Date.parse(h.at as string) >= Number(evs[k]![0]!.at_ms));
  await eventually(() => Promise.resolve(ids.every((_, k) => after(k).length >= 1)), 10_000, 'the reds delivered');
  await sleep(500);
  t.notOk(hooks.some((h) => h.from === 'maintenance' || h.to === 'maintenance'), 'no webhook into or out of maintenance');
  ids.forEach((_, k) => t.same(after(k).map((h) => `${String(h.from)}>${String(h.to)}`), ['green>red'], 'the red after the window, once'));
});
