// Licences end to end: the free start of 5 devices, warning and exceeded, the grace period (a 6th
// device accepted and flagged), after the grace period a new machine refused at the gateway while
// known machines keep reporting and nothing accepted is dropped, licence changes on every gateway
// within 5 s, the sweep, support contacts by tier, and the CLI.
//
// The grace period is moved into the past by a direct database change:
//   UPDATE licences SET over_limit_since = now() - interval '15 days'
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { testStack, post, get, eventually, chRows } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { ROOT } from '../../deploy/service-process.js';

const s = await testStack(t, 'licences', { env: { LICENCE_SWEEP_MS: '1000' } });
const owner = await s.newUser('owner');
const sysadmin = await s.newUser(null, { systemAdmin: true });
const slug = s.customer.slug;
const hb = (m: string, gw = s.gatewayUrl) => s.report(m, 'heartbeat', {}, { gateway: gw });
const status = async () => (await get(`${s.apiUrl}/api/dashboard/license-status`, owner.jwt)).body;
const key = async () => (await get(`${s.apiUrl}/api/customers/${s.customer.id}/license-key`, owner.jwt)).body;
const machines = async () => (await get(`${s.apiUrl}/api/instances`, owner.jwt)).body.items.map((i: any) => i.machine).sort();
const put = (body: unknown, jwt = sysadmin.jwt, id = s.customer.id) => request('PUT', `${s.apiUrl}/api/customers/${id}/license`, jwt, body);
const DAY = 86_400_000;

t.test('free start: 5 devices; ok, then warning at 90 %; free support contacts', async (t) => {
  const first = await status();
  t.match(first, { customer_id: s.customer.id, customer: slug, tier: 'free', device_limit: 5, device_count: 0, limit_status: 'ok', window_days: 30, new_machines_refused: false });
  t.match(first.grace_period, { days: 14, started_at: null, ends_at: null, active: false, expired: false });
  for (const m of ['m1', 'm2', 'm3', 'm4']) t.equal((await hb(m)).status, 200);
  const four = await eventually(async () => ((await status()).device_count === 4 ? status() : null));
  t.equal(four.limit_status, 'ok', '4 of 5');
  t.equal((await hb('m5')).status, 200);
  const five = await eventually(async () => ((await status()).device_count === 5 ? status() : null));
  t.equal(five.limit_status, 'warning', '5 of 5 is at least 90 %');
  t.equal(five.usage_percent, 100);
  const k = await key();
  t.match(k.license_key, /^FLT-[0-9A-F]{5}(-[0-9A-F]{5}){3}$/);
  t.match(k, { device_count: 5, device_limit: 5, limit_status: 'warning', flagged_machines: [] });

  const sup = (await get(`${s.apiUrl}/api/support-info`, owner.jwt)).body;
  t.equal(sup.tier, 'free');
  t.same(sup.channels.map((c: any) => c.kind), ['community', 'email']);
  t.equal(sup.contact, null);
});

t.test('the 6th device within the grace period is accepted and flagged', async (t) => {
  const before = Date.now() - 1000;
  t.equal((await hb('m6')).status, 200, 'accepted');
  const st = await eventually(async () => {
    const x = await status();
    return x.limit_status === 'exceeded' ? x : null;
  });
  t.equal(st.device_count, 6);
  t.equal(st.new_machines_refused, false);
  const g = st.grace_period;
  t.match(g, { days: 14, active: true, expired: false, days_left: 14 });
  t.ok(Date.parse(g.started_at) >= before, 'the grace period started when the limit was first exceeded');
  t.equal(Date.parse(g.ends_at) - Date.parse(g.started_at), 14 * DAY);
  const k = await key();
  t.same(k.flagged_machines.map((m: any) => m.machine), ['m6'], 'the machine over the limit is flagged');
  t.equal((await hb('m7')).status, 200, 'a 7th within the grace period too');
  await eventually(async () => (await key()).flagged_machines.length === 2);
  t.same(await eventually(async () => ((await machines()).length === 7 ? machines() : null)), ['m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7']);
  const again = await status();
  t.equal(again.grace_period.started_at, g.started_at, 'the start stays the first time');
});

