// No message the gateway can publish may stall a consumer (workers/pull.ts). Before: a 200 KB
// report after 1,000 small ones was answered 200 and never delivered, and nothing behind it was
// applied, for any customer (nats.js consume() with max_bytes; nats-server issue 5888).
//   1. that sequence through the real gateway with its default grouping: everything applied
//      within seconds, and the pipeline keeps applying afterwards;
//   2. the same straight into JetStream (3,000 messages of 400 B, then one of 200 KB, then more);
//   3. a pull that stops delivering (induced with the old, stalling pull) is found by the
//      watchdog: logged, counted, shown as not ready, and restarted; the report arrives;
//   4. a consumer whose unacked messages reach its max_ack_pending delivers nothing to any
//      worker: the watchdog shows it as not ready (saturated, not a stall), until some are acked.
import t from 'tap';
import { HeartbeatState } from '../../workers/heartbeat-state.js';
import { Writable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { AckPolicy, nanos, type Consumer, type JsMsg } from 'nats';
import { testStack, post, eventually, chRows } from '../helpers/stack.js';
import { subjects, encodeReport, encodeBatch } from '../../lib/contract/messages.js';
import { createMetrics } from '../../lib/infra/metrics.js';
import { reportChecker } from '../../lib/domain/report-check.js';
import { IngestConsumer } from '../../workers/ingest-consumer.js';

const s = await testStack(t, 'stall', { api: false });
const other = await s.newCustomer('stall-b');
await s.pool.query(`UPDATE licences SET device_limit = 100000`);
const ingest = (slug: string, machine: string, kind: string) => `${s.gatewayUrl}/api/ingest/${slug}/${machine}/agent/${kind}`;
// One checker per process (its schemas are compiled once, by id).
const checker = reportChecker(1000);
const count = async (sql: string) => Number((await chRows<{ n: string }>(s.ch, sql))[0]!.n);

t.test('1,500 small reports, then several of 200 KB and one of 950 KB, through the gateway: all applied within seconds, and more after', async (t) => {
  const small = async (i: number) => {
    const [slug, token] = i % 2 ? [s.customer.slug, s.token] : [other.customer.slug, other.token];
    // Diagnostics, not heartbeats: heartbeats go to a lane of their own (lib/contract/messages.ts), and the
    // sequence must be in the stream the large reports go to.
    const r = await post(ingest(slug, `small-${i % 100}`, 'diagnostics'), token, { items: [{ code: i, severity: 0, message: `m${i}` }] });
    if (r.status !== 200 && r.status !== 202) throw new Error(`small report ${i}: ${r.status}`); // 202: help texts missing
  };
  for (let i = 0; i < 1500; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => small(i + j)));
  const blob = (n: number) => 'x'.repeat(n);
  const large = [
    ...Array.from({ length: 4 }, (_, i) => post(ingest(s.customer.slug, `large-${i}`, 'status'), s.token, { status: 'running', snapshot: { blob: blob(200_000) } })),
    // ~950 KB: a thousand diagnostics of 940 characters.
    post(ingest(other.customer.slug, 'huge', 'diagnostics'), other.token, { items: Array.from({ length: 1000 }, (_, i) => ({ code: i, severity: 0, message: blob(940) })) }),
  ];
  const answers = await Promise.all(large);
  t.same(answers.map((a) => a.status >= 200 && a.status < 300), [true, true, true, true, true], 'every large report accepted');
  const acked = Date.now();
  await eventually(
    async () =>
      (await count(`SELECT count() AS n FROM diagnostics FINAL WHERE machine LIKE 'small-%'`)) === 1500 &&
      (await count(`SELECT count() AS n FROM status_history FINAL WHERE machine LIKE 'large-%'`)) === 4 &&
      (await count(`SELECT count() AS n FROM diagnostics FINAL WHERE machine = 'huge'`)) === 1000,
    20_000,
    'every report applied',
  );
  t.pass(`all applied ${Date.now() - acked} ms after the last 200`);
  // The pipeline keeps going, in both lanes.
  for (let i = 0; i < 100; i++) t.equal((await post(ingest(s.customer.slug, 'after', 'heartbeat'), s.token, { version: `after-${i}` })).status, 200);
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'after'`)) === 100, 10_000, 'later reports applied');
});

t.test('straight into JetStream: 3,000 messages of 400 B, one of 200 KB, then small ones again: every report applied', async (t) => {
  const subj = subjects(s.env.SUBJECT_PREFIX!);
  const js = s.nc.jetstream();
  const report = (machine: string, pad: number) =>
    encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from(JSON.stringify({ version: 'p'.repeat(pad) })));
  const one = report('js-small', 150);
  t.ok(encodeBatch([one]).length >= 380 && encodeBatch([one]).length <= 420, `a small message is about 400 B (${encodeBatch([one]).length})`);
  for (let i = 0; i < 3000; i += 200) await Promise.all(Array.from({ length: 200 }, () => js.publish(subj.reports, encodeBatch([report('js-small', 150)]))));
  const big = encodeBatch(Array.from({ length: 540 }, () => report('js-big', 150)));
  t.ok(big.length > 200_000, `one message of ${big.length} bytes`);
  await js.publish(subj.reports, big);
  for (let i = 0; i < 20; i++) await js.publish(subj.reports, encodeBatch([report('js-tail', 10)]));
  await eventually(
    async () =>
      (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'js-small'`)) === 3000 &&
      (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'js-big'`)) === 540 &&
      (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'js-tail'`)) === 20,
    30_000,
    'every report applied',
  );
});

