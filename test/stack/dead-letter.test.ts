// What goes to the dead-letter stream, and what waits. A report whose data storage proves at
// fault (a listed error code, or the worker's own check) goes to the dead-letter stream and the
// rejection log of its own customer, alone and at once; anything else waits, never dead-lettered.
// Dead-lettering never throws, whatever the report holds, and a dead-letter stream that refuses
// the publish makes the report wait too. Nothing else in its message or batch waits for it.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, post, eventually, chRows } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { storedOnce, stopMerges } from '../helpers/stored-once.js';
import { watchDeliveries, gone } from '../helpers/deliveries.js';
import { readyz, outageNamed, deadLetterCount, workerMetric } from '../helpers/outage.js';
import { subjects, deadLetterStream, encodeReport, encodeBatch, ingestStreams } from '../../lib/contract/messages.js';
import { ensureStreams } from '../../lib/infra/nats.js';

const s = await testStack(t, 'dlq', { worker: false, api: false, env: { WORKER_RETRY_MAX_MS: '1000' } });
await stopMerges(s.ch, `t_${s.id}`);
const port = await freePort();
const worker = await s.startWorker({ WORKER_HTTP_PORT: String(port) });
const workerUrl = `http://127.0.0.1:${port}`;
const subj = subjects(s.env.SUBJECT_PREFIX!);
const js = s.nc.jetstream();
const jsm = await s.nc.jetstreamManager();
const dlqName = deadLetterStream(s.env.STREAM_NAME!);
// Every delivery of the workers' consumer from here on, with its count (which delivery of its message).
// Both lanes: what tests publish themselves goes to the main stream, heartbeats through a gateway to their own.
const deliveries = await watchDeliveries(s.nc, ingestStreams(s.env.STREAM_NAME!));
t.teardown(() => deliveries.stop());

/** A report as a gateway queues it, for this stack's customer unless told. */
const queued = (machine: string, kind: string, body: string, o: { customerId?: string; customer?: string; commandId?: string; software?: string } = {}) => {
  const id = randomUUID();
  const bytes = encodeReport(
    { id, kind: kind as never, customerId: o.customerId ?? s.customer.id, customer: o.customer ?? s.customer.slug, machine, software: o.software ?? 'agent', tokenId: randomUUID(), receivedAt: Date.now(), commandId: o.commandId },
    Buffer.from(body),
  );
  return { id, bytes };
};
const drained = () =>
  eventually(async () => {
    const infos = await Promise.all(ingestStreams(s.env.STREAM_NAME!).map((n) => jsm.consumers.info(n, 'workers')));
    return infos.every((info) => info.num_pending + info.num_ack_pending === 0);
  }, 60_000, 'nothing left in either stream');
/** Acked: gone from the work-queue stream, so never delivered again. */
const acked = (seq: number) => eventually(() => gone(jsm, s.env.STREAM_NAME!, seq), 60_000, `message ${seq} acked`);
/**
 * The delivery counts of each message that holds a report of `machine` (1: its first delivery),
 * once every such message is acked; and the deliveries not seen (none: the counts are complete).
 */
async function deliveryCounts(machine: string): Promise<{ counts: number[][]; missed: string[] }> {
  const msgs = await eventually(async () => {
    const q = deliveries.messagesWith((_id, m) => m === machine);
    return q.length > 0 ? q : null;
  }, 10_000, `the message of ${machine} delivered`);
  for (const { stream, seq } of msgs) await eventually(() => gone(jsm, stream, seq), 60_000, `message ${seq} of ${stream} acked`);
  return { counts: msgs.map(({ stream, seq }) => deliveries.of(seq, stream).map((d) => d.count)), missed: await deliveries.missed() };
}

