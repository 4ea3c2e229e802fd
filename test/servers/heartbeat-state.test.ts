// Postgres writes that follow changes, not reports (workers/heartbeat-state.ts), in-process over this
// file's own databases and Redis prefix: which heartbeats skip Postgres, that the flusher writes
// what waits (and what a judgement of silence reads of it), that the api's merge shows exact times, that races between a skipped
// and a written heartbeat end with the newest fields, and the heartbeat keys' rules (created,
// extended, never shortened, more than one script call).
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, chRows, eventually } from '../helpers/stack.js';
import { applyBatch } from '../../workers/apply-batch.js';
import { HeartbeatState, effectiveIntervalMs } from '../../workers/heartbeat-state.js';
import { heartbeatWorker } from '../helpers/heartbeat-worker.js';
import { mergeLatest, type InstanceTimes } from '../../lib/store/live-heartbeats.js';
import { createLogger } from '../../lib/infra/log.js';
import { LUA_MAX_ARGS, luaCommand } from '../../lib/infra/redis.js';
import type { Report } from '../../lib/contract/messages.js';

const s = await testStack(t, 'hbstate', { gateway: false, worker: false, api: false });
const prefix = s.env.REDIS_PREFIX!;
const log = createLogger('test', 'silent');
const TIMEOUT_MS = 300_000;

/** A worker's view: its own id cache; `intervalMs` as PG_HEARTBEAT_INTERVAL_S. */
const worker = (intervalMs = 240_000, lookup = false) => heartbeatWorker(s, log, { timeoutMs: TIMEOUT_MS, intervalMs, idCacheSize: 10_000, lookup });

const report = (machine: string, kind: Report['kind'], body: unknown, receivedAt = Date.now(), c = s.customer): Report => ({
  id: randomUUID(), kind, customerId: c.id, customer: c.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt, body,
});
const instance = async (machine: string, c = s.customer) =>
  (
    await s.pool.query(
      `SELECT i.*, m.last_seen_at AS machine_seen FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.slug = $1 AND m.customer_id = $2`,
      [machine, c.id],
    )
  ).rows[0];
const ms = (d: Date | null) => (d ? d.getTime() : null);
const hash = (instanceId: string) => s.redis.hgetall(`${prefix}hs:${instanceId}`);
const due = (instanceId: string) => s.redis.zscore(`${prefix}hbdue`, instanceId);

t.test('the interval in force: as set, longer than the timeout too (silence is judged from Redis); 0 turns skipping off', async (t) => {
  t.equal(effectiveIntervalMs({ pgIntervalMs: 60_000 }), 60_000);
  t.equal(effectiveIntervalMs({ pgIntervalMs: 6_000_000 }), 6_000_000);
  t.equal(effectiveIntervalMs({ pgIntervalMs: 0 }), 0);
  const on = new HeartbeatState(s.redis, prefix, { heartbeatTimeoutMs: 300_000, pgIntervalMs: 6_000_000, idCacheSize: 1 });
  t.equal(on.postgresLagMs, 6_000_000 + on.tickMs + on.leaseMs + 30_000, "Postgres's lag: interval, tick, lease and margin");
  const off = new HeartbeatState(s.redis, prefix, { heartbeatTimeoutMs: 1000, pgIntervalMs: 0, idCacheSize: 1 });
  t.notOk(off.enabled);
  t.equal(off.postgresLagMs, 0, 'no lag when every heartbeat is written');
});

