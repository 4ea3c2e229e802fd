// The helper the outage tests count with (test/helpers/stored-once.ts) sees what FINAL and
// uniqExact cannot: one report inserted twice, with merges stopped, is two raw rows.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, chRows, eventually } from '../helpers/stack.js';
import { storedOnce, stopMerges } from '../helpers/stored-once.js';
import { watchDeliveries, gone, parseAckSubject } from '../helpers/deliveries.js';
import { ensureConsumer } from '../../lib/infra/nats.js';
import { subjects, encodeBatch, encodeReport } from '../../lib/contract/messages.js';

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
  t.same(r, { expected: 3, rows: 3, reports: 2, missing: ['so-never'], doubled: ['so-twice'], split: [], once: false });
  t.notOk((await storedOnce(s.ch, 'heartbeats', 'version', ['so-twice'])).once, 'doubled: not once');
  t.ok((await storedOnce(s.ch, 'heartbeats', 'version', ['so-once'])).once, 'the single copy: once');
  const byPrefix = await storedOnce(s.ch, 'heartbeats', 'version', ['so-twice', 'so-once'], { like: 'so-%' });
  t.same(byPrefix, { expected: 2, rows: 3, reports: 2, missing: [], doubled: ['so-twice'], split: [], once: false }, 'the same, selected by prefix');

  // One request stored as two reports (two report ids, one marker): `split`, which no merge hides.
  await insert(randomUUID(), 'so-split');
  await insert(randomUUID(), 'so-split');
  const split = await storedOnce(s.ch, 'heartbeats', 'version', ['so-split', 'so-once']);
  t.same(split.split, ['so-split'], 'two reports for one marker: split');
  t.same(split.doubled, ['so-split']);
  t.same((await storedOnce(s.ch, 'heartbeats', 'version', ['so-twice'])).split, [], 'two copies of one report: not split');
});

// worker-crash.test.ts allows a second raw row only for a report whose message was delivered
// again: the record of deliveries (test/helpers/deliveries.ts) must count a redelivery, and count
// a message delivered once as once.
t.test('the record of deliveries counts a redelivery, and a message delivered once as once', async (t) => {
  t.same(parseAckSubject('$JS.ACK.S.workers.2.17.40.1700000000000000000.3'), { stream: 'S', consumer: 'workers', count: 2, seq: 17, dseq: 40 });
  t.same(parseAckSubject('$JS.ACK.dom.acchash.S.workers.1.5.6.1700000000000000000.0.tok'), { stream: 'S', consumer: 'workers', count: 1, seq: 5, dseq: 6 });
  t.equal(parseAckSubject('_INBOX.x'), null);
  const stream = s.env.STREAM_NAME!;
  const jsm = await s.nc.jetstreamManager();
  await ensureConsumer(jsm, stream, 'workers', 30);
  const watch = await watchDeliveries(s.nc, stream);
  t.teardown(() => watch.stop());
  const js = s.nc.jetstream();
  const report = (m: string) => encodeBatch([encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine: m, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, null)]);
  const once = await js.publish(subjects(s.env.SUBJECT_PREFIX!).reports, report('dl-once'));
  const again = await js.publish(subjects(s.env.SUBJECT_PREFIX!).reports, report('dl-again'));
  const consumer = await js.consumers.get(stream, 'workers');
  const take = async () => {
    const m = await consumer.next({ expires: 10_000 });
    if (!m) throw new Error('nothing delivered');
    return m;
  };
  const first = await take();
  t.equal(first.seq, once.seq);
  first.ack();
  const second = await take();
  t.equal(second.seq, again.seq);
  second.nak(); // delivered again at once
  const third = await take();
  t.equal(third.seq, again.seq, 'the nak-ed message again');
  third.ack();
  for (const seq of [once.seq, again.seq]) await eventually(() => gone(jsm, stream, seq), 10_000, `message ${seq} acked`);
  await eventually(async () => ((await watch.missed()).length === 0 ? true : null), 10_000, 'every delivery seen');
  t.same(watch.of(once.seq).map((d) => d.count), [1], 'delivered once: once');
  t.same(watch.of(again.seq).map((d) => d.count), [1, 2], 'delivered again: twice');
  t.same(watch.seqsWith((_id, m) => m === 'dl-again'), [again.seq], 'found by the machine of its report');
  const per = watch.perReport();
  t.same([...per.values()].sort(), [1, 2], 'per report: 1 and 2 deliveries');
});
