// The gateway's batch publisher (gateway/publisher.ts) against the real JetStream: every report
// is settled only after its group's PubAck, and while every publish slot is busy the open group
// keeps growing instead of being queued as many small groups (bench/README.md).
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { connectNats, ensureStreams } from '../../lib/infra/nats.js';
import { subjects, deadLetterStream, heartbeatStream } from '../../lib/contract/messages.js';
import { BatchPublisher } from '../../gateway/publisher.js';
import type { JetStreamClient } from 'nats';

const id = randomUUID().slice(0, 8);
const streamName = `TEST_PUB_${id}`;
const prefix = `test-pub-${id}`;
const nc = await connectNats(process.env.NATS_URL!, 'publisher-test');
const jsm = await nc.jetstreamManager();
await ensureStreams(jsm, { streamName, subjectPrefix: prefix, streamMaxBytes: 64 * 1024 * 1024, streamReplicas: 1 });
t.teardown(async () => {
  await jsm.streams.delete(streamName).catch(() => {});
  await jsm.streams.delete(deadLetterStream(streamName)).catch(() => {});
  await jsm.streams.delete(heartbeatStream(streamName)).catch(() => {});
  await nc.close();
});

const nextTurn = () => new Promise<void>((r) => setImmediate(r));

t.test('with one publish slot busy, reports of later turns join one open group', async (t) => {
  const groups: number[] = [];
  // The real JetStream behind a gate: the first publish waits until the test opens it, so the one
  // publish slot is certainly busy while the later reports arrive.
  const real = nc.jetstream();
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const js = { publish: async (...a: Parameters<JetStreamClient['publish']>) => (await gate, real.publish(...a)) } as JetStreamClient;
  const p = new BatchPublisher(
    nc,
    js,
    { subject: subjects(prefix).reports, streamName, timeoutMs: 5000, maxReports: 512, maxBytes: 512 * 1024, maxInflight: 1 },
    { published: (n) => groups.push(n), failed: () => t.fail('no publish may fail') },
  );
  p.connected = true;
  const settled: Promise<unknown>[] = [];
  const add = (i: number) =>
    settled.push(new Promise<void>((res, rej) => p.add(Buffer.from(JSON.stringify({ id: `r${i}` })), (e) => (e ? rej(e) : res()))));
  add(0);
  // 20 more turns of the event loop, 5 reports each: one group per turn would be 21 publishes.
  for (let turn = 0; turn < 20; turn++) {
    await nextTurn();
    for (let j = 0; j < 5; j++) add(1 + turn * 5 + j);
  }
  t.equal(groups.length, 0, 'nothing acknowledged while the first publish waits');
  open();
  await Promise.all(settled);
  await p.idle();
  t.same(groups, [1, 100], 'the first report alone, then the 100 of the 20 later turns in one group');
  const info = await jsm.streams.info(streamName);
  t.equal(info.state.messages, groups.length, 'one stream message per group');
  // The stored messages hold exactly the reports handed in.
  const ids: string[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(streamName, { seq });
    for (const r of (JSON.parse(Buffer.from(m.data).toString()) as { r: { id: string }[] }).r) ids.push(r.id);
  }
  t.same(ids, Array.from({ length: 101 }, (_, i) => `r${i}`), 'in the order they were handed in');
});