t.test('an unchanged heartbeat skips Postgres; its time, uptime and ClickHouse row are exact all the same', async (t) => {
  const { deps, state } = worker();
  const first = report('hs-1', 'heartbeat', { version: '1.0', uptime_seconds: 10, ip_addresses: ['10.0.0.1'] }, Date.now() - 5000);
  const ids = await applyBatch(deps, [first], []);
  const id = ids.values().next().value!;
  const before = await instance('hs-1');
  t.equal(ms(before.last_heartbeat_at), first.receivedAt);

  const second = report('hs-1', 'heartbeat', { version: '1.0', uptime_seconds: 15, ip_addresses: ['10.0.0.1'] });
  const skippedBefore = state.counts.skipped;
  const ids2 = await applyBatch(deps, [second], []);
  t.same(ids2.get(`${s.customer.id}|hs-1|agent`), id, 'the same ids, from the cache');
  t.equal(state.counts.skipped, skippedBefore + 1, 'counted as skipped');
  const after = await instance('hs-1');
  t.equal(ms(after.last_heartbeat_at), first.receivedAt, 'Postgres still holds the first heartbeat');
  t.equal(after.uptime_seconds, 10);

  const h = await hash(id.instanceId);
  t.equal(Number(h.seen), second.receivedAt, 'Redis holds the newest receive time');
  t.equal(Number(h.pg), first.receivedAt, '… and what Postgres holds');
  t.equal(Number(await due(id.instanceId)), first.receivedAt + state.intervalMs, 'due in Postgres one interval after its last write');
  const pttl = await s.redis.pttl(`${prefix}hb:${id.instanceId}`);
  t.ok(pttl > TIMEOUT_MS - 5000 && pttl <= TIMEOUT_MS, `heartbeat key extended to the newest + timeout (${pttl} ms)`);

  const rows = await chRows<{ instance_id: string; machine_id: string; uptime_seconds: string }>(
    s.ch,
    `SELECT instance_id, machine_id, uptime_seconds FROM heartbeats FINAL WHERE report_id = '${second.id}'`,
  );
  t.equal(rows.length, 1, 'its ClickHouse row');
  t.equal(rows[0]!.instance_id, id.instanceId);
  t.equal(rows[0]!.machine_id, id.machineId);

  const [merged] = await mergeLatest(s.redis, prefix, [{ ...after } as InstanceTimes]);
  t.equal(ms(merged!.last_heartbeat_at as Date), second.receivedAt, 'the api shows the newest heartbeat');
  t.equal(ms(merged!.last_seen_at as Date), second.receivedAt);
  t.equal(merged!.uptime_seconds, 15, 'and its uptime');
  t.same(merged!.ip_addresses, ['10.0.0.1']);

  // The deadline and late time the api shows: the newest heartbeat's under the instance's timeout,
  // never before the stored ones (a window's end + the timeout may be later than both heartbeats).
  const stored = { id: id.instanceId, last_seen_at: new Date(first.receivedAt), last_heartbeat_at: new Date(first.receivedAt), timeout_s: 300, late_percent: 50 };
  const [moved] = await mergeLatest(s.redis, prefix, [{ ...stored, deadline: new Date(first.receivedAt + 300_000), late_at: new Date(first.receivedAt + 150_000) }]);
  t.equal(ms(moved!.deadline as Date), second.receivedAt + 300_000, 'deadline: the newest heartbeat + the timeout');
  t.equal(ms(moved!.late_at as Date), second.receivedAt + 150_000, 'late time: + half the timeout');
  const windowEnd = second.receivedAt + 60_000;
  const [kept] = await mergeLatest(s.redis, prefix, [{ ...stored, deadline: new Date(windowEnd + 300_000), late_at: new Date(windowEnd + 150_000) }]);
  t.equal(ms(kept!.deadline as Date), windowEnd + 300_000, "a deadline after a window's end stays");
  t.equal(ms(kept!.late_at as Date), windowEnd + 150_000, 'and its late time');
});

