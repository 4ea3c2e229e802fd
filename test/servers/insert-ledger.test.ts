// The long runs' duplicate count (bench/insert-ledger.ts): merges run (they cannot be stopped for
// ten minutes), OPTIMIZE … FINAL folds a doubled report into one row of the table, and the ledger
// still counts both inserts. Without this, the soak's "0 doubled" could not have said otherwise.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, chRows } from '../helpers/stack.js';
import { insertLedger } from '../../bench/insert-ledger.js';

const s = await testStack(t, 'insertledger', { gateway: false, worker: false, api: false });

t.test('a report inserted twice and merged into one row: the ledger counts 2, a single insert 1', async (t) => {
  const ledger = await insertLedger(s.ch, ['heartbeats', 'diagnostics'], 'test');
  t.teardown(() => ledger.drop());
  const twice = randomUUID();
  const once = randomUUID();
  const other = randomUUID();
  const row = (report: string, customer = s.customer.id) => ({ received_at: '2026-01-01 00:00:00', received_ms: 1, report_id: report, customer_id: customer });
  await s.ch.insert({ table: 'heartbeats', values: [row(twice)], format: 'JSONEachRow' });
  await s.ch.insert({ table: 'heartbeats', values: [row(twice), row(once)], format: 'JSONEachRow' });
  await s.ch.insert({ table: 'heartbeats', values: [row(other, randomUUID())], format: 'JSONEachRow' });
  await s.ch.command({ query: 'OPTIMIZE TABLE heartbeats FINAL' });
  const merged = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats WHERE report_id = '${twice}'`);
  t.equal(merged[0]!.n, '1', 'the table itself: one row after the merge');

  const got = await ledger.inserted('heartbeats', [s.customer.id]);
  t.equal(got.get(twice), 2, 'the ledger: inserted twice');
  t.equal(got.get(once), 1, 'the ledger: inserted once');
  t.notOk(got.has(other), "another customer's report is not counted");
  t.equal((await ledger.inserted('diagnostics', [s.customer.id])).size, 0, 'nothing inserted into diagnostics');
});
