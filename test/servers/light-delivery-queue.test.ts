// The sink's delivery queue (workers/traffic-light.ts LightEventSink.queue): the expiry listener and
// the sweep hand each batch's changes to it and go on judging the next batch. Deliveries run one at
// a time, in the order queued; while ClickHouse does not answer (here a proxy in front of it holds
// every byte) the queue grows, and `queuedAtMost`, which the listener waits on before it records
// the next batch, holds a caller back until it shrinks; a delivery that fails leaves its changes in
// the outbox and does not stop the ones queued after it; nothing is stored or published twice.
import t from 'tap';
import net from 'node:net';
import { testStack, eventually, chRows } from '../helpers/stack.js';
import { stopMerges } from '../helpers/stored-once.js';
import { createClickHouse } from '../../lib/infra/clickhouse.js';
import { createLogger } from '../../lib/infra/log.js';
import { subjects } from '../../lib/contract/messages.js';
import type { LightMessage } from '../../lib/domain/traffic-light.js';
import { LightEventSink } from '../../workers/traffic-light.js';
import { outboxBatch } from '../helpers/lights.js';

const s = await testStack(t, 'deliveryq', { gateway: false, worker: false, api: false });
await stopMerges(s.ch, s.env.CLICKHOUSE_DB!, ['light_events']);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// A TCP proxy in front of ClickHouse: `hold` keeps every byte sent to it until `release`;
// `refuse` closes every connection at once.
const ch = new URL(s.env.CLICKHOUSE_URL!);
let mode: 'pass' | 'hold' | 'refuse' = 'pass';
const conns = new Set<{ up: net.Socket; held: Buffer[] }>();
const proxy = net.createServer((client) => {
  if (mode === 'refuse') return void client.destroy();
  const up = net.connect(Number(ch.port), ch.hostname);
  const c = { up, held: [] as Buffer[] };
  conns.add(c);
  client.on('data', (d) => (mode === 'hold' ? c.held.push(d) : up.write(d)));
  up.on('data', (d) => client.write(d));
  const end = () => {
    conns.delete(c);
    client.destroy();
    up.destroy();
  };
  client.on('close', end).on('error', end);
  up.on('close', end).on('error', end);
});
await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
const release = () => {
  mode = 'pass';
  for (const c of conns) for (const d of c.held.splice(0)) c.up.write(d);
};
const refuse = () => {
  mode = 'refuse';
  for (const c of conns) c.up.destroy();
};
const viaProxy = createClickHouse({ url: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`, database: s.env.CLICKHOUSE_DB, requestTimeoutMs: 20_000 });
t.teardown(async () => {
  await viaProxy.close();
  for (const c of conns) c.up.destroy();
  proxy.close();
});

const sink = new LightEventSink(s.pool, viaProxy, s.nc, s.env.SUBJECT_PREFIX!, null, createLogger('test', 'silent'));

// The live stream, in the order published.
const published: string[] = [];
const live = s.nc.subscribe(subjects(s.env.SUBJECT_PREFIX!).control(`light.${s.customer.id}`));
void (async () => {
  for await (const m of live) for (const e of (m.json() as LightMessage).events) published.push(e.machine);
})();
t.teardown(() => live.unsubscribe());

/** A batch of `n` changes (machines `<name>-0` …), each also in the outbox as a recording leaves it. */
const batch = (name: string, n: number) => outboxBatch(s.pool, s.customer, name, n);

const inOutbox = async (prefix: string) =>
  (await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM light_outbox_changes WHERE machine LIKE $1`, [`${prefix}-%`])).rows[0]!.n;

t.test('one delivery at a time, in order; a slow ClickHouse holds back a caller that asks for a short queue', async (t) => {
  const batches = [await batch('a', 5), await batch('b', 5), await batch('c', 5)];
  mode = 'hold';
  const done = batches.map((b) => sink.queue(b));
  await sleep(300);
  t.equal(sink.queued, 15, 'all three batches wait while ClickHouse holds the first insert');
  t.equal(conns.size, 1, 'one insert under way: the others have not started');
  t.same(published, [], 'nothing published before its row is in ClickHouse');
  let through = false;
  const waiter = sink.queuedAtMost(5).then(() => (through = true));
  await sleep(500);
  t.notOk(through, 'a caller that allows one batch waiting is held back');
  release();
  await waiter;
  t.ok(sink.queued <= 5, `through once at most one batch waits (${sink.queued})`);
  await Promise.all(done);
  t.equal(sink.queued, 0, 'nothing left queued');
  await eventually(async () => published.length === 15, 5000, 'all fifteen published');
  const expected = batches.flatMap((b) => b.events).map((e) => e.machine);
  t.same(published, expected, 'published in the order queued');
  const rows = await chRows<{ machine: string; n: number }>(s.ch, `SELECT machine, toUInt32(count()) AS n FROM light_events WHERE machine LIKE '_-%' GROUP BY machine`);
  t.equal(rows.length, 15, 'every change in ClickHouse');
  t.ok(rows.every((r) => Number(r.n) === 1), 'each once (raw rows, merges stopped)');
  t.equal((await inOutbox('a')) + (await inOutbox('b')) + (await inOutbox('c')), 0, 'out of the outbox once delivered');
});

t.test('a delivery that fails is left in the outbox; the ones queued after it still go', async (t) => {
  const failing = await batch('f', 3);
  const after = await batch('g', 3);
  published.length = 0;
  refuse();
  const first = sink.queue(failing);
  await first;
  t.equal(await inOutbox('f'), 3, 'the failed batch stays in the outbox (the sweep delivers it later)');
  release();
  await sink.queue(after);
  t.equal(sink.queued, 0);
  t.equal(await inOutbox('g'), 0, 'the batch queued after it is delivered');
  const rows = await chRows<{ machine: string }>(s.ch, `SELECT machine FROM light_events WHERE machine LIKE 'f-%' OR machine LIKE 'g-%' ORDER BY machine`);
  t.same(rows.map((r) => r.machine), after.events.map((e) => e.machine), 'only the second batch reached ClickHouse');
  await eventually(async () => published.length === 3, 5000, 'the second batch published');
  t.same(published, after.events.map((e) => e.machine));
});
