// The key layout of a Redis Cluster (lib/infra/redis.ts), run on this file's own Redis: every
// instance's keys carry its group's hash tag, each group has a due set of its own, and the worker's
// scripts (workers/heartbeat-state.ts) are called per group: skip, write, flush, the waiting times read before a judgement, and drop
// keep working across groups, and no script call names keys of two groups (which a cluster would
// refuse with CROSSSLOT). The cluster itself, with a primary killed, is test/cluster/redis.test.ts.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, eventually } from '../helpers/stack.js';
import { applyBatch } from '../../workers/apply-batch.js';
import { HeartbeatState } from '../../workers/heartbeat-state.js';
import { heartbeatWorker } from '../helpers/heartbeat-worker.js';
import { CLUSTER_GROUPS, byGroup, groupOf, hashTagOf, redisKeys, sameSlot } from '../../lib/infra/redis.js';
import { createLogger } from '../../lib/infra/log.js';
import type { Report } from '../../lib/contract/messages.js';

const s = await testStack(t, 'hbgroups', { gateway: false, worker: false, api: false });
const prefix = s.env.REDIS_PREFIX!;
const log = createLogger('test', 'silent');
const TIMEOUT_MS = 300_000;
const cluster = { isCluster: true };
const keys = redisKeys(prefix, cluster);

const worker = (intervalMs = 240_000) =>
  heartbeatWorker(s, log, { timeoutMs: TIMEOUT_MS, intervalMs, idCacheSize: 100_000, cluster: true, flushBatch: 100 });

const report = (machine: string, body: unknown, receivedAt = Date.now()): Report => ({
  id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt, body,
});
const pgHeartbeat = async (instanceId: string) => {
  const r = await s.pool.query<{ hb: Date | null }>('SELECT last_heartbeat_at AS hb FROM instances WHERE id = $1', [instanceId]);
  return r.rows[0]?.hb?.getTime() ?? null;
};

t.test('the names: one tag per group, the same for an instance\'s keys and its due set; one Redis keeps the old names', async (t) => {
  const id = randomUUID();
  const g = groupOf(id, CLUSTER_GROUPS);
  t.ok(g >= 0 && g < CLUSTER_GROUPS);
  t.equal(hashTagOf(keys.heartbeat(id)), `g${g}`);
  t.equal(hashTagOf(keys.heartbeatState(id)), `g${g}`);
  t.equal(hashTagOf(keys.heartbeatDue(id)), `g${g}`);
  t.equal(keys.instanceOfHeartbeatKey(keys.heartbeat(id)), id, 'the listener reads the id back');
  t.equal(keys.instanceOfStateKey(keys.heartbeatState(id)), id, 'the backup reads the id back');
  t.equal(hashTagOf(keys.metric(id)), `g${g}`, 'host-metric ids too');
  const one = redisKeys(prefix, s.redis);
  t.equal(one.heartbeat(id), `${prefix}hb:${id}`, 'one Redis: the names the service always used');
  t.equal(one.heartbeatDue(id), `${prefix}hbdue`);
  t.equal(one.groups, 1);
  // Ids spread over the groups.
  const counts = new Array<number>(CLUSTER_GROUPS).fill(0);
  for (let i = 0; i < 16_000; i++) counts[groupOf(randomUUID(), CLUSTER_GROUPS)]!++;
  t.ok(Math.min(...counts) > 800 && Math.max(...counts) < 1200, `16,000 ids over 16 groups: ${Math.min(...counts)}-${Math.max(...counts)} each`);
  t.same(sameSlot(cluster, [keys.heartbeat(id), 'x', keys.heartbeatState(id), 'y']), [[0, 2], [1], [3]], 'keys grouped by slot for multi-key commands');
  t.same(byGroup([], CLUSTER_GROUPS, String), []);
});