t.test('after the grace period: new machines 403, known machines accepted, nothing accepted dropped', async (t) => {
  // A report accepted just before the grace period ends, still in the queue when it ends.
  const worker = s.procs.find((p) => p.name === 'worker')!;
  await worker.stop();
  t.equal((await hb('late')).status, 200, 'accepted within the grace period (worker stopped)');

  await s.pool.query(`UPDATE licences SET over_limit_since = now() - interval '15 days' WHERE customer_id = $1`, [s.customer.id]);
  const changed = Date.now();
  let i = 0;
  const refused = await eventually(async () => {
    const r = await hb(`probe-${i++}`);
    return r.status === 403 ? r : null;
  }, 5000, 'a new machine refused within 5 s');
  t.ok(Date.now() - changed < 5000, `refused ${Date.now() - changed} ms after the change`);
  t.match(refused.body.detail, /licence limit reached/);
  t.match(refused.body.detail, /grace period ended/);
  t.match(refused.body.detail, new RegExp(`probe-${i - 1}`));
  t.equal((await hb('brand-new')).status, 403);
  for (const m of ['m1', 'm5', 'm6', 'm7']) t.equal((await hb(m)).status, 200, `known machine ${m} keeps reporting`);
  const diag = await post(`${s.gatewayUrl}/api/ingest/${slug}/brand-new/agent/diagnostics`, s.token, { items: [{ code: 1, severity: 0 }] });
  t.equal(diag.status, 403, 'every report kind');

  await s.startWorker();
  const all = await eventually(async () => ((await machines()).includes('late') ? machines() : null), 10_000, 'the report accepted before is applied');
  t.notOk(all.includes('brand-new'), 'a refused machine is not stored');
  await eventually(async () => (await hb('late')).status === 200, 5000, 'the machine accepted before is known from then on');
  const st = await status();
  t.match(st, { limit_status: 'exceeded', new_machines_refused: true });
  t.match(st.grace_period, { active: false, expired: true, days_left: 0 });

  const rows = await eventually(async () => {
    const r = await chRows<{ status: number; detail: string }>(s.ch, `SELECT status, detail FROM ingest_rejections FINAL WHERE path LIKE '%/brand-new/%'`);
    return r.length >= 2 ? r : null;
  });
  t.ok(rows.every((r) => Number(r.status) === 403 && /licence limit/.test(r.detail)), 'in the rejection log');
});

t.test('a licence change by a system admin applies on every gateway within 5 s', async (t) => {
  const gw2 = await s.startGateway();
  t.equal((await hb('n1')).status, 403);
  t.equal((await hb('n2', gw2.url)).status, 403, 'the second gateway refuses too');
  const denied = await put({ device_limit: 50 }, owner.jwt);
  t.equal(denied.status, 403, 'an owner cannot change the licence');

  const r = await put({ device_limit: 50, tier: 'paid' });
  t.equal(r.status, 200);
  t.match(r.body, { tier: 'paid', device_limit: 50, limit_status: 'ok', new_machines_refused: false });
  t.equal(r.body.grace_period.started_at, null, 'back within the limit: the grace period is over');
  const changed = Date.now();
  await eventually(async () => (await hb('n1')).status === 200, 5000, 'gateway 1');
  await eventually(async () => (await hb('n2', gw2.url)).status === 200, 5000, 'gateway 2');
  t.ok(Date.now() - changed < 5000, `both accept ${Date.now() - changed} ms after the change`);

  const me = (await get(`${s.apiUrl}/auth/me`, owner.jwt)).body;
  t.ok(me.pending_conversions.some((c: any) => c.kind === 'licence_activated' && c.value.tier === 'paid'), 'licence_activated conversion');
  const sup = (await get(`${s.apiUrl}/api/support-info`, owner.jwt)).body;
  t.equal(sup.tier, 'paid');
  t.same(sup.channels.map((c: any) => c.kind), ['community', 'email', 'phone']);
  t.type(sup.contact?.name, 'string', 'a named contact');

  t.equal((await put({})).status, 400, 'an empty change');
  t.equal((await put({ device_limit: -1 })).status, 400);
  t.equal((await put({ tier: 'gold' })).status, 400);
  t.equal((await put({ device_limit: 5 }, sysadmin.jwt, '00000000-0000-4000-8000-000000000000')).status, 404);
  t.equal((await put({ device_limit: 5 }, sysadmin.jwt, 'nope')).status, 400);
  await gw2.proc.stop();
});

