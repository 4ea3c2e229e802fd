// Heartbeats have a lane of their own (lib/contract/messages.ts, docs/architecture.md "Lanes"): a backlog of
// large reports in the main stream does not hold a heartbeat back. Before the lane, one queue:
// every heartbeat waited behind whatever was accepted before it.
//
// The backlog is made with no worker running (200,000 diagnostics items queued in the main stream);
// then a worker starts and a heartbeat is sent through the gateway. The heartbeat is applied while
// most of the backlog is still queued (a ratio of the worker's own progress, not a clock: a slower
// machine applies both lanes slower). Also: a gateway routes by kind, and a heartbeat queued in the
// main stream (as a replayed dead letter would be) is applied there like any other report.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, eventually, chRows, drained } from '../helpers/stack.js';
import { storedOnce } from '../helpers/stored-once.js';
import { subjects, encodeReport, encodeBatch, heartbeatStream } from '../../lib/contract/messages.js';

const s = await testStack(t, 'lanes', { worker: false, api: false });
const subj = subjects(s.env.SUBJECT_PREFIX!);
const js = s.nc.jetstream();
const jsm = await s.nc.jetstreamManager();
const MAIN = s.env.STREAM_NAME!;
const HB = heartbeatStream(MAIN);
const messages = async (stream: string) => (await jsm.streams.info(stream)).state.messages;

t.test('a gateway sends heartbeats to their lane and every other kind to the main stream', async (t) => {
  // Each stream its own limit (STREAM_MAX_BYTES, STREAM_HEARTBEAT_MAX_BYTES: the test stack's).
  t.equal((await jsm.streams.info(MAIN)).config.max_bytes, Number(s.env.STREAM_MAX_BYTES));
  t.equal((await jsm.streams.info(HB)).config.max_bytes, Number(s.env.STREAM_HEARTBEAT_MAX_BYTES));
  t.not(Number(s.env.STREAM_MAX_BYTES), Number(s.env.STREAM_HEARTBEAT_MAX_BYTES), 'two different limits');
  const [m0, h0] = [await messages(MAIN), await messages(HB)];
  t.equal((await s.report('route-hb', 'heartbeat', { version: 'route-hb' })).status, 200);
  t.equal(await messages(HB), h0 + 1, 'the heartbeat in the heartbeat lane');
  t.equal(await messages(MAIN), m0, 'nothing in the main stream');
  t.equal((await s.report('route-st', 'status', { status: 'running', message: 'route-st' })).status, 200);
  t.equal(await messages(MAIN), m0 + 1, 'the status report in the main stream');
  t.equal(await messages(HB), h0 + 1, 'nothing more in the heartbeat lane');
});

