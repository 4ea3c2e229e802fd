// A ClickHouse table partitioned anew against the real servers (lib/store/repartition.ts, run by
// the migration 0006-day-partitions): a `heartbeats` table partitioned by month, as every install
// before that migration has it, with rows in past months and the current one, becomes one
// partitioned by day under the same name, every row in it once. Stopped at each step (as a killed
// process stops) and run again, it finishes with no row lost or doubled; a row that reaches an
// already copied month before the swap is copied too; inserts while it runs all arrive (an insert
// that meets the instant of the swap is retried, as the worker retries a missing table).
import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, chRows } from '../helpers/stack.js';
import { repartition, type RepartitionSpec, type RepartitionStop } from '../../lib/store/repartition.js';
import { clickhouseMigrationsFor } from '../../lib/store/schema.js';

const s = await testStack(t, 'repartition', { gateway: false, worker: false, api: false });
const target = { database: s.env.CLICKHOUSE_DB! };
const spec: RepartitionSpec = clickhouseMigrationsFor(target)
  .flatMap((m) => m.repartition)
  .find((r) => r.table === 'heartbeats')!;
const MONTHS = ['2025-12', '2026-04', '2026-05', '2026-06'];

const q = <T = Record<string, string>>(sql: string) => chRows<T>(s.ch, sql);
const cmd = (query: string) => s.ch.command({ query });
const count = async (sql: string) => Number((await q<{ n: string }>(sql))[0]!.n);

/** `heartbeats` as it was before 0006: the same columns, partitioned by month; the state table empty. */
async function monthlyTable(): Promise<void> {
  await cmd('DROP TABLE IF EXISTS heartbeats_by_day');
  await cmd('DROP TABLE IF EXISTS heartbeats_by_month');
  await cmd('DROP TABLE IF EXISTS heartbeats_monthly');
  await cmd(`CREATE TABLE heartbeats_monthly AS heartbeats ENGINE = ReplacingMergeTree() PARTITION BY ${spec.from} ORDER BY (${spec.orderBy})`);
  await cmd('DROP TABLE heartbeats');
  await cmd('RENAME TABLE heartbeats_monthly TO heartbeats');
  await s.pool.query('DELETE FROM clickhouse_repartitions');
}

const row = (at: string, id = randomUUID()) => ({ received_at: at, received_ms: Date.parse(`${at.replace(' ', 'T')}Z`), report_id: id, customer_id: s.customer.id, version: id });
async function insert(rows: object[]): Promise<void> {
  await s.ch.insert({ table: 'heartbeats', values: rows, format: 'JSONEachRow' });
}
/** Three rows on two days of each month, each insert its own part. */
async function fill(): Promise<string[]> {
  const ids: string[] = [];
  for (const m of MONTHS) {
    const rows = [row(`${m}-03 10:00:00`), row(`${m}-03 11:00:00`), row(`${m}-17 10:00:00`)];
    await insert(rows);
    ids.push(...rows.map((r) => r.report_id));
  }
  return ids.sort();
}

/** Each id with its number of raw rows; FINAL's ids. */
async function contents() {
  const raw = await q<{ id: string; n: string }>('SELECT report_id AS id, count() AS n FROM heartbeats GROUP BY report_id ORDER BY id');
  const final = (await q<{ id: string }>('SELECT report_id AS id FROM heartbeats FINAL ORDER BY id')).map((r) => r.id);
  const doubled = raw.filter((r) => Number(r.n) > 1).map((r) => r.id);
  return { ids: raw.map((r) => r.id), doubled, final };
}

async function partitionsOf(table: string): Promise<string[]> {
  return (await q<{ p: string }>(`SELECT DISTINCT partition AS p FROM system.parts WHERE database = currentDatabase() AND table = '${table}' AND active ORDER BY p`)).map((r) => r.p);
}

async function finished(t: Test, ids: string[]): Promise<void> {
  const c = await contents();
  t.same(c.ids, ids, 'every row is there');
  t.same(c.final, ids, 'FINAL: each once');
  t.ok((await partitionsOf('heartbeats')).every((p) => /^\d{8}$/.test(p)), 'partitioned by day');
  t.equal(await count("SELECT count() AS n FROM system.tables WHERE database = currentDatabase() AND name IN ('heartbeats_by_month', 'heartbeats_by_day')"), 0, 'the old and the interim table are gone');
  t.equal((await s.pool.query('SELECT count(*)::int AS n FROM clickhouse_repartitions')).rows[0].n, 0, 'no progress left in Postgres');
  t.equal(await count('SELECT count() AS n FROM heartbeats_v'), ids.length, 'the view analysts read names the new table');
  t.same(await repartition(s.ch, s.pool, target, spec, {}), { state: 'done', copied: [] }, 'a second run has nothing to do');
}

