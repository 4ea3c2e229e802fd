// A silence's red carries the cause of the judge that found it (lib/contract/schemas/traffic-light.ts
// LightCause; docs/api.md "cause") when its last heartbeat waited in Redis. The expiry listener and
// the sweep first write such a heartbeat (workers/heartbeat-state.ts HeartbeatFlusher.repair). That
// write used to judge the colour in its own transaction, as a report's: when the horizon had passed
// the deadline by then (the expiry event came late, the sweep came after the deadline), the red was
// recorded there with cause `report`, so analysts counting `cause` saw reports where silences were
// found, and the cluster test of the promoted replica's expiry events (test/cluster/redis.test.ts)
// failed whenever the repair won. The repair no longer judges (its caller does, right after): the
// red is the judge's, recorded once. Real servers; the listener, the sweep and the flusher are the
// workers' own classes.
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
import type { LightCause, LightEvent } from '../../lib/domain/traffic-light.js';
import type { Report } from '../../lib/contract/messages.js';

const s = await testStack(t, 'repaircause', { gateway: false, worker: false, api: false });
const log = createLogger('test', 'silent');
if (!(await ensureExpiryEvents(s.redis, log))) throw new Error('the test Redis refuses to publish expired-key events');
const TIMEOUT_S = 2;
await applyLightDefaults(s.pool, TIMEOUT_S, 80);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// One worker's heartbeat path (its skip, its flusher) with the light judged on writes, as in a worker.
const { deps, state } = heartbeatWorker(s, log, { timeoutMs: TIMEOUT_S * 1000, intervalMs: 60_000, idCacheSize: 1000 });
const params = { warningWindowS: 300 };
const horizon = new Horizon(null, [], log);
const sink = new LightEventSink(s.pool, s.ch, s.nc, s.env.SUBJECT_PREFIX!, null, log);
const fromRepair: LightEvent[] = [];
const flusher = new HeartbeatFlusher(s.pool, state, new ReportLights(sink, params, horizon, (e) => fromRepair.push(...e)), log);

const report = (machine: string, receivedAt: number): Report => ({
  id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt, body: { version: '1.0' },
});

/** An instance whose newest heartbeat skipped Postgres (it changed nothing): it waits in Redis for the flusher. */
async function waitingHeartbeat(machine: string): Promise<{ id: string; last: number }> {
  const first = Date.now() - 300;
  const ids = await applyBatch(deps, [report(machine, first)], []);
  const id = ids.values().next().value!.instanceId;
  const skipped = state.counts.skipped;
  const last = Date.now();
  await applyBatch(deps, [report(machine, last)], []);
  if (state.counts.skipped !== skipped + 1) throw new Error('the second heartbeat was written, not skipped: the test would prove nothing');
  return { id, last };
}

const stored = async (id: string) =>
  (await s.pool.query<{ light: string; hb: string }>(`SELECT light, (extract(epoch FROM last_heartbeat_at) * 1000)::bigint::text AS hb FROM instances JOIN instance_lights ON instance_id = id WHERE id = $1`, [id])).rows[0]!;
const inClickHouse = (id: string) =>
  chRows<{ to_light: string; cause: LightCause; at_ms: string }>(s.ch, `SELECT to_light, cause, at_ms FROM light_events FINAL WHERE instance_id = '${id}'`);

/** The instance is red at its waiting heartbeat, recorded once as `cause` (not by the repair), in Postgres and ClickHouse. */
async function redByJudge(t: Test, id: string, last: number, cause: LightCause): Promise<void> {
  const row = await stored(id);
  t.equal(row.light, 'red', 'red');
  t.equal(Number(row.hb), last, 'at the heartbeat that waited in Redis (the repair wrote it)');
  t.same(fromRepair.filter((e) => e.instance_id === id), [], 'the repair recorded no change (the horizon had passed the deadline there)');
  const rows = await eventually(async () => {
    const x = await inClickHouse(id);
    return x.length > 0 && x;
  }, 10_000, 'the change in ClickHouse');
  t.same(rows.map((x) => [x.to_light, x.cause, Number(x.at_ms)]), [['red', cause, last + TIMEOUT_S * 1000]], `stored once, cause ${cause}, at the last heartbeat + the timeout`);
}

t.test('the sweep comes after the deadline: the repair writes the waiting heartbeat, and the red is the sweep\'s', async (t) => {
  const { id, last } = await waitingHeartbeat('rc-sweep');
  await sleep(TIMEOUT_S * 1000 + 300);
  const sweep = new LightSweep(s.pool, sink, params, horizon, { batch: 100 }, () => {}, (ids) => flusher.repair(ids), () => {}, state);
  t.ok((await sweep.sweep()).ran, 'the sweep ran');
  await redByJudge(t, id, last, 'sweep');
});

t.test('the expiry event is handled after the deadline: the repair writes the waiting heartbeat, and the red is the expiry\'s', async (t) => {
  // The repair waits a moment (a busy Postgres), so the horizon has passed the deadline when it
  // writes: the judgement in the write is the one that finds the silence.
  const listener = new ExpiryListener(s.env.REDIS_URL!, s.env.REDIS_PREFIX!, s.pool, sink, params, horizon, 100, log, () => {}, async (ids) => {
    await sleep(300);
    return flusher.repair(ids);
  }, state);
  await listener.start();
  t.teardown(() => listener.stop());
  const { id, last } = await waitingHeartbeat('rc-expiry');
  await eventually(async () => (await stored(id)).light === 'red', 15_000, 'red by the expiry event');
  await redByJudge(t, id, last, 'expiry');
});

t.test('a report still records its own changes as a report\'s', async (t) => {
  // What a report changes stays the report's: a heartbeat that brings a silent instance back.
  const { id } = await waitingHeartbeat('rc-report');
  await sleep(TIMEOUT_S * 1000 + 300);
  const sweep = new LightSweep(s.pool, sink, params, horizon, { batch: 100 }, () => {}, (ids) => flusher.repair(ids), () => {}, state);
  await sweep.sweep();
  t.equal((await stored(id)).light, 'red', 'red after the silence');
  const back = Date.now();
  const events: LightEvent[] = [];
  const withLights = { ...deps, lights: new ReportLights(sink, params, horizon, (e) => events.push(...e)) };
  await applyBatch(withLights, [report('rc-report', back)], []);
  t.same(events.filter((e) => e.instance_id === id).map((e) => [e.to, e.cause]), [['green', 'report']], 'green again, by the report');
});