t.test('lowering the limit starts a new grace period; the sweep ends it when machines age out and starts it when they return', async (t) => {
  const r = await put({ device_limit: 3 });
  t.equal(r.body.limit_status, 'exceeded');
  t.ok(r.body.grace_period.active, 'a new grace period starts at the change');
  t.equal((await hb('n3')).status, 200, 'new machines accepted during it');
  await eventually(async () => (await machines()).includes('n3'), 10_000, 'n3 applied');

  // Every machine but two unseen for 31 days: back within the limit.
  await s.pool.query(`UPDATE machines SET last_seen_at = now() - interval '31 days' WHERE customer_id = $1 AND slug NOT IN ('m1', 'm2')`, [s.customer.id]);
  // … and what 31 days of silence leave in Redis: their heartbeat keys and state long expired (with
  // them live, a heartbeat that changes nothing would wait for the periodic Postgres write).
  const aged = await s.pool.query<{ id: string }>(
    `SELECT i.id FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.customer_id = $1 AND m.slug NOT IN ('m1', 'm2')`,
    [s.customer.id],
  );
  for (const { id } of aged.rows) await s.redis.del(`${s.env.REDIS_PREFIX}hb:${id}`, `${s.env.REDIS_PREFIX}hs:${id}`);
  const ok = await eventually(async () => {
    const x = await status();
    return x.grace_period.started_at === null ? x : null;
  }, 10_000, 'the sweep ends the grace period');
  t.match(ok, { device_count: 2, limit_status: 'ok' });

  for (const m of ['m3', 'm4']) t.equal((await hb(m)).status, 200, `${m} comes back`);
  const over = await eventually(async () => {
    const x = await status();
    return x.grace_period.started_at !== null ? x : null;
  }, 10_000, 'the sweep starts a grace period for returning machines');
  t.match(over, { device_count: 4, limit_status: 'exceeded' });
});

t.test('license-key of another customer: 404; a system admin may read any', async (t) => {
  const other = await s.newCustomer('lic-other');
  const r = await get(`${s.apiUrl}/api/customers/${other.customer.id}/license-key`, owner.jwt);
  t.equal(r.status, 404);
  t.equal((await get(`${s.apiUrl}/api/customers/not-a-uuid/license-key`, owner.jwt)).status, 400);
  const admin = await post(`${s.apiUrl}/api/auth/switch-customer`, sysadmin.jwt, { customer_id: s.customer.id });
  const any = await get(`${s.apiUrl}/api/customers/${other.customer.id}/license-key`, admin.body.token);
  t.equal(any.status, 200);
  t.match(any.body, { customer_id: other.customer.id, device_limit: 5, tier: 'free' });
});

t.test('CLI: fleet licence show / set', async (t) => {
  const fleet = (...args: string[]) => spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });
  const other = await s.newCustomer('lic-cli');
  const show = fleet('licence', 'show', other.customer.slug);
  t.equal(show.status, 0, show.stderr);
  t.match(JSON.parse(show.stdout), { customer: other.customer.slug, tier: 'free', device_limit: 5, device_count: 0, limit_status: 'ok' });
  const set = fleet('licence', 'set', other.customer.slug, '--limit', '12', '--tier', 'paid', '--grace-days', '7');
  t.equal(set.status, 0, set.stderr);
  t.match(JSON.parse(set.stdout), { tier: 'paid', device_limit: 12, grace_period: { days: 7 } });
  t.equal(fleet('licence', 'set', other.customer.slug, '--tier', 'gold').status, 1);
  t.equal(fleet('licence', 'set', other.customer.slug).status, 1, 'nothing to change');
  t.equal(fleet('licence', 'show', 'no-such-customer').status, 1);
});
