// Silence judged from a heartbeat that waits in Redis (workers/heartbeat-state.ts: an unchanged
// heartbeat skips Postgres until the flusher writes it, up to PG_HEARTBEAT_INTERVAL_S later). The
// expiry listener and the sweep read those heartbeats' receive times (HeartbeatState.waiting) and
// the recording statement takes them as if written (lib/store/light-events.ts TRANSITION_SQL
// `base`): red at the deadline of the newest heartbeat, recorded once with the judge's cause; an
// instance whose newest heartbeat is fresh stays as it is even when Postgres's is past its late
// time; and its silence time in Redis is the newest heartbeat's. Nothing is written to Postgres at
// the moment of silence (it used to be: 100,000 heartbeat writes when a fleet fell silent); the
// flusher writes the heartbeat when it comes due, and that changes nothing. Before that, the write
// judged the colour as a report's and recorded silences with cause `report` (the cluster test of a
// promoted replica's expiry events, test/cluster/redis.test.ts, failed on it). Real servers; the
// listener, the sweep and the flusher are the workers' own classes.
import t, { type Test } from 'tap';
import { testStack, eventually, chRows } from '../helpers/stack.js';
import { createLogger } from '../../lib/infra/log.js';
import { applyBatch } from '../../workers/apply-batch.js';
import { LightSweep } from '../../workers/light-sweep.js';
import { ExpiryListener, ensureExpiryEvents } from '../../workers/light-expiry.js';
import { Horizon, LightEventSink, ReportLights } from '../../workers/traffic-light.js';
import { HeartbeatFlusher } from '../../workers/heartbeat-state.js';
import { heartbeatWorker } from '../helpers/heartbeat-worker.js';
import { applyLightDefaults } from '../../lib/store/timeout-rules.js';
import { randomUUID } from 'node:crypto';
import { redisKeys } from '../../lib/infra/redis.js';
import type { LightCause, LightEvent } from '../../lib/domain/traffic-light.js';
import type { Report } from '../../lib/contract/messages.js';

const s = await testStack(t, 'lightwaiting', { gateway: false, worker: false, api: false });
const log = createLogger('test', 'silent');
if (!(await ensureExpiryEvents(s.redis, log))) throw new Error('the test Redis refuses to publish expired-key events');
const TIMEOUT_S = 2;
await applyLightDefaults(s.pool, TIMEOUT_S, 80);
/** The late share: 80 % of the timeout. */
const LATE_MS = TIMEOUT_S * 800;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// One worker's heartbeat path (its skip, its flusher) with the light judged on writes, as in a worker.
const { deps, state } = heartbeatWorker(s, log, { timeoutMs: TIMEOUT_S * 1000, intervalMs: 60_000, idCacheSize: 1000 });
const params = { warningWindowS: 300 };
const horizon = new Horizon(null, [], log);
const sink = new LightEventSink(s.pool, s.ch, s.nc, s.env.SUBJECT_PREFIX!, null, log);
const fromFlusher: LightEvent[] = [];
const flusher = new HeartbeatFlusher(s.pool, state, new ReportLights(sink, params, horizon, (e) => fromFlusher.push(...e)), log);
const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);
const waiting = (ids: string[]) => state.waiting(ids);

const report = (machine: string, receivedAt: number): Report => ({
  id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt, body: { version: '1.0' },
});

/** An instance whose newest heartbeat skipped Postgres (it changed nothing): it waits in Redis for the flusher. */
async function waitingHeartbeat(machine: string, ago = 300, judged = false): Promise<{ id: string; first: number; last: number }> {
  const first = Date.now() - ago;
  // `judged`: the first heartbeat judged as a worker's write judges it (green), not left grey.
  const ids = await applyBatch(judged ? { ...deps, lights: new ReportLights(sink, params, horizon) } : deps, [report(machine, first)], []);
  const id = ids.values().next().value!.instanceId;
  const skipped = state.counts.skipped;
  const last = Date.now();
  await applyBatch(deps, [report(machine, last)], []);
  if (state.counts.skipped !== skipped + 1) throw new Error('the second heartbeat was written, not skipped: the test would prove nothing');
  return { id, first, last };
}

const stored = async (id: string) =>
  (await s.pool.query<{ light: string; hb: string }>(`SELECT light, (extract(epoch FROM last_heartbeat_at) * 1000)::bigint::text AS hb FROM instances JOIN instance_lights ON instance_id = id WHERE id = $1`, [id])).rows[0]!;
const inClickHouse = (id: string) =>
  chRows<{ to_light: string; cause: LightCause; at_ms: string }>(s.ch, `SELECT to_light, cause, at_ms FROM light_events FINAL WHERE instance_id = '${id}'`);

/**
 * The instance is red at the deadline of its heartbeat that waited in Redis, recorded once as
 * `cause`, in Postgres and ClickHouse; Postgres got that heartbeat only from the flusher, after,
 * and its write changed nothing.
 */
