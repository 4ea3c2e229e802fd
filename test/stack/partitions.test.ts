// Ingest partitions (lib/contract/messages.ts, docs/architecture.md "Partitions") on one NATS
// server: STREAM_PARTITIONS=3 makes three pairs of streams; a gateway queues each machine's reports
// (every kind, single and batch routes) in its partition, and nowhere else; workers apply every
// partition once; a worker consumes a partition that appears after it started (a gateway with a
// larger STREAM_PARTITIONS), and the unpartitioned streams left from before the change; the
// traffic light's horizon waits for a message of any partition; one partition full and another's
// streams gone cost the other partitions nothing. (Leaders on three servers and the kill of one:
// test/cluster/edge.test.ts.)
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, eventually, drained, chRows } from '../helpers/stack.js';
import { storedOnce } from '../helpers/stored-once.js';
import { post } from '../helpers/http.js';
import { encodeBatch, encodeReport, ingestPartition, ingestPartitions, partitionOf, subjects, type Report } from '../../lib/contract/messages.js';
import { DeadLetters, deadLetterOf } from '../../lib/store/dead-letters.js';
import { existingIngestStreams, ensureStreams } from '../../lib/infra/nats.js';
import { Horizon } from '../../workers/traffic-light.js';
import { createLogger } from '../../lib/infra/log.js';

const N = 3;
const s = await testStack(t, 'partitions', { worker: false, api: false, env: { STREAM_PARTITIONS: String(N) } });
const jsm = await s.nc.jetstreamManager();
const js = s.nc.jetstream();
const NAME = s.env.STREAM_NAME!;
const PREFIX = s.env.SUBJECT_PREFIX!;
const parts = ingestPartitions(NAME, PREFIX, N);
const messages = async (stream: string) => (await jsm.streams.info(stream)).state.messages;
const counts = async () => Promise.all(parts.map(async (p) => ({ reports: await messages(p.streams.reports), heartbeats: await messages(p.streams.heartbeats) })));

/** `n` machine slugs of partition `p`, named `<prefix>-<j>`. */
function machinesOf(prefix: string, p: number, n: number, partitions = N): string[] {
  const out: string[] = [];
  for (let j = 0; out.length < n; j++) if (partitionOf(s.customer.id, `${prefix}-${j}`, partitions) === p) out.push(`${prefix}-${j}`);
  return out;
}

t.test('three pairs of streams, each with its share of the size limits; no unpartitioned stream', async (t) => {
  for (const p of parts) {
    const main = await jsm.streams.info(p.streams.reports);
    const hb = await jsm.streams.info(p.streams.heartbeats);
    t.same(main.config.subjects, [p.subjects.reports, p.subjects.rejections], `${p.streams.reports}: its subjects`);
    t.same(hb.config.subjects, [p.subjects.heartbeats], `${p.streams.heartbeats}: its subject`);
    t.equal(main.config.max_bytes, Math.floor(Number(s.env.STREAM_MAX_BYTES) / N), 'a third of STREAM_MAX_BYTES');
    t.equal(hb.config.max_bytes, Math.floor(Number(s.env.STREAM_HEARTBEAT_MAX_BYTES) / N), 'a third of STREAM_HEARTBEAT_MAX_BYTES');
  }
  await t.rejects(jsm.streams.info(NAME), 'no stream under the unpartitioned name');
  t.same(await existingIngestStreams(jsm, NAME), parts.flatMap((p) => [p.streams.reports, p.streams.heartbeats]).sort());
});

t.test("a gateway queues each machine's reports in its partition, every kind and both routes, and nothing elsewhere", async (t) => {
  for (const p of parts) {
    const [m1, m2] = machinesOf(`route${p.partition}`, p.partition, 2);
    const before = await counts();
    t.equal((await s.report(m1!, 'heartbeat', { version: `p-${m1}` })).status, 200);
    t.equal((await s.report(m1!, 'status', { status: 'running', message: `p-${m1}` })).status, 200);
    t.equal((await s.report(m1!, 'diagnostics', { items: [{ code: 1, severity: 0, message: `p-${m1}` }] })).status, 202);
    t.equal((await s.report(m1!, 'metrics', { client_metric_id: randomUUID(), values: { cpu: 1 } }, { software: 'logcollector' })).status, 200);
    const batch = await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, s.token, {
      entries: [
        { machine: m2, software: 'agent', kind: 'heartbeat', body: { version: `p-${m2}` } },
        { machine: m2, software: 'agent', kind: 'status', body: { status: 'running', message: `p-${m2}` } },
      ],
    });
    t.equal(batch.status, 200, 'the batch');
    t.equal(batch.body.accepted, 2);
    const after = await counts();
    for (const q of parts) {
      const d = { reports: after[q.partition]!.reports - before[q.partition]!.reports, heartbeats: after[q.partition]!.heartbeats - before[q.partition]!.heartbeats };
      if (q.partition === p.partition) {
        t.equal(d.heartbeats, 2, `partition ${p.partition}: both heartbeats in its lane`);
        t.equal(d.reports, 4, `partition ${p.partition}: status, diagnostics, metrics and the batch's status in its main stream`);
      } else t.same(d, { reports: 0, heartbeats: 0 }, `partition ${q.partition}: nothing of partition ${p.partition}'s machines`);
    }
  }
  // A refusal is logged in one partition (by its customer and source address).
  const before = (await counts()).reduce((n, c) => n + c.reports, 0);
  t.equal((await s.report('route-bad', 'heartbeat', { uptime_seconds: 'not a number' })).status, 422);
  await eventually(async () => (await counts()).reduce((n, c) => n + c.reports, 0) === before + 1, 10_000, 'the rejection record queued once');
});