t.test('a heartbeat is applied while a backlog of large reports waits in the main stream', async (t) => {
  // BACKLOG messages of 50 diagnostics reports of 10 items each: 600,000 ClickHouse rows, seconds
  // of work. 400 messages once were; a faster drain (bench/README.md [D5]) emptied half of them
  // before the heartbeat's row could be seen, so the backlog is sized to outlast that by far.
  const BACKLOG = 1200;
  const items = JSON.stringify({ items: Array.from({ length: 10 }, (_, i) => ({ code: i, severity: 1, message: 'backlog '.repeat(10) })) });
  const report = (machine: string) =>
    encodeReport({ id: randomUUID(), kind: 'diagnostics', customerId: s.customer.id, customer: s.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from(items));
  for (let m = 0; m < BACKLOG; m += 50) {
    await Promise.all(Array.from({ length: 50 }, (_, j) => js.publish(subj.reports, encodeBatch(Array.from({ length: 50 }, (_, i) => report(`backlog-${(m + j) % 20}-${i % 5}`))))));
  }
  const backlog = await messages(MAIN);
  t.ok(backlog >= BACKLOG, `${backlog} messages queued in the main stream`);

  await s.startWorker();
  const sent = Date.now();
  t.equal((await s.report('quiet', 'heartbeat', { version: 'lane-quiet' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['lane-quiet'])).missing.length === 0, 60_000, 'the heartbeat applied');
  const applied = Date.now() - sent;
  const left = await messages(MAIN);
  t.comment(`heartbeat applied ${applied} ms after it was sent; ${left} of ${backlog} backlog messages still queued then`);
  // In one queue the heartbeat would have been applied after the backlog ahead of it.
  t.ok(left > backlog / 2, `most of the backlog still queued when the heartbeat was applied (${left} of ${backlog})`);

  // Everything of the backlog is applied in the end, once.
  await drained(s, 300_000);
  const [row] = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM diagnostics FINAL WHERE machine LIKE 'backlog-%'`);
  t.equal(Number(row!.n), BACKLOG * 50 * 10, 'every backlog item stored once (FINAL)');
});

t.test('a heartbeat queued in the main stream (a replayed dead letter) is applied there', async (t) => {
  const id = randomUUID();
  const hb = encodeReport({ id, kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine: 'in-main', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from('{"version":"lane-in-main"}'));
  await js.publish(subj.reports, encodeBatch([hb]));
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['lane-in-main'])).missing.length === 0, 30_000, 'applied from the main stream');
  await drained(s);
  t.pass('applied and acked');
});

t.test('WORKER_LANES: a worker of the heartbeat lane alone leaves other reports to the workers of the main stream', async (t) => {
  await Promise.all(s.procs.filter((p) => p.name === 'worker').map((p) => p.stop()));
  await s.startWorker({ WORKER_LANES: 'heartbeats' });
  t.equal((await s.report('only-st', 'status', { status: 'running', message: 'lane-only-st' })).status, 200);
  t.equal((await s.report('only-hb', 'heartbeat', { version: 'lane-only-hb' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['lane-only-hb'])).missing.length === 0, 30_000, 'the heartbeat applied');
  t.equal(await messages(MAIN), 1, 'the status report waits in the main stream: no worker pulls it');
  t.same((await storedOnce(s.ch, 'status_history', 'message', ['lane-only-st'])).missing, ['lane-only-st'], 'not applied');
  await s.startWorker({ WORKER_LANES: 'reports' });
  await eventually(async () => (await storedOnce(s.ch, 'status_history', 'message', ['lane-only-st'])).missing.length === 0, 30_000, 'applied by the worker of the main stream');
  await drained(s);
});

t.test('a full heartbeat lane answers heartbeats 503 and costs the main stream nothing; what it took is stored', async (t) => {
  const small = await testStack(t, 'lanefull', { worker: false, api: false, env: { STREAM_HEARTBEAT_MAX_BYTES: '20000', QUEUE_SHARE_FROM_PERCENT: '100' } });
  let accepted = 0;
  let full: Awaited<ReturnType<typeof small.report>> | null = null;
  for (let i = 0; i < 400 && !full; i++) {
    const r = await small.report(`hb-${i % 5}`, 'heartbeat', { version: `full-${i}`.padEnd(200, 'x') });
    if (r.status === 200) accepted++;
    else full = r;
  }
  t.ok(full, 'refused once the lane is full');
  t.equal(full!.status, 503);
  t.match(full!.body.detail, /queue full/);
  t.ok(accepted > 0, `${accepted} heartbeats accepted before it filled up`);
  t.equal((await small.report('st', 'status', { status: 'running', message: 'lane-full-st' })).status, 200, 'a status report still accepted: its stream is not full');
  await small.startWorker();
  await eventually(async () => {
    const [r] = await chRows<{ n: string }>(small.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE version LIKE 'full-%'`);
    return Number(r!.n) === accepted;
  }, 30_000, 'every accepted heartbeat stored once a worker runs');
  await eventually(async () => (await storedOnce(small.ch, 'status_history', 'message', ['lane-full-st'])).missing.length === 0, 30_000, 'the status report stored');
  await eventually(async () => (await small.report('hb-0', 'heartbeat', { version: 'after-full' })).status === 200, 10_000, 'heartbeats accepted again once drained');
});
