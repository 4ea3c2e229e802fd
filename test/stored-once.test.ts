// The helper the outage tests count with (test/helpers/stored-once.ts) sees what FINAL and
// uniqExact cannot: one report inserted twice, with merges stopped, is two raw rows.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, chRows } from './helpers/stack.js';
import { storedOnce, stopMerges } from './helpers/stored-once.js';

const s = await testStack(t, 'storedonce', { gateway: false, worker: false, api: false });

t.test('one copy of a report inserted twice: FINAL and uniqExact say once, the helper says doubled', async (t) => {
  await stopMerges(s.ch, `t_${s.id}`);
  const twice = randomUUID();
  const once = randomUUID();
  const insert = (report: string, version: string) =>
    s.ch.insert({ table: 'heartbeats', values: [{ received_at: '2026-01-01 00:00:00', received_ms: 1, report_id: report, version, customer_id: s.customer.id }], format: 'JSONEachRow' });
  await insert(twice, 'so-twice');
  await insert(twice, 'so-twice'); // the same copy again: a second part
  await insert(once, 'so-once');

  const final = await chRows<{ n: string; u: string }>(s.ch, `SELECT count() AS n, uniqExact(report_id) AS u FROM heartbeats FINAL WHERE version = 'so-twice'`);
  t.same(final[0], { n: '1', u: '1' }, 'FINAL shows one row, and one report');
  const raw = await chRows<{ u: string }>(s.ch, `SELECT uniqExact(report_id) AS u FROM heartbeats WHERE version = 'so-twice'`);
  t.equal(raw[0]!.u, '1', 'uniqExact on raw rows shows one report too');

  const r = await storedOnce(s.ch, 'heartbeats', 'version', ['so-twice', 'so-once', 'so-never']);
  t.same(r, { expected: 3, rows: 3, reports: 2, missing: ['so-never'], doubled: ['so-twice'], once: false });
  t.notOk((await storedOnce(s.ch, 'heartbeats', 'version', ['so-twice'])).once, 'doubled: not once');
  t.ok((await storedOnce(s.ch, 'heartbeats', 'version', ['so-once'])).once, 'the single copy: once');
});
