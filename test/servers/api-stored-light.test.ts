// The api shows the stored colour (docs/decisions.md "Traffic light"): never one it derives from
// Postgres's heartbeat times, which lag the newest heartbeat while it waits in Redis
// (workers/heartbeat-state.ts); a stored reason follows the judgement even when the colour does not
// change; and a colour filter and the counts read the caller's rows only, through the customer's
// own index entries.
import t from 'tap';
import { testStack } from '../helpers/stack.js';
import { judgeAll } from '../helpers/lights.js';
import { injectApi } from '../helpers/api.js';
import { redisKeys } from '../../lib/infra/redis.js';
import { createCustomer, createToken } from '../../lib/store/customers.js';
import { encodeFields, heartbeatFields } from '../../lib/store/live-heartbeats.js';
import { Instance, InstanceDetail } from '../../lib/contract/schemas/api.js';
import { compile } from '../../lib/contract/validation.js';

const s = await testStack(t, 'storedlight', { gateway: false, worker: false, api: false });
const app = await injectApi(t, s, { API_COUNT_CACHE_MS: '0' });

const other = await createCustomer(s.pool, `stored-other-${s.id}`);
const otherAuth = { authorization: `Bearer ${(await createToken(s.pool, other.id, 'read', ['read'])).token}` };
const auth = { authorization: `Bearer ${s.token}` };

/** One instance, written as the ingest upsert leaves it (last heartbeat `hbAgoS` ago, or none). */
async function instance(customerId: string, slug: string, hbAgoS: number | null, status = 'running'): Promise<string> {
  const m = (await s.pool.query<{ id: string }>(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, $2, now(), now()) RETURNING id`, [customerId, slug])).rows[0]!.id;
  const hb = hbAgoS === null ? 'NULL' : `now() - make_interval(secs => ${hbAgoS})`;
  return (
    await s.pool.query<{ id: string }>(
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, status, status_at, deadline, late_at)
       VALUES ($1, $2, 'agent', now() - interval '1 day', COALESCE(${hb}, now()), ${hb}, $3, now(), light_deadline(${hb}, NULL), light_late_at(${hb}, NULL, NULL)) RETURNING id`,
      [customerId, m, status],
    )
  ).rows[0]!.id;
}

type Inst = { id: string; light: string; light_reason: string; last_heartbeat_at: string };
const get = async (id: string, headers = auth) => (await app.inject({ method: 'GET', url: `/api/instances/${id}`, headers })).json() as Inst;
const list = async (query: string, headers = auth) => (await app.inject({ method: 'GET', url: `/api/instances?${query}`, headers })).json() as { items: Inst[]; total: number };
const summary = async (headers = auth) => ((await app.inject({ method: 'GET', url: '/api/fleet/summary', headers })).json() as { lights: Record<string, number> }).lights;

t.test('a heartbeat newer than Postgres holds: the stored green, never a red derived from Postgres', async (t) => {
  // Postgres's last heartbeat is 10 minutes old (past the 300 s timeout); the newest one, a second
  // old, waits in Redis for its Postgres write. A worker judged the instance with it (green).
  const id = await instance(s.customer.id, 'waiting', 600);
  await s.pool.query(`UPDATE instance_lights SET light = 'green', light_reason = 'ok', light_since = now() - interval '1 hour' WHERE instance_id = $1`, [id]);
  const at = Date.now() - 1000;
  const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);
  await s.redis.hset(keys.heartbeatState(id), 'hb', encodeFields(heartbeatFields(at, null, false, {})), 'seen', at);
  const one = await get(id);
  t.same([one.light, one.light_reason], ['green', 'ok'], 'the instance: green');
  t.equal(Date.parse(one.last_heartbeat_at), at, 'its last heartbeat: the one Redis holds');
  t.same(
    (await list('machine=waiting')).items.map((i) => i.light),
    ['green'],
    'the list: green',
  );
  t.equal((await list('light=red')).total, 0, 'not among the red');
  t.equal((await summary()).red ?? 0, 0, 'not counted red');
  // Gone before the tests below judge from Postgres alone (as no worker would: a worker writes the
  // waiting heartbeat first).
  await s.pool.query('DELETE FROM instances WHERE id = $1', [id]);
});

