// A message that cannot be applied goes to the dead-letter stream and the rejection log after
// WORKER_MAX_DELIVER deliveries; it does not block the reports behind it.
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
  t.match(m.header.get('Fleet-Error'), /not JSON/);
  const rows = await eventually(async () => (await chRows<{ detail: string }>(s.ch, `SELECT detail FROM ingest_rejections FINAL WHERE method = 'QUEUE'`))[0]);
  t.match(rows.detail, /dead-lettered/);
});

t.test('a report the database refuses is retried, then dead-lettered, and logged for its customer', async (t) => {
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
  t.match(row.detail, /dead-lettered after 2 deliveries/);
  t.equal(row.path, '/api/ingest/ghost/m/x/heartbeat');
  const info = await (await s.nc.jetstreamManager()).consumers.info(s.env.STREAM_NAME!, 'workers');
  t.equal(info.num_pending + info.num_ack_pending, 0, 'nothing stuck in the stream');
});