t.test('a worker applies every partition, each report once', async (t) => {
  await s.startWorker();
  await drained(s, 60_000);
  const versions = parts.flatMap((p) => machinesOf(`route${p.partition}`, p.partition, 2).map((m) => `p-${m}`));
  const hb = await storedOnce(s.ch, 'heartbeats', 'version', versions);
  t.same(hb.missing, [], 'every heartbeat stored');
  t.same(hb.doubled, [], 'none twice');
  const status = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM status_history FINAL WHERE message LIKE 'p-route%'`);
  t.equal(Number(status[0]!.n), 6, 'every status report stored once');
  const [rej] = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM ingest_rejections FINAL WHERE path LIKE '%/route-bad/%'`);
  t.equal(Number(rej!.n), 1, 'the rejection record stored once');
  // One instance's reports keep their order in its partition: the newest heartbeat wins.
  const [m] = machinesOf('order', 1, 1);
  for (let i = 0; i < 30; i++) t.equal((await s.report(m!, 'heartbeat', { version: `order-${i}` })).status, 200);
  await drained(s, 60_000);
  const row = await s.pool.query(`SELECT version FROM instances WHERE customer_id = $1 AND machine = $2`, [s.customer.id, m]);
  t.equal(row.rows[0]?.version, 'order-29', 'the last heartbeat sent is the one Postgres holds');
});

t.test('a partition made after the worker started (a gateway with a larger STREAM_PARTITIONS) is consumed', async (t) => {
  const g4 = await s.startGateway({ STREAM_PARTITIONS: '4' });
  const fourth = ingestPartition(NAME, PREFIX, 3, 4);
  await eventually(async () => (await jsm.streams.info(fourth.streams.heartbeats).catch(() => null)) !== null, 10_000, 'the fourth partition made by that gateway');
  const [m] = machinesOf('late', 3, 1, 4);
  const r = await post(s.ingestUrl(m!, 'heartbeat', { gateway: g4.url }), s.token, { version: 'late-partition' });
  t.equal(r.status, 200, 'accepted into the fourth partition');
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['late-partition'])).missing.length === 0, 30_000, 'applied by the running worker');
  await eventually(async () => (await messages(fourth.streams.heartbeats)) === 0, 10_000, 'and acked');
  await g4.proc.stop();
});

t.test('the unpartitioned streams left from before a change of STREAM_PARTITIONS are drained by the workers', async () => {
  // A stack that ran with one partition, and a report still queued there.
  await ensureStreams(jsm, { streamName: NAME, subjectPrefix: PREFIX, streamMaxBytes: 64 * 1024 * 1024, streamReplicas: 1, streamPartitions: 1 });
  const old = subjects(PREFIX);
  const report = encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine: 'before-change', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from('{"version":"before-change"}'));
  await js.publish(old.heartbeats, encodeBatch([report]));
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['before-change'])).missing.length === 0, 30_000, 'applied from the old stream');
  await eventually(async () => (await messages(`${NAME}_HB`)) === 0, 10_000, 'and acked');
});