t.test("the list's items and the instance hold exactly the schema's fields, in its order, with Redis's heartbeat merged in", async (t) => {
  // api/handlers/instances.ts toInstance names every field (one hidden class for every row): a
  // column instanceSelect no longer gives, or gives under another name, would leave its field out.
  const id = await instance(s.customer.id, 'shape-one', 60);
  await judgeAll(s.pool);
  const at = Date.now() - 500;
  const agentTs = at - 200;
  const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);
  const hb = { version: '2.0.0-ü', pid: 4242, uptime_seconds: 77, ip_addresses: ['10.0.0.1', 'fe80::1'], group: 'g-é', location: 'here', group_priority: -3, sort_priority: 9 };
  await s.redis.hset(keys.heartbeatState(id), 'hb', encodeFields(heartbeatFields(at, agentTs, false, hb)), 'seen', at);
  const fields = Object.keys(Instance.properties);
  const valid = compile(Instance);
  const item = (await list('machine=shape-one')).items[0] as unknown as Record<string, unknown>;
  const one = (await app.inject({ method: 'GET', url: `/api/instances/${id}`, headers: auth })).json() as Record<string, unknown>;
  t.same(Object.keys(item), fields, "a list item: the schema's fields, in its order, no other");
  t.same(Object.keys(one), Object.keys(InstanceDetail.properties), "the instance: the detail schema's fields, in its order");
  t.ok(valid(item), `a list item is an Instance: ${JSON.stringify(valid.errorsOf(item))}`);
  t.ok(compile(InstanceDetail)(one), 'the instance is an InstanceDetail');
  for (const k of fields) t.same(one[k], item[k], `${k}: the same in the list and the instance`);
  t.match(item, {
    id,
    machine: 'shape-one',
    software: 'agent',
    light: 'green',
    last_heartbeat_at: new Date(at).toISOString(),
    last_seen_at: new Date(at).toISOString(),
    agent_ts: new Date(agentTs).toISOString(),
    version: hb.version,
    pid: hb.pid,
    uptime_seconds: hb.uptime_seconds,
    ip_addresses: hb.ip_addresses,
    group: hb.group,
    location: hb.location,
    group_priority: hb.group_priority,
    sort_priority: hb.sort_priority,
    clock_skew: false,
    timeout_s: 300,
  });
  t.equal(Date.parse(item.deadline as string), at + 300_000, "the deadline follows Redis's heartbeat");
  t.same([one.snapshot, one.retired_at], [null, null], 'no snapshot, not retired');
  await s.pool.query('DELETE FROM instances WHERE id = $1', [id]);
});

t.test('the stored reason follows the judgement when the colour stays', async (t) => {
  const id = await instance(s.customer.id, 'reasons', 5, 'degraded');
  await judgeAll(s.pool, s.customer.id);
  const before = await s.pool.query<{ seq: string }>(`SELECT light_seq::text AS seq FROM instance_lights WHERE instance_id = $1`, [id]);
  t.same([(await get(id)).light, (await get(id)).light_reason], ['yellow', 'status degraded']);
  // The status ends `degraded`, and a warning arrived: still yellow, for another reason.
  await s.pool.query(`UPDATE instances SET status = 'running', last_warning_at = now() WHERE id = $1`, [id]);
  await judgeAll(s.pool, s.customer.id);
  const after = await get(id);
  t.equal(after.light, 'yellow');
  t.match(after.light_reason, /^warning or error diagnostic/, `the reason now: ${after.light_reason}`);
  const seq = await s.pool.query<{ seq: string }>(`SELECT light_seq::text AS seq FROM instance_lights WHERE instance_id = $1`, [id]);
  t.equal(seq.rows[0]!.seq, before.rows[0]!.seq, 'no change of colour recorded (no event)');
});

t.test("a colour filter and the counts read the caller's rows only", async (t) => {
  // The other customer: many red instances (status error), one of them named like ours.
  for (let i = 0; i < 30; i++) await instance(other.id, `o${i}`, 5, 'error');
  const mine = await instance(s.customer.id, 'mine-red', 5, 'error');
  await judgeAll(s.pool);
  await s.pool.query('ANALYZE instance_lights');
  const red = await list('light=red');
  t.same(
    red.items.map((i) => i.id),
    [mine],
    'our red list: our one red instance',
  );
  t.equal(red.total, 1);
  t.equal((await list('light=red', otherAuth)).total, 30, "theirs: their 30");
  t.equal((await summary(otherAuth)).red, 30);
  const rowsOfOthers = await s.pool.query(`SELECT 1 FROM instance_lights l JOIN instances i ON i.id = l.instance_id WHERE l.customer_id <> i.customer_id`);
  t.equal(rowsOfOthers.rowCount, 0, "every stored row names its own instance's customer");
});
