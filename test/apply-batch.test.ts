// The worker's batch path in-process: applyBatch() and the isolation around it over this file's own
// databases and Redis prefix, without a worker process or NATS. What a batch writes, that applying
// it again changes nothing, that the newest report wins whatever the order, how a broken agent
// clock is stored, and that isolation finds the one report storage refuses.
import t from 'tap';
import { HeartbeatState } from '../workers/heartbeat-state.js';
import { randomUUID } from 'node:crypto';
import { testStack, chRows } from './helpers/stack.js';
import { applyBatch, type ApplyDeps } from '../workers/apply-batch.js';
import { applyIsolated } from '../workers/isolate.js';
import type { Report } from '../lib/messages.js';

const s = await testStack(t, 'applybatch', { gateway: false, worker: false, api: false });
const deps: ApplyDeps = {
  pool: s.pool,
  ch: s.ch,
  redis: s.redis,
  redisPrefix: s.env.REDIS_PREFIX!,
  heartbeats: new HeartbeatState(s.redis, s.env.REDIS_PREFIX!, { heartbeatTimeoutMs: 300_000, pgIntervalMs: 240_000, idCacheSize: 1000 }),
  idempotencyTtlS: 60,
  tsWindow: { pastMs: 30 * 86_400_000, futureMs: 86_400_000 },
  ackTimeoutS: 3600,
};
const report = (machine: string, k: Report['k'], b: unknown, at = Date.now(), c = s.customer): Report => ({
  id: randomUUID(), k, c: c.id, cs: c.slug, m: machine, s: 'agent', t: randomUUID(), at, b,
});
const instance = async (machine: string) =>
  (await s.pool.query(`SELECT i.* FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.slug = $1`, [machine])).rows[0];

t.test('a first heartbeat makes the machine, the instance, its row and its key; applying it again changes nothing', async (t) => {
  const r = report('ab-1', 'heartbeat', { version: '1.0', uptime_seconds: 5 });
  const ids = await applyBatch(deps, [r], []);
  const id = [...ids.values()][0]!;
  const row = await instance('ab-1');
  t.equal(row.id, id.instanceId);
  t.equal(row.version, '1.0');
  t.ok(Math.abs(Number(row.last_heartbeat_at) - r.at) <= 1, 'last heartbeat: the receive time');
  const ttl = await s.redis.pttl(`${deps.redisPrefix}hb:${id.instanceId}`);
  t.ok(ttl > 295_000 && ttl <= 300_000, `key expires at receive time + timeout (${ttl} ms)`);
  await applyBatch(deps, [r], []);
  const rows = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE report_id = '${r.id}'`);
  t.equal(Number(rows[0]!.n), 1, 'one row, however often applied');
  t.same(await instance('ab-1'), row, 'Postgres unchanged by the second apply');
});

t.test('the newest report wins, whatever order the batches come in', async (t) => {
  const now = Date.now();
  const newer = report('ab-2', 'heartbeat', { version: '2.0' }, now);
  const older = report('ab-2', 'heartbeat', { version: '1.0' }, now - 10_000);
  await applyBatch(deps, [newer], []);
  await applyBatch(deps, [older], []);
  const row = await instance('ab-2');
  t.equal(row.version, '2.0');
  t.ok(Math.abs(Number(row.last_heartbeat_at) - now) <= 1, 'last heartbeat: the newer one');
  t.ok(Math.abs(Number(row.first_seen_at) - (now - 10_000)) <= 1, 'first seen goes back to the older report');
});

t.test("an agent clock outside the window: kept, flagged, its time not believed", async (t) => {
  const r = report('ab-3', 'heartbeat', { ts: '1970-01-01T00:00:00Z' });
  await applyBatch(deps, [r], []);
  const row = await instance('ab-3');
  t.equal(row.clock_skew, true);
  t.equal(row.agent_ts, null);
  const ch = await chRows<{ ts_ms: string; received_ms: string; clock_skew: number; agent_ts: string }>(s.ch, `SELECT ts_ms, received_ms, clock_skew, agent_ts FROM heartbeats FINAL WHERE report_id = '${r.id}'`);
  t.same(ch[0], { ts_ms: String(r.at), received_ms: String(r.at), clock_skew: 1, agent_ts: '1970-01-01T00:00:00Z' });
  const fine = report('ab-3', 'heartbeat', { ts: new Date().toISOString() });
  await applyBatch(deps, [fine], []);
  t.equal((await instance('ab-3')).clock_skew, false, 'a plausible clock clears the flag');
});

t.test('isolation: a batch with one report storage refuses is applied but for that one, which is named', async (t) => {
  const ghost = { id: randomUUID(), slug: 'ghost' };
  const good = Array.from({ length: 40 }, (_, i) => report(`ab-iso-${i}`, 'heartbeat', {}));
  const bad = report('ab-iso-bad', 'heartbeat', {}, Date.now(), ghost as never);
  const units = [...good.slice(0, 20), bad, ...good.slice(20)];
  const out = await applyIsolated(units, (u) => applyBatch(deps, u, []).then(() => undefined), () => null);
  t.same(out.failed.map((f) => f.unit.id), [bad.id]);
  t.equal(out.failed[0]!.failure.kind, 'data');
  t.equal(out.failed[0]!.failure.reason, 'Postgres refused a value (23503 foreign_key_violation)');
  t.same(out.unresolved, []);
  t.ok(out.applies <= 2 * Math.ceil(Math.log2(units.length)) + 1, `${out.applies} applies`);
  const rows = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'ab-iso-%'`);
  t.equal(Number(rows[0]!.n), 40, 'every good report stored once');
});

t.test('isolation: a server that is down fails the whole batch for a retry, never a report', async (t) => {
  const units = [report('ab-down', 'heartbeat', {})];
  const down = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
  await t.rejects(applyIsolated(units, async () => Promise.reject(down), () => null), down);
});
