// Redis refusing writes in the middle of the light's work, on a Redis of the test's own.
//
// Out of memory (`maxmemory` reached, `noeviction`): Redis refuses the commands that need memory
// (`ZADD`) and runs those that free it (`ZREM`). A script is not undone when a command in it fails,
// so the silence times put back after a judgement (HeartbeatState.settleSilences: drop the due
// entries, then set the new times) rely on Redis's rule that a script which has written is let
// finish: applied whole or refused before its first write, never in part (an entry dropped without
// its new time would leave an instance judged unchanged with no silence time in Redis until its
// stored recheck time, later by Postgres's lag). This pins that rule for the scripts as written.
//
// Read-only (made the replica of a primary that is not there, as a failover gone wrong leaves it:
// every write answered `READONLY …`, its data kept). The expiry listener has taken a batch of expired heartbeats and asks Redis for their waiting
// heartbeats (HeartbeatState.waiting, a script that drops the heartbeat keys): refused. The batch is
// left to the sweep (workers/light-expiry.ts), whose runs are refused too while Redis is read-only
// (its candidate read writes). Nothing may be recorded from half an answer meanwhile; once Redis
// takes writes again, every silent instance turns red exactly once, at the deadline of its newest
// heartbeat, the one that waited in Redis (Postgres holds an older one), not at the older one's.
// On a Redis of the test's own; the listener, the sweep and the heartbeat path are the workers'.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, eventually, chRows } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { OwnRedis } from '../helpers/redis-server.js';
import { heartbeatWorker } from '../helpers/heartbeat-worker.js';
import { createLogger } from '../../lib/infra/log.js';
import { applyBatch } from '../../workers/apply-batch.js';
import { LightSweep } from '../../workers/light-sweep.js';
import { ExpiryListener, ensureExpiryEvents } from '../../workers/light-expiry.js';
import { Horizon, LightEventSink, ReportLights } from '../../workers/traffic-light.js';
import { applyLightDefaults } from '../../lib/store/timeout-rules.js';
import { redisKeys } from '../../lib/infra/redis.js';
import type { LightCause, LightEvent } from '../../lib/domain/traffic-light.js';
import type { Report } from '../../lib/contract/messages.js';

const redis = new OwnRedis(await freePort());
await redis.start();
t.teardown(() => redis.destroy());

const s = await testStack(t, 'lightro', { redisUrl: redis.url, gateway: false, worker: false, api: false });
const log = createLogger('test', 'silent');
if (!(await ensureExpiryEvents(s.redis, log))) throw new Error('the test Redis refuses to publish expired-key events');
const TIMEOUT_S = 2;
await applyLightDefaults(s.pool, TIMEOUT_S, 80);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const { deps, state } = heartbeatWorker(s, log, { timeoutMs: TIMEOUT_S * 1000, intervalMs: 60_000, idCacheSize: 1000 });
const params = { warningWindowS: 300 };
const horizon = new Horizon(null, [], log);
const sink = new LightEventSink(s.pool, s.ch, s.nc, s.env.SUBJECT_PREFIX!, null, log);
const report = (machine: string, receivedAt: number): Report => ({
  id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt, body: { version: '1.0' },
});

t.test('out of memory while silence times are settled: each script applied whole or refused whole, never in part', async (t) => {
  const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);
  const h = Date.now();
  const group = keys.groupOf(randomUUID());
  const zset = keys.heartbeatSilenceOf(group);
  const idsInGroup = (n: number) => {
    const out: string[] = [];
    while (out.length < n) {
      const id = randomUUID();
      if (keys.groupOf(id) === group) out.push(id);
    }
    return out;
  };
  const underOom = async <T>(f: () => Promise<T>): Promise<T> => {
    await redis.config('maxmemory', '1');
    try {
      return await f();
    } finally {
      await redis.config('maxmemory', '0');
    }
  };
  const entries = () => s.redis.zrange(zset, 0, -1, 'WITHSCORES');

  // Due entries to drop first: the script's first write frees memory, and Redis lets a script
  // that has written go on (its later ZADD too), so the settling is whole.
  const [a, b, lit, later] = idsInGroup(4) as [string, string, string, string];
  await s.redis.zadd(zset, h - 1000, a, h - 1000, b, h - 1000, lit, h + 5000, later);
  await underOom(() => state.settleSilences([a, b, lit, later], h, [{ id: lit, at: h + 60_000 }]));
  t.same(await entries(), [later, String(h + 5000), lit, String(h + 60_000)], 'settled whole: the due ones dropped, the later one kept, the new time set');
  await s.redis.del(zset);

  // Nothing due: the script's first write is the ZADD, refused, and nothing of it is applied.
  const [c, d] = idsInGroup(2) as [string, string];
  await s.redis.zadd(zset, h + 5000, c, h + 5000, d);
  const before = await entries();
  await underOom(() => t.rejects(state.settleSilences([c, d], h, [{ id: c, at: h + 60_000 }]), /OOM/, 'refused: out of memory'));
  t.same(await entries(), before, 'refused whole: every entry as it was');
  await s.redis.del(zset);

  // More than one script's chunk (1,000 ids), the lit one last in the list, so its id and its new
  // time are in different scripts: it ends with its new time, not dropped by the later script.
  const many = idsInGroup(2100);
  const last = many[many.length - 1]!;
  await s.redis.zadd(zset, ...many.flatMap((id) => [h - 1000, id]));
  await underOom(() => state.settleSilences(many, h, [{ id: last, at: h + 60_000 }]));
  t.same(await entries(), [last, String(h + 60_000)], 'settled whole across the chunks: only the new time left');
  await s.redis.del(zset);
});