t.test('applying a skipped heartbeat again changes nothing (one ClickHouse row, same state)', async (t) => {
  const { deps } = worker();
  const ids = await applyBatch(deps, [report('hs-2', 'heartbeat', { version: '1' }, Date.now() - 1000)], []);
  const id = ids.values().next().value!;
  const hb = report('hs-2', 'heartbeat', { version: '1' });
  await applyBatch(deps, [hb], []);
  const h1 = await hash(id.instanceId);
  await applyBatch(deps, [hb], []);
  t.same(await hash(id.instanceId), h1, 'state unchanged');
  const rows = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE report_id = '${hb.id}'`);
  t.equal(Number(rows[0]!.n), 1);
});

t.test('what goes to Postgres at once: changed fields, status, warnings, other kinds, a silent instance, an unknown one', async (t) => {
  const { deps } = worker();
  const base = Date.now() - 10_000;
  const ids = await applyBatch(deps, [report('hs-3', 'heartbeat', { version: '1', group: 'a' }, base)], []);
  const id = ids.values().next().value!;
  const cases: [string, Report[]][] = [
    ['a changed version', [report('hs-3', 'heartbeat', { version: '2', group: 'a' }, base + 1000)]],
    ['a changed group', [report('hs-3', 'heartbeat', { version: '2', group: 'b' }, base + 2000)]],
    ['a field left out (Postgres keeps it, but the write is due)', [report('hs-3', 'heartbeat', { version: '2' }, base + 3000)]],
    ['a heartbeat with a status report', [report('hs-3', 'heartbeat', { version: '2' }, base + 4000), report('hs-3', 'status', { status: 'running' }, base + 4000)]],
    ['a heartbeat with diagnostics', [report('hs-3', 'heartbeat', { version: '2' }, base + 5000), report('hs-3', 'diagnostics', { items: [{ code: 1, severity: 1 }] }, base + 5000)]],
  ];
  for (const [what, batch] of cases) {
    await applyBatch(deps, batch, []);
    t.equal(ms((await instance('hs-3')).last_heartbeat_at), batch[0]!.receivedAt, `${what}: written`);
  }
  t.equal((await instance('hs-3')).group_name, 'b', 'a field left out kept its value');

  // The heartbeat key expired (silence): the next heartbeat must reach Postgres (it may turn red into green).
  await s.redis.del(`${prefix}hb:${id.instanceId}`);
  const back = report('hs-3', 'heartbeat', { version: '2' }, base + 6000);
  await applyBatch(deps, [back], []);
  t.equal(ms((await instance('hs-3')).last_heartbeat_at), back.receivedAt, 'a silent instance coming back: written');

  // Another worker, which has never seen this instance: written (and its ids learnt).
  const other = worker();
  const hb = report('hs-3', 'heartbeat', { version: '2' }, base + 7000);
  await applyBatch(other.deps, [hb], []);
  t.equal(ms((await instance('hs-3')).last_heartbeat_at), hb.receivedAt, 'unknown ids: written');
  const next = report('hs-3', 'heartbeat', { version: '2' }, base + 8000);
  await applyBatch(other.deps, [next], []);
  t.equal(ms((await instance('hs-3')).last_heartbeat_at), hb.receivedAt, 'then known: skipped');
});

t.test('the flusher writes the newest waiting heartbeat one interval after the last write; machines too', async (t) => {
  const { deps, flusher, state } = worker(300);
  const ids = await applyBatch(deps, [report('hs-4', 'heartbeat', { version: '1', uptime_seconds: 1 }, Date.now() - 100)], []);
  const id = ids.values().next().value!;
  const last = report('hs-4', 'heartbeat', { version: '1', uptime_seconds: 2, ts: new Date().toISOString() });
  await applyBatch(deps, [report('hs-4', 'heartbeat', { version: '1', uptime_seconds: 1 }, last.receivedAt - 50), last], []);
  t.equal(state.intervalMs, 300);
  t.not(ms((await instance('hs-4')).last_heartbeat_at), last.receivedAt, 'not written yet');
  await eventually(async () => (await flusher.flushDue(), ms((await instance('hs-4')).last_heartbeat_at) === last.receivedAt), 5000, 'flushed');
  const row = await instance('hs-4');
  t.equal(row.uptime_seconds, 2, 'with its fields');
  t.equal(ms(row.agent_ts), Date.parse((last.body as { ts: string }).ts), 'and its agent time');
  t.equal(ms(row.last_seen_at), last.receivedAt);
  t.ok(ms(row.machine_seen)! >= last.receivedAt, "the machine's last_seen_at too");
  t.equal(await due(id.instanceId), null, 'nothing due any more');
  t.equal(Number((await hash(id.instanceId)).pg), last.receivedAt);
  t.equal(await flusher.flushDue(), 0, 'a second run finds nothing');
});

t.test('before the sweep or the expiry listener judges: the heartbeat key goes, the waiting time comes back, Postgres is not written', async (t) => {
  const { deps, state } = worker();
  const first = report('hs-5', 'heartbeat', {}, Date.now() - 1000);
  const ids = await applyBatch(deps, [first], []);
  const id = ids.values().next().value!;
  const hb = report('hs-5', 'heartbeat', {});
  await applyBatch(deps, [hb], []);
  t.equal(await s.redis.exists(`${prefix}hb:${id.instanceId}`), 1, 'the key lives');
  const dueBefore = await due(id.instanceId);
  const waiting = await state.waiting([id.instanceId, randomUUID()]);
  t.same([...waiting], [[id.instanceId, hb.receivedAt]], 'one instance had something waiting: its receive time');
  t.equal(await s.redis.exists(`${prefix}hb:${id.instanceId}`), 0, 'its heartbeat key dropped');
  t.equal(ms((await instance('hs-5')).last_heartbeat_at), first.receivedAt, 'Postgres not written');
  t.equal(await due(id.instanceId), dueBefore, 'still due for the flusher, at the same time');
  // Without its key, the next heartbeat goes to Postgres at once (none is skipped while it is judged).
  const next = report('hs-5', 'heartbeat', {});
  await applyBatch(deps, [next], []);
  t.equal(ms((await instance('hs-5')).last_heartbeat_at), next.receivedAt, 'the next heartbeat written at once');
  t.equal((await state.waiting([id.instanceId])).size, 0, 'nothing waits');
});

t.test('a skipped newer heartbeat and a written older one with other fields: Postgres ends with the newest', async (t) => {
  const a = worker();
  const b = worker();
  const base = Date.now() - 10_000;
  await applyBatch(a.deps, [report('hs-6', 'heartbeat', { version: 'A' }, base)], []);
  await applyBatch(b.deps, [report('hs-6', 'heartbeat', { version: 'A' }, base + 1)], []); // b learns the ids
  // Worker b skips the newest heartbeat (fields A, as Postgres holds) ...
  await applyBatch(b.deps, [report('hs-6', 'heartbeat', { version: 'A' }, base + 3000)], []);
  // ... while worker a writes an older one with other fields (B) to Postgres.
  await applyBatch(a.deps, [report('hs-6', 'heartbeat', { version: 'B' }, base + 2000)], []);
  // Its transaction catches up with the newest heartbeat Redis holds (catchUp), so Postgres never
  // shows the older fields; which fields it holds is then unknown to the state hash (the older
  // heartbeat's own were not written), so the instance is due at once and nothing skips meanwhile.
  const row = await instance('hs-6');
  t.equal(row.version, 'A', 'Postgres holds the newest heartbeat’s fields at once');
  t.equal(ms(row.last_heartbeat_at), base + 3000, 'and its time');
  const id = (await s.pool.query(`SELECT id FROM instances WHERE id = $1`, [row.id])).rows[0].id as string;
  t.ok(Number(await due(id)) <= Date.now(), 'due at once');
  const skippedBefore = a.state.counts.skipped;
  await applyBatch(a.deps, [report('hs-6', 'heartbeat', { version: 'A' }, base + 3500)], []);
  t.equal(a.state.counts.skipped, skippedBefore, 'fields unknown: the next heartbeat is written, not skipped');
  await a.flusher.flushDue();
  const fixed = await instance('hs-6');
  t.equal(fixed.version, 'A', 'the newest heartbeat’s fields');
  t.equal(ms(fixed.last_heartbeat_at), base + 3500);
  // And the next unchanged heartbeat (A) may skip again.
  const w = a.state.counts.skipped;
  await applyBatch(a.deps, [report('hs-6', 'heartbeat', { version: 'A' }, base + 4000)], []);
  t.equal(a.state.counts.skipped, w + 1);
});

t.test('an older heartbeat written while Postgres holds a newer one does not claim its fields', async (t) => {
  const { deps } = worker();
  const base = Date.now() - 10_000;
  const ids = await applyBatch(deps, [report('hs-7', 'heartbeat', { version: 'new' }, base + 5000)], []);
  const id = ids.values().next().value!;
  await s.redis.del(`${prefix}hs:${id.instanceId}`); // state lost (Redis restarted without it)
  await applyBatch(deps, [report('hs-7', 'heartbeat', { version: 'old' }, base)], []); // redelivered old report
  const h = await hash(id.instanceId);
  t.equal(Number(h.pg), base + 5000, 'Postgres holds the newer heartbeat');
  t.equal(h.fp, '', 'its fields unknown: the next heartbeat is written');
  const next = report('hs-7', 'heartbeat', { version: 'new' }, base + 6000);
  await applyBatch(deps, [next], []);
  t.equal(ms((await instance('hs-7')).last_heartbeat_at), next.receivedAt, 'written');
});

t.test('an instance Postgres no longer has: the flusher drops its keys, the next heartbeat creates it again', async (t) => {
  const { deps, flusher } = worker();
  const ids = await applyBatch(deps, [report('hs-8', 'heartbeat', {}, Date.now() - 1000)], []);
  const id = ids.values().next().value!;
  await applyBatch(deps, [report('hs-8', 'heartbeat', {})], []);
  await s.pool.query(`DELETE FROM instances WHERE id = $1`, [id.instanceId]);
  await s.redis.zadd(`${prefix}hbdue`, 0, id.instanceId); // due now
  t.equal(await flusher.flushDue(), 1);
  t.equal(await s.redis.exists(`${prefix}hb:${id.instanceId}`, `${prefix}hs:${id.instanceId}`), 0, 'keys gone');
  await applyBatch(deps, [report('hs-8', 'heartbeat', {})], []);
  t.ok(await instance('hs-8'), 'the instance is back');
});

t.test('two customers with the same machine and software names never share state', async (t) => {
  const other = (await s.newCustomer(`hs-other-${randomUUID().slice(0, 8)}`)).customer;
  const { deps } = worker();
  const at = Date.now() - 2000;
  await applyBatch(deps, [report('hs-9', 'heartbeat', { version: 'mine' }, at), report('hs-9', 'heartbeat', { version: 'theirs' }, at, other)], []);
  await applyBatch(deps, [report('hs-9', 'heartbeat', { version: 'mine' }, at + 1000), report('hs-9', 'heartbeat', { version: 'theirs', group: 'x' }, at + 1000, other)], []);
  const mine = await instance('hs-9');
  const theirs = await instance('hs-9', other);
  t.not(mine.id, theirs.id);
  t.equal(mine.version, 'mine');
  t.equal(theirs.version, 'theirs');
  t.equal(theirs.group_name, 'x', "their change written; mine skipped");
  t.equal(ms(mine.last_heartbeat_at), at);
  t.equal(ms(theirs.last_heartbeat_at), at + 1000);
});

t.test('skipping off (interval 0): every heartbeat is written, keys still kept', async (t) => {
  const { deps, state } = worker(0);
  await applyBatch(deps, [report('hs-10', 'heartbeat', {}, Date.now() - 1000)], []);
  const hb = report('hs-10', 'heartbeat', {});
  const ids = await applyBatch(deps, [hb], []);
  t.equal(state.counts.skipped, 0);
  t.equal(ms((await instance('hs-10')).last_heartbeat_at), hb.receivedAt);
  const id = ids.values().next().value!;
  t.ok((await s.redis.pttl(`${prefix}hb:${id.instanceId}`)) > 0, 'heartbeat key');
});

t.test('heartbeat keys: created with the customer id, extended by a newer report, never shortened, beyond one script call', async (t) => {
  const { deps } = worker(0);
  const now = Date.now();
  const newer = report('hs-11', 'heartbeat', {}, now);
  const ids = await applyBatch(deps, [newer], []);
  const key = `${prefix}hb:${ids.values().next().value!.instanceId}`;
  t.equal(await s.redis.get(key), s.customer.id);
  t.equal(Number(await s.redis.call('PEXPIRETIME', key)), now + TIMEOUT_MS);
  await applyBatch(deps, [report('hs-11', 'heartbeat', {}, now - 60_000)], []);
  t.equal(Number(await s.redis.call('PEXPIRETIME', key)), now + TIMEOUT_MS, 'an older report left it alone');
  const many = Array.from({ length: 2500 }, (_, i) => report(`hs-many-${i}`, 'heartbeat', {}, now + i));
  const all = await applyBatch(deps, many, []);
  t.equal(all.size, 2500);
  const keys = [...all.values()].map((x) => `${prefix}hb:${x.instanceId}`);
  t.equal(await s.redis.exists(...keys), 2500, 'every key written');
});

t.test('a worker that starts (no ids cached) reads the ids of known instances and skips Postgres for them; an unknown one is still written', async (t) => {
  const a = worker();
  const other = await s.newCustomer('hslookup-other');
  const c2 = other.customer;
  const firsts = [report('lk-1', 'heartbeat', { version: '2.0' }, Date.now() - 3000), report('lk-2', 'heartbeat', { version: '2.0' }, Date.now() - 3000), report('lk-1', 'heartbeat', { version: '2.0' }, Date.now() - 3000, c2)];
  await applyBatch(a.deps, firsts, []);
  const before = await s.pool.query(
    `SELECT i.id, i.xmin::text AS x FROM instances i JOIN machines m ON m.id = i.machine_id WHERE i.customer_id IN ($1, $2) AND m.slug IN ('lk-1', 'lk-2') ORDER BY i.id`,
    [s.customer.id, c2.id],
  );
  t.equal(before.rows.length, 3);

  // A second worker: empty cache, ids read from Postgres.
  const b = worker(240_000, true);
  const next = [report('lk-1', 'heartbeat', { version: '2.0', uptime_seconds: 9 }), report('lk-2', 'heartbeat', { version: '2.0', uptime_seconds: 9 }), report('lk-1', 'heartbeat', { version: '2.0', uptime_seconds: 7 }, Date.now(), c2), report('lk-new', 'heartbeat', { version: '2.0' })];
  const ids = await applyBatch(b.deps, next, []);
  t.equal(b.state.counts.lookedUp, 3, 'the three known instances found by one read');
  t.equal(b.state.counts.skipped, 3, 'and skipped');
  t.equal(b.state.counts.written, 1, 'the new one written');
  const after = await s.pool.query(`SELECT id, xmin::text AS x FROM instances WHERE id = ANY($1::uuid[]) ORDER BY id`, [before.rows.map((r) => r.id)]);
  t.same(after.rows, before.rows, 'no row of a known instance rewritten');
  // Each customer's lk-1 kept its own ids.
  const own = ids.get(`${s.customer.id}|lk-1|agent`)!;
  const theirs = ids.get(`${c2.id}|lk-1|agent`)!;
  t.not(own.instanceId, theirs.instanceId);
  t.equal((await s.pool.query('SELECT customer_id FROM instances WHERE id = $1', [theirs.instanceId])).rows[0].customer_id, c2.id);
  t.equal(Number((await hash(theirs.instanceId)).seen), next[2]!.receivedAt, "the other customer's newest time in its own state");
});

// A worker's batch may hold tens of thousands of instances (the light bench's 100,000 first
// heartbeats came in batches of 60,500). Read in one Lua call, their keys overflowed the stack
// inside ioredis's automatic pipeline, which then ended the worker ("results[i] is not iterable").
t.test('catching up a batch of 100,000 instances reads Redis in chunks; a Lua call too large is refused, and the connection goes on', async (t) => {
  const { state } = worker();
  const written = new Map(Array.from({ length: 100_000 }, () => randomUUID()).map((id) => [id, { instanceId: id, machineId: randomUUID(), pgAt: 0 }]));
  const c = await s.pool.connect();
  try {
    await state.catchUp(c, written as never);
    t.pass('100,000 instances caught up (nothing in Redis to write)');
  } finally {
    c.release();
  }
  const tooLarge = luaCommand<number>('testTooLarge', 'return #KEYS');
  await t.rejects(tooLarge(s.redis, LUA_MAX_ARGS + 1, ...Array.from({ length: LUA_MAX_ARGS + 1 }, (_, i) => `k${i}`)), /at most 20000/);
  t.equal(await tooLarge(s.redis, 3, 'a', 'b', 'c'), 3, 'the same connection still runs Lua commands');
  t.equal(await s.redis.ping(), 'PONG');
});

// A skipped heartbeat extends its heartbeat key but leaves its silence time in hbdl behind; the
// sweep's candidate read moves such an entry up to the key's expiry instead of returning it. So a
// live instance must never come out as a candidate (the sweep would write and judge it), a silent
// one always must, however many live entries come before it (more than one script call's budget).
t.test('silence candidates: a skip leaves hbdl behind; an entry whose key lives on is moved up, not returned; a silent one is, behind 12,000 live ones', async (t) => {
  const { deps } = worker();
  const now = Date.now();
  const ids = await applyBatch(deps, [report('hs-dl', 'heartbeat', { version: '1' }, now - 10_000)], []);
  const id = ids.values().next().value!.instanceId;
  const silence = () => s.redis.zscore(`${prefix}hbdl`, id).then(Number);
  t.equal(await silence(), now - 10_000 + TIMEOUT_MS, 'a written heartbeat sets its silence time');
  await applyBatch(deps, [report('hs-dl', 'heartbeat', { version: '1' }, now)], []);
  t.equal(Number(await s.redis.call('PEXPIRETIME', `${prefix}hb:${id}`)), now + TIMEOUT_MS, 'the skip extended the key');
  t.equal(await silence(), now - 10_000 + TIMEOUT_MS, '… not the silence time');

  // A prefix of its own: only these entries.
  const p = `${prefix}dl:`;
  const st = new HeartbeatState(s.redis, p, { heartbeatTimeoutMs: TIMEOUT_MS, pgIntervalMs: 240_000, idCacheSize: 1 });
  const hbdl = `${p}hbdl`;
  const horizon = now + 1000;
  const setup = s.redis.pipeline();
  for (let i = 0; i < 12_000; i++) {
    setup.zadd(hbdl, now - 20_000 + i, `live-${i}`);
    setup.set(`${p}hb:live-${i}`, 'c', 'PXAT', now + 60_000 + i);
  }
  setup.zadd(hbdl, now - 30_000, 'expiring'); // its key expires before the horizon
  setup.set(`${p}hb:expiring`, 'c', 'PXAT', now + 500);
  setup.zadd(hbdl, now - 25_000, 'no-expiry'); // a key without an expiry: judged, not trusted
  setup.set(`${p}hb:no-expiry`, 'c');
  setup.zadd(hbdl, now, 'silent'); // last in hbdl, its key gone
  setup.zadd(hbdl, now + 5000, 'later'); // past the horizon: not read
  await setup.exec();

  const first = await st.dueSilences(horizon, 2);
  t.same(first.ids, ['expiring', 'no-expiry'], 'the earliest candidates, up to the limit');
  t.equal(first.more, true, 'more are due');
  // As the sweep's rounds: a call returns what it found within its budget and says whether more
  // are due; the entries it moved up are not read again.
  let calls = 0;
  let last: { ids: string[]; more: boolean };
  do {
    last = await st.dueSilences(horizon, 100);
    calls++;
  } while (last.more && calls < 10);
  t.ok(calls > 1, `more than one call (${calls})`);
  t.same(last.ids, ['expiring', 'no-expiry', 'silent'], 'every candidate, past 12,000 live entries');
  t.equal(last.more, false);
  t.equal(await s.redis.zcount(hbdl, '-inf', horizon), 3, 'only the candidates are left up to the horizon');
  t.equal(Number(await s.redis.zscore(hbdl, 'live-0')), now + 60_000, 'a live entry moved to its key expiry');
  t.equal(Number(await s.redis.zscore(hbdl, 'live-11999')), now + 60_000 + 11_999);
  t.equal(Number(await s.redis.zscore(hbdl, 'later')), now + 5000, 'an entry past the horizon untouched');
  await s.redis.del(hbdl);
});
