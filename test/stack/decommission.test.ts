// Decommissioning end to end (docs/operations.md "Decommissioning"): an admin retires an instance or
// a machine through the api (or the CLI). It leaves the list, the counts and the licence at once,
// its Redis state goes, its open commands are cancelled, and it never turns red again: not after
// the timeout, not when the retirement races with the heartbeat key's expiry or the sweep. Its
// history stays readable by id. A report received before the retirement but applied after it
// brings nothing back; a report after it makes a new instance (new id, new first seen).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { testStack, post, get, eventually, drained, chRows } from '../helpers/stack.js';
import { events } from '../helpers/lights.js';
import { ROOT } from '../../deploy/service-process.js';

const TIMEOUT_S = 2;
const s = await testStack(t, 'decommission', {
  env: { HEARTBEAT_TIMEOUT_S: String(TIMEOUT_S), WARNING_WINDOW_S: '2', LIGHT_SWEEP_INTERVAL_MS: '500', API_COUNT_CACHE_MS: '0' },
});
const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');
const other = await s.newCustomer('decom-other');
const otherAdmin = await s.newUser('admin', { customer: other.customer });
const prefix = s.env.REDIS_PREFIX!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const snapshot = { modules: { updater: { commands: [{ name: 'check' }] } } };

const retireInstance = (id: string, jwt = admin.jwt) => post(`${s.apiUrl}/api/instances/${id}/retire`, jwt, {});
const retireMachine = (id: string, jwt = admin.jwt) => post(`${s.apiUrl}/api/machines/${id}/retire`, jwt, {});
const listed = async (machine: string) => ((await get(`${s.apiUrl}/api/instances?machine=${machine}`, viewer.jwt)).body.items as any[]) ?? [];
const summary = async () => (await get(`${s.apiUrl}/api/fleet/summary`, viewer.jwt)).body;
const devices = async () => (await get(`${s.apiUrl}/api/dashboard/license-status`, viewer.jwt)).body.device_count as number;

/** The live instance of machine/software through the api, once the worker stored its heartbeat (green, or yellow for a warning). */
async function liveInstance(machine: string, software = 'agent'): Promise<any> {
  return eventually(async () => (await listed(machine)).find((i) => i.software === software && ['green', 'yellow'].includes(i.light)), 10_000, `${machine}/${software} lit`);
}

/** What Redis holds of an instance: heartbeat key, state hash, due entry. */
async function redisState(id: string) {
  const [hb, hs, due] = await Promise.all([s.redis.exists(`${prefix}hb:${id}`), s.redis.exists(`${prefix}hs:${id}`), s.redis.zscore(`${prefix}hbdue`, id)]);
  return { hb, hs, due };
}

/**
 * The marker that proves an absence ("nothing was recorded for X"): an instance that heartbeats once
 * now, after X's last heartbeat, and whose turn to red (recorded by the expiry listener or the sweep)
 * is waited for. Its deadline is later than X's, so whatever judges X has judged it by then.
 */
async function redMarker(machine: string): Promise<void> {
  const r = await s.report(machine, 'heartbeat', {});
  if (r.status !== 200) throw new Error(`marker ${machine}: ${r.status}`);
  await eventually(async () => (await events(s, `machine = '${machine}'`)).some((e) => e.to_light === 'red'), 20_000, `marker ${machine} recorded red`);
}

async function row(id: string) {
  return (await s.pool.query(`SELECT light, light_seq, retired_at FROM instances JOIN instance_lights ON instance_id = id WHERE id = $1`, [id])).rows[0];
}

