// What storage refuses goes to the dead-letter stream and the rejection log of its own customer,
// report by report: a data error at once, an unknown error after WORKER_MAX_DELIVER deliveries.
// Nothing else in its message or batch waits for it, and nothing behind it is blocked.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, post, eventually, chRows } from './helpers/stack.js';
import { subjects, deadLetterStream, encodeReport, encodeBatch } from '../lib/messages.js';

const s = await testStack(t, 'dlq', { api: false, env: { WORKER_MAX_DELIVER: '2' } });
const subj = subjects(s.env.SUBJECT_PREFIX!);
const js = s.nc.jetstream();

t.test('an undecodable message is dead-lettered at once; later reports flow', async (t) => {
  await js.publish(subj.reports, new TextEncoder().encode('this is not a batch'));
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/after/agent/heartbeat`, s.token, {})).status, 200);
  await eventually(async () => (await chRows(s.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine = 'after'`)).length === 1, 10_000, 'later report applied');
  const jsm = await s.nc.jetstreamManager();
  const info = await eventually(async () => {
    const i = await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!));
    return i.state.messages >= 1 ? i : null;
  });
  t.equal(info.state.messages, 1);
  const m = await jsm.streams.getMessage(deadLetterStream(s.env.STREAM_NAME!), { seq: info.state.first_seq });
  t.equal(new TextDecoder().decode(m.data), 'this is not a batch', 'kept byte for byte');
  t.match(m.header.get('Fleet-Error'), /cannot be decoded/);
  const rows = await eventually(async () => (await chRows<{ detail: string }>(s.ch, `SELECT detail FROM ingest_rejections FINAL WHERE method = 'QUEUE'`))[0]);
  t.match(rows.detail, /dead-lettered/);
});

t.test('a report the database refuses for its data is dead-lettered at once, and logged for its customer without the database text', async (t) => {
  // A customer id that does not exist: the instance upsert fails on the foreign key every time.
  const ghost = randomUUID();
  const report = encodeReport({ id: randomUUID(), k: 'heartbeat', c: ghost, cs: 'ghost', m: 'm', s: 'x', t: randomUUID(), at: Date.now() }, Buffer.from('{}'));
  await js.publish(subj.reports, encodeBatch([report]));
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/after2/agent/heartbeat`, s.token, {})).status, 200);
  await eventually(async () => (await chRows(s.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine = 'after2'`)).length === 1, 10_000, 'later report applied');
  const row = await eventually(
    async () => (await chRows<{ detail: string; path: string }>(s.ch, `SELECT detail, path FROM ingest_rejections FINAL WHERE customer_id = '${ghost}'`))[0],
    20_000,
    'dead letter logged',
  );
  t.match(row.detail, /^dead-lettered after 1 delivery: Postgres refused a value \(23503 foreign_key_violation\)$/);
  t.notMatch(row.detail, /violates|constraint|instances|machines|customer_id/, 'no server text, table or column names');
  t.equal(row.path, '/api/ingest/ghost/m/x/heartbeat');
  const info = await (await s.nc.jetstreamManager()).consumers.info(s.env.STREAM_NAME!, 'workers');
  t.equal(info.num_pending + info.num_ack_pending, 0, 'nothing stuck in the stream');
});

t.test('a report that fails for an unknown reason is retried WORKER_MAX_DELIVER times, then dead-lettered alone; its neighbours are applied at once', async (t) => {
  // An artifact report without its record: the worker's own code throws (a TypeError), which is
  // neither a server being down nor a value the server refused.
  const broken = encodeReport({ id: randomUUID(), k: 'artifact', c: s.customer.id, cs: s.customer.slug, m: 'nb', s: 'agent', t: randomUUID(), at: Date.now() }, Buffer.from('null'));
  const good = encodeReport({ id: randomUUID(), k: 'heartbeat', c: s.customer.id, cs: s.customer.slug, m: 'nb', s: 'agent', t: randomUUID(), at: Date.now() }, Buffer.from('{}'));
  const started = Date.now();
  await js.publish(subj.reports, encodeBatch([broken, good]));
  await eventually(async () => (await chRows(s.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine = 'nb'`)).length === 1, 5_000, 'the good neighbour applied');
  t.ok(Date.now() - started < 5_000, 'at the first delivery');
  const row = await eventually(
    async () => (await chRows<{ detail: string; path: string }>(s.ch, `SELECT detail, path FROM ingest_rejections FINAL WHERE path LIKE '%/nb/agent/artifact'`))[0],
    20_000,
    'dead letter logged',
  );
  t.match(row.detail, /^dead-lettered after 2 deliveries: internal error \(TypeError\)$/);
  const jsm = await s.nc.jetstreamManager();
  const dlq = await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!));
  const last = await jsm.streams.getMessage(deadLetterStream(s.env.STREAM_NAME!), { seq: dlq.state.last_seq });
  const kept = JSON.parse(new TextDecoder().decode(last.data));
  t.equal(kept.r.length, 1, 'the dead letter holds the failing report alone');
  t.equal(kept.r[0].k, 'artifact');
  t.equal(last.header.get('Fleet-Error-Kind'), 'unknown');
  await eventually(async () => {
    const info = await jsm.consumers.info(s.env.STREAM_NAME!, 'workers');
    return info.num_pending + info.num_ack_pending === 0;
  }, 10_000, 'nothing stuck in the stream');
  const hb = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'nb'`);
  t.equal(Number(hb[0]!.n), 1, 'the neighbour stored once, though its message was delivered twice');
});
