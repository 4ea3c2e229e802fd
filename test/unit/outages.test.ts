// What a worker waits for (workers/outages.ts): messages nak'ed for an outage name their
// dependency until acked or well overdue; the ClickHouse rows of a retried batch that landed are
// remembered, so the retry inserts each report's rows once.
import t from 'tap';
import { Outages, LandedRows } from '../../workers/outages.js';

t.test('an outage lasts while a message waits for it', async (t) => {
  const o = new Outages(15_000);
  t.equal(o.problem(0), null);
  o.wait('S:1', { dependency: 'clickhouse', reason: 'ClickHouse error 60 UNKNOWN_TABLE' }, 500, 1000);
  o.wait('S:2', { dependency: 'clickhouse', reason: 'ClickHouse error 60 UNKNOWN_TABLE' }, 500, 2000);
  o.wait('S:3', { dependency: 'postgres', reason: 'Postgres error 25006 read_only_sql_transaction' }, 500, 3000);
  t.same(o.current(4000).map((x) => [x.dependency, x.messages, x.since]), [['clickhouse', 2, 1000], ['postgres', 1, 3000]]);
  t.equal(o.problem(4000), 'clickhouse (ClickHouse error 60 UNKNOWN_TABLE) for 3 s, 2 messages waiting, postgres (Postgres error 25006 read_only_sql_transaction) for 1 s, 1 message waiting');
  // Tried again and failed again: still waiting since the first time.
  o.wait('S:1', { dependency: 'clickhouse', reason: 'ClickHouse error 252 TOO_MANY_PARTS' }, 30_000, 10_000);
  t.equal(o.current(10_000).find((x) => x.dependency === 'clickhouse')!.since, 1000);
  o.done('S:3');
  t.same(o.current(10_000).map((x) => x.dependency), ['clickhouse']);
  // S:2's retry was due at 2500; another worker took it: dropped after the grace.
  t.same(o.current(17_501).map((x) => x.messages), [1]);
  o.done('S:1');
  t.equal(o.problem(17_501), null);
  t.equal(o.size, 0);
});

t.test('landed rows: remembered per table, forgotten on ack, bounded', async (t) => {
  const l = new LandedRows(3);
  const first = l.ledger();
  t.notOk(first.landed('heartbeats', 'a'));
  first.inserted('status_history', ['a', 'b']);
  t.notOk(l.has('status_history', 'a'), 'kept aside until committed');
  first.commit();
  t.ok(l.has('status_history', 'a'));
  t.notOk(l.has('heartbeats', 'a'), 'per table');
  const second = l.ledger();
  t.ok(second.landed('status_history', 'b'));
  second.inserted('heartbeats', ['a']);
  second.commit();
  t.ok(l.has('heartbeats', 'a') && l.has('status_history', 'a'));
  l.forget(['a']);
  t.notOk(l.has('heartbeats', 'a'));
  l.add('x', ['c', 'd', 'e']);
  t.equal(l.size, 3, 'the oldest forgotten beyond the bound');
  t.notOk(l.has('status_history', 'b'));
});