t.test('old streams deleted once drained: the worker stops their consumers, and the light goes on judging', async (t) => {
  const worker = s.procs.filter((p) => p.name === 'worker').at(-1)!;
  const from = worker.lines.length;
  await jsm.streams.delete(NAME);
  await jsm.streams.delete(`${NAME}_HB`);
  for (const name of [NAME, `${NAME}_HB`]) await worker.waitFor((l) => l.msg === 'an ingest stream was deleted: its consumer stops' && l.stream === name, 15_000);
  t.pass('both consumers stopped');
  const [m] = machinesOf('after-delete', 0, 1);
  t.equal((await s.report(m!, 'heartbeat', { version: 'after-delete' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['after-delete'])).missing.length === 0, 30_000, 'applied');
  // The horizon (every ingest stream's oldest message) forgets the deleted ones instead of failing on them.
  await new Promise((r) => setTimeout(r, 1000));
  const stuck = worker.lines.slice(from).filter((l) => String(l.msg).startsWith('stream state unknown (NATS): the traffic light keeps its last horizon'));
  t.equal(stuck.length, 0, 'the horizon never stuck on a deleted stream');
});

t.test("a replayed dead letter goes back into its machine's partition", async (t) => {
  await Promise.all(s.procs.filter((p) => p.name === 'worker').map((p) => p.stop()));
  const [m] = machinesOf('replayed', 2, 1);
  const report: Report = { id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine: m!, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now(), body: null };
  const dl = deadLetterOf({
    base: subjects(PREFIX).deadLetter,
    failure: { kind: 'data', reason: 'a refusal, since fixed' },
    failureClass: 'data',
    source: { stream: parts[2]!.streams.heartbeats, seq: 1, subject: parts[2]!.subjects.heartbeats, deliveries: 1 },
    report,
  });
  const ack = await js.publish(dl.subject, encodeBatch([encodeReport(report, Buffer.from('{"version":"replayed-p2"}'))]), { headers: dl.headers, msgID: dl.msgID });
  const before = await counts();
  const replay = await new DeadLetters(s.nc, { streamName: NAME, subjectPrefix: PREFIX, streamPartitions: N }).replay({ seqs: [ack.seq] });
  t.equal(replay.summary.replayed, 1, replay.items[0]?.detail);
  t.match(replay.items[0]?.detail, parts[2]!.subjects.reports, "republished to partition 2's subject");
  const after = await counts();
  t.same(after.map((c, i) => c.reports - before[i]!.reports), [0, 0, 1], 'into partition 2 (its main stream), nowhere else');
  await s.startWorker();
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['replayed-p2'])).missing.length === 0, 30_000, 'applied');
});

t.test("the traffic light's horizon waits for the oldest message of any partition", async (t) => {
  await Promise.all(s.procs.filter((p) => p.name === 'worker').map((p) => p.stop()));
  const horizon = new Horizon(jsm, await existingIngestStreams(jsm, NAME), createLogger('test', 'silent'));
  const at = Date.now();
  const [m] = machinesOf('horizon', 2, 1);
  const report = encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine: m!, software: 'agent', tokenId: randomUUID(), receivedAt: at }, Buffer.from('{}'));
  await js.publish(parts[2]!.subjects.heartbeats, encodeBatch([report]));
  await new Promise((r) => setTimeout(r, 400));
  const h = await horizon.get();
  t.ok(h <= at, `the horizon (${h}) stays at the message queued in partition 2 (${at}), ${Date.now() - h} ms behind the clock`);
  await s.startWorker();
  await drained(s, 30_000);
  await new Promise((r) => setTimeout(r, Horizon.CACHE_MS + 10));
  t.ok((await horizon.get()) > at, 'and moves on once it is applied');
});

t.test('WORKER_PARTITIONS: a worker of partition 1 applies its reports and leaves partition 0 to others', async (t) => {
  await Promise.all(s.procs.filter((p) => p.name === 'worker').map((p) => p.stop()));
  await s.startWorker({ WORKER_PARTITIONS: '1' });
  const [m0] = machinesOf('subset', 0, 1);
  const [m1] = machinesOf('subset', 1, 1);
  t.equal((await s.report(m0!, 'heartbeat', { version: 'subset-p0' })).status, 200);
  t.equal((await s.report(m1!, 'heartbeat', { version: 'subset-p1' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['subset-p1'])).missing.length === 0, 30_000, "partition 1's heartbeat applied");
  await new Promise((r) => setTimeout(r, 1000));
  t.equal(await messages(parts[0]!.streams.heartbeats), 1, "partition 0's heartbeat waits in its stream: no worker of this one pulls it");
  t.same((await storedOnce(s.ch, 'heartbeats', 'version', ['subset-p0'])).missing, ['subset-p0'], 'not applied');
  await s.startWorker();
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['subset-p0'])).missing.length === 0, 30_000, 'applied by a worker of every partition');
  await drained(s, 30_000);
});