t.test('an undecodable message is dead-lettered at once; later reports flow', async (t) => {
  const before = await deadLetterCount(s);
  await js.publish(subj.reports, new TextEncoder().encode('this is not a batch'));
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/after/agent/heartbeat`, s.token, { version: 'after' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['after'])).missing.length === 0, 10_000, 'later report applied');
  const info = await eventually(async () => {
    const i = await jsm.streams.info(dlqName);
    return i.state.messages > before ? i : null;
  });
  t.equal(info.state.messages, before + 1);
  const m = await jsm.streams.getMessage(dlqName, { seq: info.state.last_seq });
  t.equal(new TextDecoder().decode(m.data), 'this is not a batch', 'kept byte for byte');
  t.match(m.header.get('Fleet-Error'), /cannot be decoded/);
  t.equal(m.header.get('Fleet-Deliveries'), '1', 'at its first delivery');
  const rows = await eventually(async () => (await chRows<{ detail: string }>(s.ch, `SELECT detail FROM ingest_rejections FINAL WHERE method = 'QUEUE' AND path = '${subj.reports}'`))[0]);
  t.match(rows.detail, /^dead-lettered after 1 deliver(y|ies): /);
  await drained();
  const after = await storedOnce(s.ch, 'heartbeats', 'version', ['after']);
  t.ok(after.once, `the later report stored once (${JSON.stringify(after)})`);
});

t.test('a report the database refuses for its data is dead-lettered at once, and logged for its customer without the database text', async (t) => {
  // A customer id that does not exist: the instance upsert fails on the foreign key every time.
  const ghost = randomUUID();
  const report = encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: ghost, customer: 'ghost', machine: 'm', software: 'x', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from('{}'));
  await js.publish(subj.reports, encodeBatch([report]));
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/after2/agent/heartbeat`, s.token, { version: 'after2' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['after2'])).missing.length === 0, 10_000, 'later report applied');
  const row = await eventually(
    async () => (await chRows<{ detail: string; path: string }>(s.ch, `SELECT detail, path FROM ingest_rejections FINAL WHERE customer_id = '${ghost}'`))[0],
    20_000,
    'dead letter logged',
  );
  t.match(row.detail, /^dead-lettered after 1 delivery: Postgres refused a value \(23503 foreign_key_violation\)$/);
  t.notMatch(row.detail, /violates|constraint|instances|machines|customer_id/, 'no server text, table or column names');
  t.equal(row.path, '/api/ingest/ghost/m/x/heartbeat');
  await drained();
  const after = await storedOnce(s.ch, 'heartbeats', 'version', ['after2']);
  t.ok(after.once, `the later report stored once (${JSON.stringify(after)})`);
});

t.test('a report that fails for a reason nothing names (a bug) waits like an outage: retried, never dead-lettered; its neighbours are applied at once', async (t) => {
  const before = await deadLetterCount(s);
  // An artifact report without its record: the worker's own code throws (a TypeError): neither a
  // code that proves the data at fault nor anything the worker's check finds.
  const broken = queued('nb', 'artifact', 'null');
  const good = queued('nb', 'heartbeat', '{"version":"nb-good"}');
  const ack = await js.publish(subj.reports, encodeBatch([broken.bytes]));
  const goodAck = await js.publish(subj.reports, encodeBatch([good.bytes]));
  t.equal((await s.report('nb-2', 'heartbeat', { version: 'nb-2' })).status, 200);
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['nb-good', 'nb-2'])).missing.length === 0, 10_000, 'the neighbours applied');
  const seen = await eventually(async () => {
    const r = await readyz(workerUrl);
    return r.status === 503 && outageNamed(r.detail, 'worker') ? r : null;
  }, 30_000, 'the worker not ready, naming what it waits for');
  t.match(seen.detail, /worker \(internal error \(TypeError\)\)/, seen.detail);
  // Far past the old limit of 5 deliveries.
  await eventually(async () => worker.lines.some((l) => / waits for worker/.test(l.msg ?? '') && l.report === broken.id && Number(l.deliveries) >= 7), 60_000, 'delivered 7 times');
  t.equal(await deadLetterCount(s), before, 'not dead-lettered');
  t.equal((await chRows(s.ch, `SELECT 1 FROM ingest_rejections WHERE path LIKE '%/nb/agent/artifact'`)).length, 0, 'not in the rejection log');
  const stored = await storedOnce(s.ch, 'heartbeats', 'version', ['nb-good', 'nb-2']);
  t.ok(stored.once, `the neighbours stored once (${JSON.stringify(stored)})`);
  // "At once": each neighbour's message was acked at its first delivery and never delivered again,
  // while the broken report's message came back again and again.
  await acked(goodAck.seq);
  t.same(deliveries.of(goodAck.seq).map((d) => d.count), [1], 'the neighbour published beside it: delivered once, acked');
  t.same(await deliveryCounts('nb-2'), { counts: [[1]], missed: [] }, 'the report through the gateway: one message, delivered once, acked');
  // An operator removes it (docs/operations.md, "Dead letters"): the worker is ready again.
  await jsm.streams.deleteMessage(s.env.STREAM_NAME!, ack.seq);
  await eventually(async () => (await readyz(workerUrl)).status === 200, 60_000, 'ready again');
  await drained();
});