t.test('skip, flush and the waiting times per group: 300 instances over every group, each heartbeat written exactly as on one Redis', async (t) => {
  const { deps, state, flusher } = worker(400);
  const machines = Array.from({ length: 300 }, (_, i) => `grp-${i}`);
  const t0 = Date.now() - 2000;
  const ids = await applyBatch(deps, machines.map((m) => report(m, { version: '1' }, t0)), []);
  t.equal(ids.size, 300);
  const instanceIds = [...ids.values()].map((x) => x.instanceId);
  const groups = new Set(instanceIds.map((id) => groupOf(id, CLUSTER_GROUPS)));
  t.equal(groups.size, CLUSTER_GROUPS, 'the instances fall into every group');
  for (const id of instanceIds.slice(0, 20)) t.equal(await s.redis.exists(keys.heartbeat(id), keys.heartbeatState(id)), 2, 'keys under the group tag');

  // Newer heartbeats that change nothing: skipped, waiting in their groups' due sets.
  const t1 = Date.now();
  const skippedBefore = state.counts.skipped;
  await applyBatch(deps, machines.map((m) => report(m, { version: '1' }, t1)), []);
  t.equal(state.counts.skipped - skippedBefore, 300, 'every one skipped Postgres');
  t.equal(await state.dueCount(), 300, 'all 300 due, over the groups');
  const perGroup = await Promise.all(keys.heartbeatDues.map((k) => s.redis.zcard(k)));
  t.equal(perGroup.filter((n) => n > 0).length, CLUSTER_GROUPS, 'every group has its own due set');
  t.equal(await s.redis.exists(`${prefix}hbdue`), 0, 'no due set without a tag');

  // The flusher (100 per claim) writes all of them, group by group.
  await eventually(async () => (await flusher.flushDue(), (await state.dueCount()) === 0), 10_000, 'all flushed');
  for (const id of instanceIds) t.equal(await pgHeartbeat(id), t1, 'Postgres holds the newest heartbeat');

  // Before a judgement of silence: ids in many groups at once.
  const t2 = Date.now();
  await applyBatch(deps, machines.slice(0, 50).map((m) => report(m, { version: '1' }, t2)), []);
  const judged = machines.slice(0, 50).map((m) => ids.get(`${s.customer.id}|${m}|agent`)!.instanceId);
  const waiting = await state.waiting([...judged, randomUUID()]);
  t.equal(waiting.size, 50, 'the 50 waiting, whatever their group');
  for (const id of judged) {
    t.equal(waiting.get(id), t2, 'each with its receive time');
    t.equal(await s.redis.exists(keys.heartbeat(id)), 0, 'their heartbeat keys dropped');
    t.equal(await pgHeartbeat(id), t1, 'nothing written to Postgres');
  }
  t.equal(await state.dueCount(), 50, 'still due for the flusher');
  await eventually(async () => (await flusher.flushDue(), (await state.dueCount()) === 0), 10_000, 'flushed');
  for (const id of judged) t.equal(await pgHeartbeat(id), t2, 'which writes them when they come due');
  t.equal((await state.waiting(judged)).size, 0, 'then nothing waits');
});

t.test('claiming: each group its share of a claim; `more` while a group has more due', async (t) => {
  const { deps, state } = worker(400);
  const machines = Array.from({ length: 200 }, (_, i) => `claim-${i}`);
  const t0 = Date.now() - 2000;
  await applyBatch(deps, machines.map((m) => report(m, { version: '1' }, t0)), []);
  await applyBatch(deps, machines.map((m) => report(m, { version: '1' })), []);
  t.equal(await state.dueCount(), 200);
  const later = Date.now() + 10_000;
  const first = await state.claim(32, later);
  t.ok(first.claimed.length <= 32 && first.claimed.length >= CLUSTER_GROUPS, `a claim of 32 takes 2 per group (${first.claimed.length})`);
  t.ok(first.more, 'and says more is due');
  let total = first.claimed.length;
  for (let i = 0; i < 50; i++) {
    const next = await state.claim(32, later);
    total += next.claimed.length;
    if (!next.more) break;
  }
  t.equal(total, 200, 'claimed once each, all of them');
  const again = await state.claim(1000, later);
  t.equal(again.claimed.length, 0, 'leased: none claimed twice');
  t.notOk(again.more);
});

t.test('REDIS_WAIT_REPLICAS: a batch with skipped heartbeats waits for replicas; with none there it is told and goes on', async (t) => {
  const told: { node: string; got: number }[] = [];
  const state = new HeartbeatState(
    s.redis,
    prefix,
    { heartbeatTimeoutMs: TIMEOUT_MS, pgIntervalMs: 240_000, idCacheSize: 1000, waitReplicas: 1, onUnreplicated: (node, got) => told.push({ node, got }) },
    cluster,
  );
  const { deps } = worker();
  const w = { ...deps, heartbeats: state };
  await applyBatch(w, [report('wait-1', { version: '1' }, Date.now() - 1000)], []);
  t.same(told, [], 'written to Postgres: nothing to wait for');
  const t0 = Date.now();
  await applyBatch(w, [report('wait-1', { version: '1' })], []);
  const took = Date.now() - t0;
  t.equal(state.counts.skipped, 1, 'skipped Postgres');
  t.equal(told.length, 1, 'this Redis has no replica: WAIT said so');
  t.equal(told[0]!.got, 0);
  t.ok(took >= 200, `the batch waited for WAIT's 250 ms before going on (${took} ms)`);
  // The next batches do not wait for that Redis again for a while.
  const t1 = Date.now();
  await applyBatch(w, [report('wait-1', { version: '1' })], []);
  t.ok(Date.now() - t1 < 200, `the next batch did not wait (${Date.now() - t1} ms)`);
  t.equal(told.length, 1, 'and is not told again');
  t.equal(state.counts.skipped, 2);
});