t.test('retiring an instance: gone from the list and the counts, commands cancelled, Redis cleared, never red, history kept', async (t) => {
  t.equal((await s.report('r1', 'status', { status: 'running', snapshot })).status, 200);
  t.equal((await s.report('r1', 'heartbeat', {})).status, 200);
  t.equal((await s.report('r1', 'heartbeat', {}, { software: 'keep' })).status, 200);
  t.ok([200, 202].includes((await s.report('r1', 'diagnostics', { items: [{ code: 7, severity: 1, message: 'note' }] })).status), 'diagnostics accepted');
  const inst = await liveInstance('r1');
  await liveInstance('r1', 'keep');
  // Heartbeats have their own lane: the status (and the commands its snapshot advertises) may land later.
  await eventually(async () => (await get(`${s.apiUrl}/api/instances/${inst.id}`, admin.jwt)).body.status === 'running', 10_000, 'the status applied');
  // A second heartbeat: it skips Postgres, so Redis holds the newest one (and a due entry).
  t.equal((await s.report('r1', 'heartbeat', {})).status, 200);
  const q = await post(`${s.apiUrl}/api/instances/${inst.id}/commands`, admin.jwt, { module: 'updater', command: 'check' });
  t.equal(q.status, 201, 'a command queued');
  await eventually(async () => (await redisState(inst.id)).hb === 1, 5000, 'heartbeat key in Redis');
  const before = await summary();
  const dev = await devices();

  // Not allowed: a viewer (403); another customer's admin (404) changes nothing.
  t.equal((await retireInstance(inst.id, viewer.jwt)).status, 403);
  const foreign = await retireInstance(inst.id, otherAdmin.jwt);
  t.equal(foreign.status, 404);
  t.match(foreign.body.detail, /no such instance/);
  t.equal((await retireMachine(inst.machine_id, otherAdmin.jwt)).status, 404);
  t.equal((await row(inst.id)).retired_at, null, 'still not retired');
  t.equal((await retireInstance('not-a-uuid')).status, 400);
  t.equal((await retireInstance('00000000-0000-4000-8000-000000000000')).status, 404);

  const r = await retireInstance(inst.id);
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.match(r.body, { kind: 'instance', id: inst.id, machine: 'r1', already_retired: false, cancelled_commands: 1, instances: [{ id: inst.id, software: 'agent' }] });
  t.same(await redisState(inst.id), { hb: 0, hs: 0, due: null }, 'heartbeat key, state hash and due entry gone');
  const frozen = await row(inst.id);
  t.same((await listed('r1')).map((i) => i.software), ['keep'], 'gone from the list; its machine stays');
  const after = await summary();
  t.equal(after.total, before.total - 1, 'one fewer in the fleet summary');
  t.equal(await devices(), dev, 'the machine still counts (another instance on it)');
  const cmds = (await get(`${s.apiUrl}/api/instances/${inst.id}/commands`, viewer.jwt)).body.items;
  t.equal(cmds[0].state, 'cancelled', 'the open command is cancelled');
  t.match(cmds[0].history.at(-1), { state: 'cancelled' });
  t.equal((await post(`${s.apiUrl}/api/instances/${inst.id}/commands`, admin.jwt, { module: 'updater', command: 'check' })).status, 409, 'no new commands');

  // Still answered by id, grey since its retirement; its history is readable.
  const one = await get(`${s.apiUrl}/api/instances/${inst.id}`, viewer.jwt);
  t.equal(one.status, 200);
  t.match(one.body, { id: inst.id, light: 'grey', light_reason: 'retired', retired_at: r.body.retired_at, light_since: r.body.retired_at });
  const diags = await get(`${s.apiUrl}/api/instances/${inst.id}/diagnostics`, viewer.jwt);
  t.equal(diags.status, 200);
  t.equal(diags.body.items.length, 1, 'its diagnostics');
  const hist = await get(`${s.apiUrl}/api/instances/${inst.id}/status/history`, viewer.jwt);
  t.equal(hist.status, 200);
  t.ok(hist.body.items.length >= 1, 'its status history');
  const hbRows = await chRows(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE instance_id = '${inst.id}'`);
  t.ok(Number(hbRows[0]!.n) >= 1, 'its heartbeats in ClickHouse');

  // Twice: no change, the same time.
  const again = await retireInstance(inst.id);
  t.equal(again.status, 200);
  t.match(again.body, { already_retired: true, retired_at: r.body.retired_at, cancelled_commands: 0 });

  // Past the timeout (expiry listener and sweep both run): never red, no event.
  await redMarker('marker-1');
  await eventually(async () => (await events(s, `machine = 'r1' AND software = 'keep'`)).some((e) => e.to_light === 'red'), 10_000, 'r1/keep red');
  t.pass('the instance left on the machine did turn red (the light works)');
  const mine = await events(s, `instance_id = '${inst.id}'`);
  t.notOk(mine.some((e) => e.to_light === 'red'), 'no red event for the retired instance');
  t.match(await row(inst.id), { light: frozen.light, light_seq: frozen.light_seq }, `its stored colour never changed (${frozen.light})`);
  t.equal((await s.pool.query(`SELECT count(*)::int AS n FROM light_outbox_changes WHERE instance_id = $1`, [inst.id])).rows[0].n, 0);

  // It reports again: a new instance (new id, new first seen), listed and counted.
  t.equal((await s.report('r1', 'heartbeat', {})).status, 200);
  const back = await liveInstance('r1');
  t.not(back.id, inst.id, 'a new id');
  t.ok(Date.parse(back.first_seen_at) > Date.parse(r.body.retired_at), 'first seen after the retirement');
  t.equal((await summary()).total, before.total + 1, 'counted again (beside the marker)');
  t.equal((await get(`${s.apiUrl}/api/instances/${inst.id}`, viewer.jwt)).body.retired_at, r.body.retired_at, 'the old id still answers, retired');
});

t.test('retiring a machine: its instances go, the licence counts one device fewer; it reports again as new', async (t) => {
  for (const sw of ['a', 'b']) t.equal((await s.report('m-old', 'heartbeat', {}, { software: sw })).status, 200);
  const a = await liveInstance('m-old', 'a');
  await liveInstance('m-old', 'b');
  const n = await eventually(async () => {
    const d = await devices();
    return d >= 2 ? d : null;
  });
  const r = await retireMachine(a.machine_id);
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.match(r.body, { kind: 'machine', id: a.machine_id, machine: 'm-old', already_retired: false });
  t.same(r.body.instances.map((i: any) => i.software).sort(), ['a', 'b']);
  t.same(await listed('m-old'), [], 'no instance of it listed');
  t.equal(await devices(), n - 1, 'one device fewer in the licence');
  for (const i of r.body.instances) t.same(await redisState(i.id), { hb: 0, hs: 0, due: null });
  const again = await retireMachine(a.machine_id);
  t.match(again.body, { already_retired: true, retired_at: r.body.retired_at });
  t.equal((await retireInstance(a.id)).body.already_retired, true, 'its instances are retired with it');

  await redMarker('marker-2');
  const ev = await events(s, `machine = 'm-old'`);
  t.notOk(ev.some((e) => e.to_light === 'red'), 'no red event');

  t.equal((await s.report('m-old', 'heartbeat', {}, { software: 'a' })).status, 200);
  const back = await liveInstance('m-old', 'a');
  t.not(back.machine_id, a.machine_id, 'a new machine');
  t.not(back.id, a.id, 'a new instance');
  t.equal(await devices(), n + 1, 'counted again (beside the marker)');
  const m = await s.pool.query(`SELECT first_seen_at FROM machines WHERE id = $1`, [back.machine_id]);
  t.ok(m.rows[0].first_seen_at > new Date(r.body.retired_at), 'the machine is first seen after its retirement');
});

t.test('racing the expiry and the sweep: nothing is recorded for an instance after its retirement', async (t) => {
  const machines = Array.from({ length: 12 }, (_, i) => `race-${i}`);
  await Promise.all(machines.map((m) => s.report(m, 'heartbeat', {})));
  const insts = await eventually(async () => {
    const items = ((await get(`${s.apiUrl}/api/instances?q=race-`, viewer.jwt)).body.items as any[]).filter((i) => i.light === 'green');
    return items.length === machines.length ? items : null;
  }, 10_000, 'all green');
  const deadline = Math.max(...insts.map((i) => Date.parse(i.last_heartbeat_at))) + TIMEOUT_S * 1000;
  // Retirements spread around the deadline: some before, some as the key expires, some after.
  await sleep(Math.max(0, deadline - 300 - Date.now()));
  const retired = new Map<string, number>();
  for (const i of insts) {
    const r = await retireInstance(i.id);
    t.equal(r.status, 200);
    retired.set(i.id, Date.parse(r.body.retired_at));
    await sleep(60);
  }
  await redMarker('marker-3');
  const ev = await events(s, `machine LIKE 'race-%'`);
  for (const e of ev) t.ok(e.recorded_ms <= retired.get(e.instance_id)!, `${e.machine}: ${e.to_light} recorded ${e.recorded_ms - retired.get(e.instance_id)!} ms from its retirement (not after)`);
  const reds = ev.filter((e) => e.to_light === 'red').length;
  t.comment(`${reds} of ${insts.length} turned red before their retirement; none after`);
  const lit = await s.pool.query(`SELECT count(*)::int AS n FROM light_outbox_changes WHERE machine LIKE 'race-%'`);
  t.equal(lit.rows[0].n, 0);
});

t.test('a heartbeat received before the retirement but applied after it brings nothing back', async (t) => {
  t.equal((await s.report('late', 'heartbeat', {})).status, 200);
  const inst = await liveInstance('late');
  const workers = s.procs.filter((p) => p.name === 'worker');
  await Promise.all(workers.map((p) => p.stop()));
  t.equal((await s.report('late', 'heartbeat', {})).status, 200, 'accepted: waits in JetStream');
  const r = await retireInstance(inst.id);
  t.equal(r.status, 200);
  await s.startWorker();
  // Drained: the queued heartbeat was applied (a message leaves the stream after its writes committed).
  await drained(s);
  const rows = await s.pool.query(`SELECT id, retired_at FROM instances WHERE machine = 'late'`);
  t.equal(rows.rows.length, 1, 'no new instance');
  t.ok(rows.rows[0].retired_at, 'the old one stays retired');
  t.same(await listed('late'), []);
  t.equal((await s.redis.exists(`${prefix}hb:${inst.id}`)), 0, 'no heartbeat key came back');
  // A heartbeat received after the retirement: a new instance.
  t.equal((await s.report('late', 'heartbeat', {})).status, 200);
  const back = await liveInstance('late');
  t.not(back.id, inst.id);
});

t.test('CLI: fleet machine retire / fleet instance retire', async (t) => {
  const fleet = (...args: string[]) => spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });
  for (const sw of ['x', 'y']) t.equal((await s.report('cli-m', 'heartbeat', {}, { software: sw })).status, 200);
  const x = await liveInstance('cli-m', 'x');
  await liveInstance('cli-m', 'y');
  const one = fleet('instance', 'retire', s.customer.slug, 'cli-m', 'x');
  t.equal(one.status, 0, one.stderr);
  t.match(JSON.parse(one.stdout), { kind: 'instance', id: x.id, already_retired: false });
  t.same(await redisState(x.id), { hb: 0, hs: 0, due: null });
  t.same((await listed('cli-m')).map((i) => i.software), ['y']);
  const m = fleet('machine', 'retire', s.customer.slug, 'cli-m');
  t.equal(m.status, 0, m.stderr);
  t.match(JSON.parse(m.stdout), { kind: 'machine', machine_id: x.machine_id, already_retired: false });
  t.same(await listed('cli-m'), []);
  const twice = fleet('machine', 'retire', s.customer.slug, 'cli-m');
  t.equal(twice.status, 0, twice.stderr);
  t.match(JSON.parse(twice.stdout), { already_retired: true });
  t.equal(fleet('machine', 'retire', s.customer.slug, 'no-such-machine').status, 1);
  const wrong = fleet('instance', 'retire', other.customer.slug, 'cli-m', 'y');
  t.equal(wrong.status, 1, 'another customer has no such instance');
});