t.test('read-only while the listener asks for the waiting heartbeats: nothing recorded meanwhile; afterwards each instance red once, at its newest heartbeat\'s deadline', async (t) => {
  const N = 20;
  // Each instance: a first heartbeat written (and judged green), then a newer one that changes
  // nothing and so waits in Redis for the flusher.
  const inst: { id: string; first: number; last: number }[] = [];
  for (let k = 0; k < N; k++) {
    const machine = `ro-${k}`;
    const first = Date.now() - 500;
    const ids = await applyBatch({ ...deps, lights: new ReportLights(sink, params, horizon) }, [report(machine, first)], []);
    const id = ids.values().next().value!.instanceId;
    const skipped = state.counts.skipped;
    const last = Date.now();
    await applyBatch(deps, [report(machine, last)], []);
    if (state.counts.skipped !== skipped + 1) throw new Error('the newer heartbeat was written, not skipped: the test would prove nothing');
    inst.push({ id, first, last });
  }
  const ids = inst.map((x) => x.id);
  const lights = async () => (await s.pool.query<{ light: string; n: number }>(`SELECT light, count(*)::int AS n FROM instance_lights WHERE instance_id = ANY($1::uuid[]) GROUP BY light`, [ids])).rows;
  t.same(await lights(), [{ light: 'green', n: N }], 'all green');

  // The first time the listener asks for the waiting heartbeats, Redis turns read-only first.
  const nowhere = await freePort();
  let asked = 0;
  const refusals: string[] = [];
  const events: LightEvent[] = [];
  const listener = new ExpiryListener(s.env.REDIS_URL!, s.env.REDIS_PREFIX!, s.pool, sink, params, horizon, 100, log, (e) => events.push(...e), async (batch) => {
    if (asked++ === 0) await redis.command('REPLICAOF', '127.0.0.1', String(nowhere));
    try {
      return await state.waiting(batch);
    } catch (e) {
      refusals.push((e as Error).message);
      throw e;
    }
  }, state);
  await listener.start();
  let readOnly = true;
  t.teardown(async () => {
    await listener.stop();
    if (readOnly) await redis.command('REPLICAOF', 'NO', 'ONE');
  });
  await eventually(async () => refusals.length > 0, 15_000, "the listener's batch refused");
  t.match(refusals[0], /READONLY/, `refused as read-only (${refusals[0]})`);

  // While read-only: the sweep's runs fail, and nothing is recorded.
  const sweep = new LightSweep(s.pool, sink, params, horizon, { batch: 100 }, (e) => events.push(...e), (batch) => state.waiting(batch), () => {}, state);
  await sleep(TIMEOUT_S * 1000);
  await t.rejects(sweep.sweep(), /READONLY/, 'a sweep run while read-only fails');
  t.same(events, [], 'no change recorded while Redis is read-only');
  t.same(await lights(), [{ light: 'green', n: N }], 'all still green in Postgres');

  // Writable again: the sweep (and the expiries Redis publishes now) turn each one red.
  await redis.command('REPLICAOF', 'NO', 'ONE');
  readOnly = false;
  await eventually(async () => {
    await sweep.sweep();
    return (await lights()).length === 1 && (await lights())[0]!.light === 'red';
  }, 20_000, 'all red once Redis takes writes');
  await sleep(500);
  const changes = events.filter((e) => ids.includes(e.instance_id));
  t.equal(changes.length, N, `one change per instance (${changes.length})`);
  t.ok(changes.every((e) => e.from === 'green' && e.to === 'red'), 'green to red');
  const rows = await eventually(async () => {
    const x = await chRows<{ instance_id: string; to_light: string; cause: LightCause; at_ms: string }>(
      s.ch,
      `SELECT instance_id, to_light, cause, at_ms FROM light_events FINAL WHERE instance_id IN (${ids.map((id) => `'${id}'`).join(',')}) AND to_light = 'red'`,
    );
    return x.length >= N && x;
  }, 10_000, 'the changes in ClickHouse');
  t.equal(rows.length, N, 'one red row each in ClickHouse');
  const byId = new Map(inst.map((x) => [x.id, x]));
  const wrong = rows.filter((r) => Number(r.at_ms) !== byId.get(r.instance_id)!.last + TIMEOUT_S * 1000);
  t.same(wrong, [], "each red at its waiting heartbeat's deadline, not at the older one's Postgres holds");
  t.ok(rows.every((r) => r.cause === 'sweep' || r.cause === 'expiry'), `caused by silence (${[...new Set(rows.map((r) => r.cause))].join(', ')})`);
});