t.test('a dead letter the dead-letter stream refuses waits (an outage of nats); its neighbours are stored once; it is dead-lettered once the stream takes it', async (t) => {
  await jsm.streams.delete(dlqName);
  const ghost = randomUUID();
  const bad = queued('dlqdown-bad', 'heartbeat', '{"version":"dlqdown-bad"}', { customerId: ghost, customer: 'ghost', software: 'x' });
  const neighbour = queued('dlqdown-1', 'heartbeat', '{"version":"dlqdown-1"}');
  await js.publish(subj.reports, encodeBatch([bad.bytes, neighbour.bytes]));
  t.equal((await s.report('dlqdown-2', 'heartbeat', { version: 'dlqdown-2' })).status, 200, 'acknowledged');
  const seen = await eventually(async () => {
    const r = await readyz(workerUrl);
    return r.status === 503 && outageNamed(r.detail, 'nats') ? r : null;
  }, 30_000, 'the worker not ready, naming nats');
  t.match(seen.detail, /nats \(the dead-letter stream refused the publish\)/, seen.detail);
  await eventually(async () => worker.lines.filter((l) => /dead-letter publish failed/.test(l.msg ?? '')).length >= 4, 60_000, 'retried again and again');
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', ['dlqdown-1', 'dlqdown-2'])).missing.length === 0, 10_000, 'the neighbours applied');

  await ensureStreams(jsm, { streamName: s.env.STREAM_NAME!, subjectPrefix: s.env.SUBJECT_PREFIX!, streamMaxBytes: 1024 ** 3, streamReplicas: 1 });
  const info = await eventually(async () => {
    const i = await jsm.streams.info(dlqName);
    return i.state.messages >= 1 ? i : null;
  }, 30_000, 'dead-lettered once the stream is back');
  await drained();
  t.equal((await jsm.streams.info(dlqName)).state.messages, 1, 'one dead letter');
  const m = await jsm.streams.getMessage(dlqName, { seq: info.state.first_seq });
  t.equal(m.header.get('Fleet-Report-Id'), bad.id);
  t.same(Buffer.from(m.data), encodeBatch([bad.bytes]), 'the report alone, its bytes as queued');
  t.equal(m.header.get('Fleet-Error'), 'Postgres refused a value (23503 foreign_key_violation)');
  const rows = await eventually(async () => chRows(s.ch, `SELECT detail FROM ingest_rejections WHERE customer_id = '${ghost}'`));
  t.equal(rows.length, 1, 'one rejection-log row');
  const stored = await storedOnce(s.ch, 'heartbeats', 'version', ['dlqdown-1', 'dlqdown-2']);
  t.ok(stored.once, `the neighbours stored once on raw rows, though one's message was delivered again and again (${JSON.stringify(stored)})`);
  t.same((await storedOnce(s.ch, 'heartbeats', 'version', ['dlqdown-bad'])).missing, ['dlqdown-bad'], 'the bad one not stored');
  await eventually(async () => (await readyz(workerUrl)).status === 200, 60_000, 'ready again');
});

