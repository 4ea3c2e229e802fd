// The worker's batch path in-process: applyBatch() and the isolation around it over this file's own
// databases and Redis prefix, without a worker process or NATS. What a batch writes, that applying
// it again changes nothing, that the newest report wins whatever the order, how a broken agent
// clock is stored, and that isolation finds the one report storage refuses. "Again changes
// nothing" is checked on every Postgres row of the customer, and on raw ClickHouse rows (merges
// stopped, where a second copy would show) for a retry with the worker's ledger of landed rows.
import t from 'tap';
import { HeartbeatState } from '../../workers/heartbeat-state.js';
import { randomUUID } from 'node:crypto';
import { testStack, chRows } from '../helpers/stack.js';
import { stopMerges } from '../helpers/stored-once.js';
import { LandedRows } from '../../workers/outages.js';
import { applyBatch, type ApplyDeps } from '../../workers/apply-batch.js';
import { applyIsolated } from '../../workers/isolate.js';
import type { Report } from '../../lib/contract/messages.js';
import { TableGrowth } from '../../lib/store/table-growth.js';
import { findInstanceIds, FIND_INSTANCE_IDS_SQL } from '../../lib/store/instances.js';
import { createLogger } from '../../lib/infra/log.js';
import { createPool } from '../../lib/infra/postgres.js';

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
const report = (machine: string, kind: Report['kind'], body: unknown, receivedAt = Date.now(), c = s.customer): Report => ({
  id: randomUUID(), kind, customerId: c.id, customer: c.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt, body,
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
  t.ok(Math.abs(Number(row.last_heartbeat_at) - r.receivedAt) <= 1, 'last heartbeat: the receive time');
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
  t.same(ch[0], { ts_ms: String(r.receivedAt), received_ms: String(r.receivedAt), clock_skew: 1, agent_ts: '1970-01-01T00:00:00Z' });
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

t.test('status and diagnostics applied twice (a redelivery): every Postgres row of the customer as after the first; ClickHouse rows once on raw rows with the retry ledger, once under FINAL without it', async (t) => {
  const { customer: c } = await s.newCustomer('twice');
  await stopMerges(s.ch, s.env.CLICKHOUSE_DB!, ['heartbeats', 'status_history', 'diagnostics']);
  const at = Date.now();
  const batch = [
    report('ab-twice', 'heartbeat', { version: '3.1' }, at, c),
    report('ab-twice', 'status', { status: 'degraded', message: 'disk almost full' }, at, c),
    report('ab-twice', 'diagnostics', { items: [{ code: 7001, severity: 2, message: 'disk full' }, { code: 7002, severity: 1, message: 'slow' }] }, at, c),
  ];
  const ids = batch.map((r) => `'${r.id}'`).join(',');
  const postgres = async () => {
    const q = async (sql: string) => JSON.stringify((await s.pool.query(sql, [c.id])).rows);
    return {
      machines: await q(`SELECT * FROM machines WHERE customer_id = $1 ORDER BY slug`),
      instances: await q(`SELECT i.* FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.customer_id = $1 ORDER BY i.id`),
      lights: await q(`SELECT * FROM light_outbox_changes WHERE customer_id = $1 ORDER BY instance_id, seq`),
      onboarding: await q(`SELECT * FROM onboarding_milestones WHERE customer_id = $1 ORDER BY step`),
    };
  };
  const rows = async (final: boolean) => {
    const f = final ? 'FINAL' : '';
    const r = await chRows<{ t: string; n: string }>(
      s.ch,
      `SELECT 'heartbeats' AS t, count() AS n FROM heartbeats ${f} WHERE report_id IN (${ids})
       UNION ALL SELECT 'status_history' AS t, count() AS n FROM status_history ${f} WHERE report_id IN (${ids})
       UNION ALL SELECT 'diagnostics' AS t, count() AS n FROM diagnostics ${f} WHERE report_id IN (${ids})`,
    );
    return Object.fromEntries(r.map((x) => [x.t, Number(x.n)]));
  };
  const ONCE = { heartbeats: 1, status_history: 1, diagnostics: 2 };

  // The first apply, as a worker that will retry the message: it keeps what landed.
  const landed = new LandedRows();
  const ledger = landed.ledger();
  await applyBatch({ ...deps, rows: ledger }, batch, []);
  ledger.commit();
  const first = await postgres();
  t.not(first.instances, '[]', 'the instance exists');
  t.match(first.instances, /"last_warning_at":"/, 'the diagnostics set the last warning, which a second apply could move');
  t.same(await rows(false), ONCE, 'one raw row per report (per item)');

  // The retry on the same worker: Postgres unchanged, no ClickHouse row inserted again.
  await applyBatch({ ...deps, rows: landed.ledger() }, batch, []);
  const second = await postgres();
  for (const k of Object.keys(first) as (keyof typeof first)[]) t.equal(second[k], first[k], `${k}: unchanged by the retry`);
  t.same(await rows(false), ONCE, 'the retry with the ledger: still one raw row per report (per item)');

  // Another worker (or one restarted) has no ledger: Postgres is still unchanged; the rows are
  // inserted again and the copies collapse under FINAL (docs/architecture.md), which this shows.
  await applyBatch(deps, batch, []);
  const third = await postgres();
  for (const k of Object.keys(first) as (keyof typeof first)[]) t.equal(third[k], first[k], `${k}: unchanged by a redelivery to another worker`);
  t.same(await rows(false), { heartbeats: 2, status_history: 2, diagnostics: 4 }, 'without the ledger: a second copy on raw rows');
  t.same(await rows(true), ONCE, 'which FINAL (and the _v views) show once');
});

// The id lookup of every batch must not depend on the planner's statistics. Planned as a join from
// statistics taken while the tables were small, it hashed every instance on its software name and
// scanned the customer's machines for each pair: 25 s for one batch of 480 new machines over
// 1,200 instances, every customer's reports waiting behind it. Buffers touched are counted, not
// time: per key, two index probes and their heap pages.
t.test('the id lookup probes the indexes once per key, even with no column statistics', async (t) => {
  // No column statistics (a table never analysed, or restored without them): Postgres falls back to
  // default selectivities, and believed three of 1,200 instances live. Autovacuum kept out meanwhile.
  await s.pool.query('ALTER TABLE machines SET (autovacuum_enabled = false); ALTER TABLE instances SET (autovacuum_enabled = false)');
  await s.pool.query(`DELETE FROM pg_statistic WHERE starelid IN ('machines'::regclass, 'instances'::regclass)`);
  t.teardown(() => s.pool.query('ALTER TABLE machines RESET (autovacuum_enabled); ALTER TABLE instances RESET (autovacuum_enabled)'));
  for (let b = 0; b < 3; b++) {
    const now = Date.now();
    await applyBatch(deps, Array.from({ length: 400 }, (_, i) => report(`stale-${b}-${i}`, 'heartbeat', {}, now)), []);
  }
  // Half of them known, half new machines (a batch of first heartbeats).
  const keys = Array.from({ length: 480 }, (_, i) => (i % 2 ? `stale-${i % 3}-${(i - 1) / 2}` : `stale-new-${i}`));
  const args = [keys.map(() => s.customer.id), keys, keys.map(() => 'agent')];
  const plan = (await s.pool.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${FIND_INSTANCE_IDS_SQL}`, args)).rows[0]['QUERY PLAN'][0];
  const blocks = plan.Plan['Shared Hit Blocks'] + plan.Plan['Shared Read Blocks'];
  t.ok(blocks <= keys.length * 12, `${blocks} buffers for ${keys.length} keys (at most 12 each)`);
  const found = await findInstanceIds(s.pool, ...(args as [string[], string[], string[]]));
  t.equal(found.length, 240, 'the known ones found');
  t.ok(found.every((r) => r.slug.startsWith('stale-') && r.software === 'agent' && r.customer_id === s.customer.id), 'under their own keys');
});

// A fleet's first minutes: machines and instances grow from nothing faster than autovacuum looks
// (lib/store/table-growth.ts). With the statistics of an almost empty table the planner hashed
// every live instance on its software name for each batch's id lookup (7-13 s per batch of 500 at
// 100,000 instances). The workers analyse the tables themselves after fast growth.
t.test('after 3,000 new instances the tables are analysed, and the id lookup probes the indexes', async (t) => {
  const analysed: string[] = [];
  const growth = new TableGrowth(s.pool, createLogger('growth', 'warn'), { minRows: 1000, share: 0.2 }, (table) => analysed.push(table));
  const g: ApplyDeps = { ...deps, growth };
  const before = await s.pool.query<{ n: string | null }>(`SELECT last_analyze::text AS n FROM pg_stat_user_tables WHERE relname = 'instances'`);
  for (let b = 0; b < 6; b++) {
    const now = Date.now();
    await applyBatch(g, Array.from({ length: 500 }, (_, i) => report(`grow-${b}-${i}`, 'heartbeat', {}, now)), []);
    await growth.settled();
  }
  t.ok(analysed.includes('instances') && analysed.includes('machines'), `analysed: ${analysed.join(', ')}`);
  const after = await s.pool.query<{ n: string | null }>(`SELECT last_analyze::text AS n FROM pg_stat_user_tables WHERE relname = 'instances'`);
  t.not(after.rows[0]!.n, before.rows[0]!.n, 'instances analysed by the worker (last_analyze moved)');
  const est = await s.pool.query<{ n: number }>(`SELECT reltuples::float8 AS n FROM pg_class WHERE relname = 'instances'`);
  // Analysed in the background while later batches commit: it knows most of them.
  t.ok(est.rows[0]!.n >= 1000, `the planner knows the table is not small (${est.rows[0]!.n} rows)`);
  // The lookup of one batch's ids: index probes, not a hash of every instance.
  const keys = Array.from({ length: 200 }, (_, i) => `grow-5-${i}`);
  const plan = await s.pool.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN ${FIND_INSTANCE_IDS_SQL}`,
    [keys.map(() => s.customer.id), keys, keys.map(() => 'agent')],
  );
  const text = plan.rows.map((r) => r['QUERY PLAN']).join('\n');
  t.notMatch(text, /Hash Cond: \(k\.software = i\.software\)/, `no hash of all instances by software alone:\n${text}`);
  const found = await findInstanceIds(s.pool, keys.map(() => s.customer.id), keys, keys.map(() => 'agent'));
  t.equal(found.length, 200, 'and it finds them');
  // Machines come due first in every batch: one analysis at a time for both tables starved
  // instances (in the bench they waited until 60,000 rows). Each table has its own.
  const both: string[] = [];
  const g2 = new TableGrowth(s.pool, createLogger('growth', 'warn'), { minRows: 10, share: 0.2 }, (table) => both.push(table));
  g2.note('machines', 100);
  g2.note('instances', 100);
  await g2.settled();
  t.same(both.sort(), ['instances', 'machines'], 'both tables analysed when both came due at once');
});

// Only a table's owner may analyse it. Postgres does not refuse a role that is not: it skips the
// table with a warning, so the analyser asks first, and a role that does not own the tables leaves
// them to autovacuum (and says so once) instead of running a useless ANALYZE after every growth.
t.test('a role that does not own the tables never analyses them, and ingest goes on', async (t) => {
  const role = `growth_${Date.now()}`;
  await s.pool.query(`CREATE ROLE ${role} LOGIN`);
  const url = new URL(s.env.DATABASE_URL!);
  url.username = role;
  const other = createPool(url.toString(), 2, 'fleet-test-growth');
  t.teardown(async () => {
    await other.end();
    await s.pool.query(`DROP ROLE ${role}`);
  });
  const before = await s.pool.query<{ n: string | null }>(`SELECT last_analyze::text AS n FROM pg_stat_user_tables WHERE relname = 'instances'`);
  const analysed: string[] = [];
  const growth = new TableGrowth(other, createLogger('growth', 'silent'), { minRows: 10, share: 0.2 }, (table) => analysed.push(table));
  for (let k = 0; k < 3; k++) {
    growth.note('instances', 100);
    growth.note('machines', 100);
    await growth.settled();
  }
  t.same(analysed, [], 'nothing analysed by a role that does not own the tables');
  const after = await s.pool.query<{ n: string | null }>(`SELECT last_analyze::text AS n FROM pg_stat_user_tables WHERE relname = 'instances'`);
  t.equal(after.rows[0]!.n, before.rows[0]!.n, 'last_analyze unchanged');
  // The batch path with that analyser still applies (it only counts).
  await applyBatch({ ...deps, growth }, [report('growth-other', 'heartbeat', {})], []);
  t.ok(await instance('growth-other'), 'the batch applied');
});