t.test('the migration left every table it repartitions partitioned by day', async (t) => {
  const create = await q<{ q: string }>("SELECT create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name IN ('heartbeats', 'ingest_rejections') ORDER BY name");
  t.equal(create.length, 2);
  for (const c of create) t.match(c.q, /PARTITION BY toYYYYMMDD\(received_at\)/);
});

t.test('a table partitioned by month becomes one partitioned by day, every row once', async (t) => {
  await monthlyTable();
  const ids = await fill();
  t.same(await partitionsOf('heartbeats'), ['202512', '202604', '202605', '202606'], 'before: months');
  const r = await repartition(s.ch, s.pool, target, spec, {});
  t.same(r, { state: 'repartitioned', copied: [202512, 202604, 202605, 202606] }, 'each month copied once (nothing came after its copy)');
  t.same(await partitionsOf('heartbeats'), MONTHS.flatMap((m) => [`${m.replace('-', '')}03`, `${m.replace('-', '')}17`]), 'after: the days');
  const c = await contents();
  t.same(c.doubled, [], 'no row twice');
  await finished(t, ids);
});

const stops: [RepartitionStop, boolean][] = [
  ['after-first-copy', false],
  ['before-swap', false],
  ['after-swap', false],
  ['before-drop', false],
  // A row came after June's copy; its copy after the swap ran, the record did not: copied again
  // (it, and the rows of a part a merge made of it, stand twice until a merge).
  ['after-copy-before-record', true],
];
for (const [stopAt, mayDouble] of stops) {
  t.test(`stopped ${stopAt}, then run again: nothing lost${mayDouble ? ' (one month doubled on raw rows, once through FINAL)' : ' or doubled'}`, async (t) => {
    await monthlyTable();
    const ids = await fill();
    if (stopAt === 'after-copy-before-record') {
      await t.rejects(repartition(s.ch, s.pool, target, spec, { stopAt: 'before-swap' }), /stopped before-swap/);
      const late = row('2026-06-19 08:00:00');
      await insert([late]);
      ids.push(late.report_id);
      ids.sort();
    }
    await t.rejects(repartition(s.ch, s.pool, target, spec, { stopAt }), new RegExp(`stopped ${stopAt}`));
    // Readable under its name the whole time.
    t.same((await contents()).final, ids, 'between the runs: every row readable under the table name');
    await repartition(s.ch, s.pool, target, spec, {});
    const c = await contents();
    if (mayDouble) t.ok(c.doubled.length >= 1 && c.doubled.length <= 4, `June's rows at most doubled (${c.doubled.length})`);
    else t.same(c.doubled, [], 'no row twice');
    await finished(t, ids);
  });
}

t.test('a row that reaches a month after its copy, before the swap, is copied too', async (t) => {
  await monthlyTable();
  const ids = await fill();
  await t.rejects(repartition(s.ch, s.pool, target, spec, { stopAt: 'before-swap' }), /stopped before-swap/);
  // A report of April applied late (a backlog, a dead letter replayed): into the table being copied.
  const late = row('2026-04-28 08:00:00');
  await insert([late]);
  await repartition(s.ch, s.pool, target, spec, {});
  const all = [...ids, late.report_id].sort();
  const c = await contents();
  t.same(c.final, all, 'the late row is there, each row once through FINAL');
  t.ok(c.doubled.every((id) => ids.includes(id)), 'April copied again: only its rows may stand twice before a merge');
  await cmd('OPTIMIZE TABLE heartbeats FINAL');
  t.same((await contents()).doubled, [], 'a merge folds them');
  await finished(t, all);
});

t.test('inserts while it runs all arrive', async (t) => {
  await monthlyTable();
  const ids = await fill();
  let stop = false;
  let retried = 0;
  const written: string[] = [];
  const writer = (async () => {
    while (!stop) {
      const r = row('2026-06-20 12:00:00');
      for (;;) {
        try {
          await insert([r]);
          break;
        } catch {
          retried++; // the instant between the two names of the swap: the worker waits and retries
          await new Promise((res) => setTimeout(res, 20));
        }
      }
      written.push(r.report_id);
    }
  })();
  await new Promise((res) => setTimeout(res, 200));
  await repartition(s.ch, s.pool, target, spec, {});
  await new Promise((res) => setTimeout(res, 200));
  stop = true;
  await writer;
  t.ok(written.length > 5, `${written.length} rows written while it ran (${retried} inserts retried)`);
  const all = [...ids, ...written].sort();
  t.same((await contents()).final, all, 'every row, each once through FINAL');
  await finished(t, all);
});