t.test('a command ack whose output is nested 20,000 deep, queued past the gateway: dead-lettered alone with its own bytes, at once; its neighbours stored once', async (t) => {
  const before = await deadLetterCount(s);
  const output = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
  const deep = queued('deep-1', 'command_ack', `{"result":"success","output":${output}}`, { commandId: randomUUID() });
  const neighbour = queued('deep-1', 'heartbeat', '{"version":"deep-1"}');
  await js.publish(subj.reports, encodeBatch([neighbour.bytes, deep.bytes]));
  t.equal((await s.report('deep-2', 'heartbeat', { version: 'deep-2' })).status, 200, 'acknowledged');
  const info = await eventually(async () => {
    const i = await jsm.streams.info(dlqName);
    return i.state.messages > before ? i : null;
  }, 30_000, 'dead-lettered');
  await drained();
  t.equal((await jsm.streams.info(dlqName)).state.messages, before + 1, 'one dead letter');
  const m = await jsm.streams.getMessage(dlqName, { seq: info.state.last_seq });
  t.equal(m.header.get('Fleet-Report-Id'), deep.id);
  t.equal(m.header.get('Fleet-Deliveries'), '1', 'at its first delivery');
  t.same(Buffer.from(m.data), encodeBatch([deep.bytes]), 'its own bytes, never re-serialised');
  t.match(m.header.get('Fleet-Error'), /^not storable: output cannot be stored: \/output\/0\/0.*nested deeper than 1000 levels$/);
  const stored = await storedOnce(s.ch, 'heartbeats', 'version', ['deep-1', 'deep-2']);
  t.ok(stored.once, `the neighbours stored once (${JSON.stringify(stored)})`);
  const row = await eventually(async () => (await chRows<{ detail: string }>(s.ch, `SELECT detail FROM ingest_rejections WHERE path LIKE '%/deep-1/agent/command_ack'`))[0]);
  t.match(row.detail, /^dead-lettered after 1 delivery: not storable: output cannot be stored/);
  t.equal(await workerMetric(workerUrl, 'fleet_worker_outage'), 0, 'nothing waits for an outage');
});

// A worker holds a decoded report only as its readable copy (workers/ingest-consumer.ts `Unit`);
// one that is not an object at all (a publisher past the gateway) is dead-lettered by what it is.
t.test('reports that are not objects, queued past the gateway: each dead-lettered alone with its own bytes, at once; their neighbours stored once', async (t) => {
  const before = await deadLetterCount(s);
  const a = queued('notobj-1', 'heartbeat', '{"version":"notobj-1"}');
  const b = queued('notobj-1', 'heartbeat', '{"version":"notobj-2"}');
  const odd = [Buffer.from('42'), Buffer.from('null'), Buffer.from('["x"]')];
  await js.publish(subj.reports, encodeBatch([a.bytes, odd[0]!, odd[1]!, b.bytes, odd[2]!]));
  await eventually(async () => ((await jsm.streams.info(dlqName)).state.messages >= before + 3 ? true : null), 30_000, 'dead-lettered');
  await drained();
  const info = await jsm.streams.info(dlqName);
  t.equal(info.state.messages, before + 3, 'one dead letter each');
  const letters = [];
  for (let seq = info.state.last_seq - 2; seq <= info.state.last_seq; seq++) letters.push(await jsm.streams.getMessage(dlqName, { seq }));
  t.same(letters.map((m) => Buffer.from(m.data).toString()).sort(), odd.map((o) => encodeBatch([o]).toString()).sort(), 'each with its own bytes');
  for (const m of letters) t.match(m.header.get('Fleet-Error'), /a report must be an object/);
  const stored = await storedOnce(s.ch, 'heartbeats', 'version', ['notobj-1', 'notobj-2']);
  t.ok(stored.once, `the neighbours stored once (${JSON.stringify(stored)})`);
  t.equal(await workerMetric(workerUrl, 'fleet_worker_outage'), 0, 'nothing waits for an outage');
});