async function redByJudge(t: Test, id: string, first: number, last: number, cause: LightCause): Promise<void> {
  const row = await stored(id);
  t.equal(row.light, 'red', 'red');
  t.equal(Number(row.hb), first, 'Postgres still holds the older heartbeat: nothing written at the moment of silence');
  const rows = await eventually(async () => {
    const x = await inClickHouse(id);
    return x.length > 0 && x;
  }, 10_000, 'the change in ClickHouse');
  t.same(rows.map((x) => [x.to_light, x.cause, Number(x.at_ms)]), [['red', cause, last + TIMEOUT_S * 1000]], `stored once, cause ${cause}, at the waiting heartbeat + the timeout`);
  await s.redis.zadd(keys.heartbeatDue(id), 0, id); // its due time, come now
  t.equal(await flusher.flushDue(), 1, 'the flusher writes it when due');
  t.equal(Number((await stored(id)).hb), last, 'Postgres holds the newest heartbeat');
  t.equal((await stored(id)).light, 'red', 'still red');
  t.same(fromFlusher.filter((e) => e.instance_id === id), [], "the flusher's judgement recorded nothing");
  await sleep(300);
  t.equal((await inClickHouse(id)).length, 1, 'one change in all');
}

t.test('the sweep comes after the deadline: red at the waiting heartbeat\'s deadline, the sweep\'s', async (t) => {
  const { id, first, last } = await waitingHeartbeat('rc-sweep');
  await sleep(TIMEOUT_S * 1000 + 300);
  const sweep = new LightSweep(s.pool, sink, params, horizon, { batch: 100 }, () => {}, waiting, () => {}, state);
  t.ok((await sweep.sweep()).ran, 'the sweep ran');
  await redByJudge(t, id, first, last, 'sweep');
});

t.test('the expiry event is handled after the deadline: red at the waiting heartbeat\'s deadline, the expiry\'s', async (t) => {
  // The read of the waiting times is slow (a busy Redis): the horizon has passed the deadline by
  // the time the instance is judged.
  const listener = new ExpiryListener(s.env.REDIS_URL!, s.env.REDIS_PREFIX!, s.pool, sink, params, horizon, 100, log, () => {}, async (ids) => {
    await sleep(300);
    return state.waiting(ids);
  }, state);
  await listener.start();
  t.teardown(() => listener.stop());
  const { id, first, last } = await waitingHeartbeat('rc-expiry');
  await eventually(async () => (await stored(id)).light === 'red', 15_000, 'red by the expiry event');
  await redByJudge(t, id, first, last, 'expiry');
});

t.test("Postgres's heartbeat is past its late time, the waiting one is not: the sweep changes nothing, and the silence time is the waiting one's", async (t) => {
  // The first heartbeat, judged green when written, is 1.8 s old when the sweep runs (late after
  // 1.6 s), so its stored recheck time brings it to the sweep; Redis's newest is 0.8 s old.
  const { id, last } = await waitingHeartbeat('rc-fresh', 1000, true);
  t.equal((await stored(id)).light, 'green', 'green when written');
  await sleep(800);
  const events: LightEvent[] = [];
  const sweep = new LightSweep(s.pool, sink, params, horizon, { batch: 100 }, (e) => events.push(...e), waiting, () => {}, state);
  const lateBy = (await s.pool.query<{ late: boolean }>(`SELECT late_at < now() AS late FROM instances WHERE id = $1`, [id])).rows[0]!.late;
  t.ok(lateBy, "by Postgres's heartbeat alone it is late");
  t.ok((await sweep.sweep()).ran);
  t.same(events.filter((e) => e.instance_id === id), [], 'no change');
  t.equal((await stored(id)).light, 'green', 'green');
  const silence = await s.redis.zscore(keys.heartbeatSilenceOf(keys.groupOf(id)), id);
  t.equal(Number(silence), last + LATE_MS, 'its silence time: the waiting heartbeat + its late share');
  t.equal(await s.redis.exists(keys.heartbeat(id)), 0, 'its heartbeat key dropped (the next heartbeat goes to Postgres)');
  // And it turns late at that time, from the sweep's Redis candidates.
  await sleep(Math.max(0, last + LATE_MS - Date.now()) + 100);
  await sweep.sweep();
  t.same(events.filter((e) => e.instance_id === id).map((e) => [e.to, Date.parse(e.at)]), [['late', last + LATE_MS]], 'late at the waiting heartbeat + 1.6 s');
});

t.test('a report still records its own changes as a report\'s', async (t) => {
  // What a report changes stays the report's: a heartbeat that brings a silent instance back.
  const { id } = await waitingHeartbeat('rc-report');
  await sleep(TIMEOUT_S * 1000 + 300);
  const sweep = new LightSweep(s.pool, sink, params, horizon, { batch: 100 }, () => {}, waiting, () => {}, state);
  await sweep.sweep();
  t.equal((await stored(id)).light, 'red', 'red after the silence');
  const back = Date.now();
  const events: LightEvent[] = [];
  const withLights = { ...deps, lights: new ReportLights(sink, params, horizon, (e) => events.push(...e)) };
  await applyBatch(withLights, [report('rc-report', back)], []);
  t.same(events.filter((e) => e.instance_id === id).map((e) => [e.to, e.cause]), [['green', 'report']], 'green again, by the report');
});