t.test('a pull that stops delivering is found by the watchdog, logged, shown as not ready, restarted, and the report arrives', async (t) => {
  // A stack of its own without a worker process: this worker runs in the test, with the first
  // pull replaced by the old stalling one (consume by bytes, smaller than the waiting message).
  const w = await testStack(t, 'watchdog', { api: false, gateway: false, worker: false });
  const subj = subjects(w.env.SUBJECT_PREFIX!);
  const js = w.nc.jetstream();
  const jsm = await w.nc.jetstreamManager();
  const { ensureConsumer } = await import('../../lib/infra/nats.js');
  await ensureConsumer(jsm, w.env.STREAM_NAME!, 'workers', 30);
  const real = await js.consumers.get(w.env.STREAM_NAME!, 'workers');
  let pulls = 0;
  const stalling: Consumer = Object.assign(Object.create(real) as Consumer, {
    // The first three pulls stall (so the stall outlasts one restart and can be watched), then real ones.
    fetch: (opts: Parameters<Consumer['fetch']>[0]) => (++pulls <= 3 ? real.consume({ max_bytes: 1024 }) : real.fetch(opts)),
  });
  const report = encodeReport(
    { id: randomUUID(), kind: 'heartbeat', customerId: w.customer.id, customer: w.customer.slug, machine: 'stuck', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() },
    Buffer.from(JSON.stringify({ version: 'v'.repeat(200), ip_addresses: Array.from({ length: 150 }, () => '10.0.0.1') })),
  );
  await js.publish(subj.reports, encodeBatch([report]));

  const lines: { msg?: string; level?: number }[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
      done();
    },
  });
  const metrics = createMetrics('worker');
  const consumer = new IngestConsumer(
    stalling,
    js,
    {
      pool: w.pool,
      ch: w.ch,
      redis: w.redis,
      redisPrefix: w.env.REDIS_PREFIX!,
      heartbeats: new HeartbeatState(w.redis, w.env.REDIS_PREFIX!, { heartbeatTimeoutMs: 300_000, pgIntervalMs: 240_000, idCacheSize: 1000 }),
      idempotencyTtlS: 60,
      tsWindow: { pastMs: 30 * 86_400_000, futureMs: 86_400_000 },
      ackTimeoutS: 3600,
    },
    checker,
    {
      lane: 'reports',
      partition: '0',
      reportsSubject: subj.reports,
      rejectionsSubject: subj.rejections,
      deadLetterSubject: subj.deadLetter,
      batchMaxMessages: 256,
      batchMaxBytes: 16 * 1024 * 1024,
      batchWaitMs: 20,
      retryMaxMs: 30_000,
      concurrency: 2,
      pull: { maxMessages: 30, expiresMs: 5000 },
      stallMs: 1500,
      watchdogMs: 250,
    },
    pino({ level: 'info' }, sink),
    metrics,
  );
  consumer.start();
  const seen = await eventually(async () => consumer.problem(), 10_000, 'the stall seen').catch((e) => {
    t.comment(JSON.stringify(lines.slice(-20)));
    throw e;
  });
  t.match(seen, /^stalled for \d+ s \(messages pending, none delivered\)$/, `not ready while stalled: ${seen}`);
  await eventually(async () => (await chRows(w.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine = 'stuck'`)).length === 1, 10_000, 'the report applied after the restart');
  t.ok(pulls >= 4, `the pull was started afresh (${pulls} pulls)`);
  t.ok(lines.some((l) => l.level === 50 && /consumer stalled/.test(l.msg ?? '')), 'an error line in the log');
  t.match(await metrics.text(), /fleet_worker_consumer_stalls_total\{lane="reports",partition="0",service="worker"\} [3-9]/, 'each stall counted');
  await eventually(async () => consumer.problem() === null, 5000, 'ready again once it delivers');
  await consumer.stop();
});

t.test('a consumer at its max_ack_pending delivers nothing to anyone: not ready (saturated), not a stall; ready again once acked', async (t) => {
  const w = await testStack(t, 'saturated', { api: false, gateway: false, worker: false });
  const subj = subjects(w.env.SUBJECT_PREFIX!);
  const js = w.nc.jetstream();
  const jsm = await w.nc.jetstreamManager();
  // A cap of 2 stands for the 50,000 of a real deployment.
  await jsm.consumers.add(w.env.STREAM_NAME!, { durable_name: 'workers', ack_policy: AckPolicy.Explicit, ack_wait: nanos(120_000), max_deliver: -1, max_ack_pending: 2 });
  const real = await js.consumers.get(w.env.STREAM_NAME!, 'workers');
  const hb = (machine: string) =>
    encodeBatch([encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: w.customer.id, customer: w.customer.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from(`{"version":"${machine}"}`))]);
  for (const m of ['sat-held-1', 'sat-held-2', 'sat-next-1', 'sat-next-2']) await js.publish(subj.reports, hb(m));
  // Another worker holds two messages and does not ack them (one stuck in a long outage, say).
  const held: JsMsg[] = [];
  for await (const m of await real.fetch({ max_messages: 2, expires: 5000 })) {
    held.push(m);
    if (held.length === 2) break;
  }
  t.equal(held.length, 2, 'two messages held, unacked');

  const lines: { msg?: string; level?: number }[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
      done();
    },
  });
  const consumer = new IngestConsumer(
    real,
    js,
    {
      pool: w.pool,
      ch: w.ch,
      redis: w.redis,
      redisPrefix: w.env.REDIS_PREFIX!,
      heartbeats: new HeartbeatState(w.redis, w.env.REDIS_PREFIX!, { heartbeatTimeoutMs: 300_000, pgIntervalMs: 240_000, idCacheSize: 1000 }),
      idempotencyTtlS: 60,
      tsWindow: { pastMs: 30 * 86_400_000, futureMs: 86_400_000 },
      ackTimeoutS: 3600,
    },
    checker,
    {
      lane: 'reports',
      partition: '0',
      reportsSubject: subj.reports,
      rejectionsSubject: subj.rejections,
      deadLetterSubject: subj.deadLetter,
      batchMaxMessages: 256,
      batchMaxBytes: 16 * 1024 * 1024,
      batchWaitMs: 20,
      retryMaxMs: 30_000,
      concurrency: 2,
      pull: { maxMessages: 30, expiresMs: 1000 },
      stallMs: 1000,
      watchdogMs: 250,
    },
    pino({ level: 'info' }, sink),
    createMetrics('worker'),
  );
  consumer.start();
  t.teardown(() => consumer.stop());
  const seen = await eventually(async () => consumer.problem(), 10_000, 'the saturation seen');
  t.match(seen, /^saturated: 2 messages delivered and not acked \(max_ack_pending 2\)/, `not ready: ${seen}`);
  t.ok(lines.some((l) => l.level === 50 && /consumer saturated/.test(l.msg ?? '')), 'an error line in the log');
  // A look of the watchdog after the worker has waited longer than the stall timeout, with
  // messages pending: still not a stall (a new pull would not help).
  const after = Date.now() + 1500;
  await eventually(async () => (consumer.consumerState?.at ?? 0) > after, 10_000, 'a watchdog look past the stall timeout');
  t.equal(consumer.stalledSince, null, 'not reported as a stall');
  t.match(consumer.problem(), /^saturated/, 'still saturated');
  for (const m of held) m.ack();
  await eventually(async () => (await chRows(w.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine LIKE 'sat-next-%'`)).length === 2, 20_000, 'the rest delivered and applied');
  await eventually(async () => consumer.problem() === null, 10_000, 'ready again');
  t.notOk(lines.some((l) => /consumer stalled/.test(l.msg ?? '')), 'no stall was logged');
});