t.test("one partition full, another's streams gone: only their machines are refused (503), the other partitions take reports; everything acknowledged is stored once", async (t) => {
  // 20,000 bytes per partition's heartbeat lane: a few dozen large heartbeats fill one.
  const f = await testStack(t, 'partfull', { worker: false, api: false, env: { STREAM_PARTITIONS: String(N), STREAM_HEARTBEAT_MAX_BYTES: String(N * 20_000), QUEUE_SHARE_FROM_PERCENT: '100' } });
  const fjsm = await f.nc.jetstreamManager();
  const fparts = ingestPartitions(f.env.STREAM_NAME!, f.env.SUBJECT_PREFIX!, N);
  const of = (prefix: string, p: number, n: number) => {
    const out: string[] = [];
    for (let j = 0; out.length < n; j++) if (partitionOf(f.customer.id, `${prefix}-${j}`, N) === p) out.push(`${prefix}-${j}`);
    return out;
  };
  const full = of('full', 0, 5);
  const fine = of('fine', 1, 3);
  const gone = of('gone', 2, 2);
  const acked: string[] = [];
  let refused: Awaited<ReturnType<typeof f.report>> | null = null;
  for (let i = 0; i < 400 && !refused; i++) {
    const version = `pf-${i}-`.padEnd(200, 'x');
    const r = await f.report(full[i % full.length]!, 'heartbeat', { version });
    if (r.status === 200) acked.push(version);
    else refused = r;
  }
  t.ok(refused, `partition 0's lane full after ${acked.length} heartbeats`);
  t.equal(refused!.status, 503);
  t.match(refused!.body.detail, /queue full/);
  t.ok(Number(refused!.headers.get('retry-after')) > 0, 'with Retry-After');
  t.ok(acked.length > 10, `${acked.length} accepted before it filled up`);
  t.equal((await f.report(full[0]!, 'status', { status: 'running', message: 'pf-full-status' })).status, 200, "partition 0's main stream is not full: its status report taken");

  // Partition 2's streams removed (an operator's mistake, a lost volume): nothing answers there.
  for (const name of Object.values(fparts[2]!.streams)) await fjsm.streams.delete(name);
  const goneHb = await f.report(gone[0]!, 'heartbeat', { version: 'pf-gone' });
  t.equal(goneHb.status, 503, "partition 2's machines: 503");
  t.match(goneHb.body.detail, /queue unavailable/);

  // The other partitions answer on, each of their reports taken.
  for (const m of fine) {
    t.equal((await f.report(m, 'heartbeat', { version: `pf-fine-${m}` })).status, 200, `${m} (partition 1): heartbeat taken`);
    t.equal((await f.report(m, 'status', { status: 'running', message: `pf-fine-${m}` })).status, 200, `${m}: status taken`);
  }
  // One batch across the three: an answer per entry, 200 only for what was queued.
  const b = await post(`${f.gatewayUrl}/api/ingest/${f.customer.slug}/batch`, f.token, {
    entries: [
      { machine: full[1], software: 'agent', kind: 'heartbeat', body: { version: 'pf-batch-full'.padEnd(200, 'x') } },
      { machine: fine[0], software: 'agent', kind: 'heartbeat', body: { version: 'pf-batch-fine' } },
      { machine: gone[1], software: 'agent', kind: 'heartbeat', body: { version: 'pf-batch-gone' } },
    ],
  });
  t.equal(b.status, 200, 'the batch');
  t.same(
    b.body.results.map((r: { status: number }) => r.status),
    [503, 200, 503],
    'partition 1 taken; the full partition and the gone one refused',
  );
  t.equal(b.body.accepted, 1);

  // A worker applies what was taken; partition 0 takes heartbeats again once drained; a gateway
  // started again makes partition 2's streams anew.
  await f.startWorker();
  const versions = [...acked, ...fine.map((m) => `pf-fine-${m}`), 'pf-batch-fine'];
  await eventually(async () => (await storedOnce(f.ch, 'heartbeats', 'version', versions)).missing.length === 0, 60_000, 'every accepted heartbeat stored');
  const hb = await storedOnce(f.ch, 'heartbeats', 'version', [...versions, 'pf-gone', 'pf-batch-gone', 'pf-batch-full'.padEnd(200, 'x')]);
  t.same(hb.missing, ['pf-gone', 'pf-batch-gone', 'pf-batch-full'.padEnd(200, 'x')], 'the refused ones, and only they, are not stored');
  t.same(hb.split, [], 'none as two reports');
  const statuses = ['pf-full-status', ...fine.map((m) => `pf-fine-${m}`)];
  const st = await eventually(async () => {
    const r = await storedOnce(f.ch, 'status_history', 'message', statuses);
    return r.missing.length === 0 && r;
  }, 30_000, 'every status report stored');
  t.same(st.split, [], 'status reports: none as two');
  await eventually(async () => (await f.report(full[0]!, 'heartbeat', { version: 'pf-after' })).status === 200, 30_000, 'partition 0 takes heartbeats again once drained');
  const g2 = await f.startGateway();
  t.ok(await fjsm.streams.info(fparts[2]!.streams.heartbeats), "a gateway's start made partition 2's streams again");
  t.equal((await post(f.ingestUrl(gone[0]!, 'heartbeat', { gateway: g2.url }), f.token, { version: 'pf-gone-again' })).status, 200, "partition 2's machines taken again");
  await eventually(async () => (await storedOnce(f.ch, 'heartbeats', 'version', ['pf-after', 'pf-gone-again'])).missing.length === 0, 30_000, 'and applied');
});
