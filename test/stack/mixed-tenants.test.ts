// Two customers at once. Customer A sends boundary and invalid reports while customer B sends
// valid ones; then reports that storage refuses (as a gateway of another version, or a publisher
// bypassing the gateway, could queue them) share queue messages with B's. Before: 89–93 of B's
// 100 acknowledged reports were dead-lettered with A's, and B's rejection log quoted A's ids.
//   - 100 % of B's acknowledged reports are applied, at once;
//   - none of A's acknowledged reports is lost (a broken clock is kept, flagged);
//   - each report storage refuses is dead-lettered alone, with a reason naming the class and field;
//   - no rejection row a customer can read holds the other customer's identifiers or server text.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, post, get, eventually, chRows } from '../helpers/stack.js';
import { subjects, encodeReport, encodeBatch, decodeBatch, deadLetterStream, toReport } from '../../lib/contract/messages.js';
import { watchDeliveries, gone } from '../helpers/deliveries.js';

const s = await testStack(t, 'tenants');
const A = { customer: s.customer, token: s.token };
const B = await s.newCustomer('tenant-b');
await s.pool.query(`UPDATE licences SET device_limit = 100000`);
const ownerA = await s.newUser('owner');
const ownerB = await s.newUser('owner', { customer: B.customer });
const tag = s.id;
const aMachine = (i: number) => `a-secret-${tag}-${i}`;
const count = async (sql: string) => Number((await chRows<{ n: string }>(s.ch, sql))[0]!.n);
const url = (slug: string, machine: string, kind: string) => `${s.gatewayUrl}/api/ingest/${slug}/${machine}/agent/${kind}`;

// What A sends: values no column holds (refused), and broken clocks (kept, flagged).
const hostile = [
  '{"uptime_seconds":1e308}',
  '{"pid":10000000000000000000}',
  '{"group_priority":1e309}',
  '{"sort_priority":9007199254740993}',
  '{"version":"nul\\u0000"}',
  '{"group":"half \\ud800"}',
];
const skewed = ['1969-12-31T23:59:59Z', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59Z', '1970-01-01T00:00:00Z'];

t.test('A sends boundary and invalid reports while B sends 100 valid ones: B entirely applied, A refused with 422 or kept', async (t) => {
  const jobs: Promise<{ who: string; status: number; body: any; ts?: string }>[] = [];
  for (let i = 0; i < 100; i++) {
    jobs.push(post(url(B.customer.slug, `b-${i % 20}`, i % 3 === 0 ? 'status' : 'heartbeat'), B.token, i % 3 === 0 ? { status: 'running', message: `b-${i}` } : { version: `b-${i}` }).then((r) => ({ who: 'B', ...r })));
    if (i % 10 === 0) {
      const body = hostile[(i / 10) % hostile.length]!;
      jobs.push(post(url(A.customer.slug, aMachine(i), 'heartbeat'), A.token, body).then((r) => ({ who: 'A', ...r })));
      const ts = skewed[(i / 10) % skewed.length]!;
      jobs.push(post(url(A.customer.slug, aMachine(i), 'heartbeat'), A.token, { ts, version: `a-${i}` }).then((r) => ({ who: 'A-clock', ts, ...r })));
    }
  }
  const answers = await Promise.all(jobs);
  t.same(answers.filter((a) => a.who === 'B' && a.status !== 200).map((a) => a.status), [], 'every report of B answered 200');
  const refused = answers.filter((a) => a.who === 'A');
  t.same([...new Set(refused.map((a) => a.status))], [422], 'A: what no column holds is refused with 422');
  t.ok(refused.every((a) => Array.isArray(a.body.errors) && a.body.errors.length > 0), 'with the failing path');
  const clocks = answers.filter((a) => a.who === 'A-clock');
  t.same([...new Set(clocks.map((a) => a.status))], [200], 'A: a heartbeat from a broken clock is still accepted');

  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE customer_id = '${B.customer.id}'`)) === 66, 10_000, "B's heartbeats");
  await eventually(async () => (await count(`SELECT count() AS n FROM status_history FINAL WHERE customer_id = '${B.customer.id}'`)) === 34, 10_000, "B's status reports");
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE customer_id = '${A.customer.id}'`)) === clocks.length, 10_000, "A's acknowledged heartbeats");
  const rows = await chRows<{ agent_ts: string; clock_skew: number; ts_ms: string; received_ms: string }>(s.ch, `SELECT agent_ts, clock_skew, ts_ms, received_ms FROM heartbeats FINAL WHERE customer_id = '${A.customer.id}'`);
  // Non-empty first: the checks below hold for every row, and there must be rows to hold for.
  t.equal(rows.length, clocks.length, `${rows.length} heartbeats of A's broken clocks to check`);
  for (const r of rows) {
    t.equal(r.clock_skew, 1, `${r.agent_ts} flagged as clock skew`);
    t.equal(r.ts_ms, r.received_ms, 'its time is the receive time');
  }
  // A's machines with a broken clock: one per tenth report (the only ones of A acknowledged).
  const clockMachines = new Set(Array.from({ length: 100 }, (_, i) => i).filter((i) => i % 10 === 0).map(aMachine)).size;
  const inst = await s.pool.query(`SELECT clock_skew, agent_ts FROM instances WHERE customer_id = $1`, [A.customer.id]);
  t.equal(inst.rows.length, clockMachines, `Postgres: ${inst.rows.length} instances of A`);
  t.ok(inst.rows.every((r) => r.clock_skew === true && r.agent_ts === null), 'Postgres: flagged, no implausible agent time');
  const list = await get(`${s.apiUrl}/api/instances`, ownerA.jwt);
  t.equal(list.body.items.length, clockMachines, `the api lists A's ${clockMachines} instances`);
  t.ok(list.body.items.every((i: { clock_skew: boolean }) => i.clock_skew === true), 'the api shows the flag');
  t.ok(list.body.items.every((i: { light: string }) => i.light === 'green'), 'and the light is green: it runs on receive time');
});

t.test('reports storage refuses, in the same queue messages as B\'s: B applied at once, each bad report dead-lettered alone', async (t) => {
  const subj = subjects(s.env.SUBJECT_PREFIX!);
  const js = s.nc.jetstream();
  const rep = (c: { id: string; slug: string }, m: string, body: string, k = 'heartbeat') =>
    encodeReport({ id: randomUUID(), kind: k as 'heartbeat', customerId: c.id, customer: c.slug, machine: m, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() }, Buffer.from(body));
  const good = (i: number) => rep(B.customer, `bq-${i % 10}`, JSON.stringify({ version: `bq-${i}` }));
  const bad = [
    // Found by the worker's own check of the schema (a gateway of another version let it through).
    rep(A.customer, aMachine(1001), '{"uptime_seconds":1e308}'),
    rep(A.customer, aMachine(1002), '{"items":[{"code":1,"severity":1,"message":"nul\\u0000"}]}', 'diagnostics'),
    // Found only by storage: the customer does not exist (deleted after the report was queued).
    rep({ id: randomUUID(), slug: `gone-${tag}` }, aMachine(1003), '{}'),
  ];
  const jsm = await s.nc.jetstreamManager();
  const deliveries = await watchDeliveries(s.nc, s.env.STREAM_NAME!);
  t.teardown(() => deliveries.stop());
  // Three messages, each with A's bad reports among 40 of B's; published together, so one batch.
  const acks = await Promise.all([0, 1, 2].map((m) => js.publish(subj.reports, encodeBatch([...Array.from({ length: 20 }, (_, i) => good(m * 40 + i)), bad[m]!, ...Array.from({ length: 20 }, (_, i) => good(m * 40 + 20 + i))]))));
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'bq-%'`)) === 120, 30_000, "all of B's 120 reports applied");
  // "At once", by the delivery count rather than a clock: each message was applied, its bad report
  // dead-lettered and the message acked at its first delivery (acked: gone from the work queue, so
  // never delivered again); nothing of it waited for a retry, nor holds the traffic light back.
  for (const a of acks) await eventually(() => gone(jsm, s.env.STREAM_NAME!, a.seq), 30_000, `message ${a.seq} acked`);
  t.same(acks.map((a) => deliveries.of(a.seq).map((d) => d.count)), [[1], [1], [1]], "B's reports applied at their first delivery (not held for retries)");
  t.same(await deliveries.missed(), [], 'every delivery seen');
  await eventually(async () => {
    const info = await jsm.consumers.info(s.env.STREAM_NAME!, 'workers');
    return info.num_pending + info.num_ack_pending === 0;
  }, 30_000, 'the stream drained');
  const dlq = await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!));
  t.equal(dlq.state.messages, 3, 'three dead letters');
  const ids = new Set<string>();
  for (let seq = dlq.state.first_seq; seq <= dlq.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(deadLetterStream(s.env.STREAM_NAME!), { seq });
    const reports = decodeBatch(m.data).r.map(toReport);
    t.equal(reports.length, 1, 'each holds one report');
    t.notOk(reports.some((r) => r.customer === B.customer.slug), "none of B's");
    t.equal(m.header.get('Fleet-Error-Kind'), 'data');
    ids.add(reports[0]!.id);
  }
  t.equal(ids.size, 3);
  const rows = await chRows<{ customer_id: string; detail: string }>(s.ch, `SELECT customer_id, detail FROM ingest_rejections FINAL WHERE method = 'QUEUE' ORDER BY detail`);
  t.equal(rows.length, 3);
  const mine = rows.filter((r) => r.customer_id === A.customer.id).map((r) => r.detail).sort();
  t.match(mine[0], /^dead-lettered after 1 delivery: not storable: schema violation: \/items\/0\/message must match pattern/);
  t.match(mine[1], /^dead-lettered after 1 delivery: not storable: schema violation: \/uptime_seconds must be <= 9007199254740991$/);
  t.match(rows.find((r) => r.customer_id !== A.customer.id)!.detail, /^dead-lettered after 1 delivery: Postgres refused a value \(23503 foreign_key_violation\)$/);
});

t.test("no rejection row a customer can read holds the other customer's identifiers or a server's text", async (t) => {
  // B provokes rejections of its own too.
  t.equal((await post(url(B.customer.slug, 'b-bad', 'heartbeat'), B.token, '{"pid":-1}')).status, 422);
  await eventually(async () => (await get(`${s.apiUrl}/api/ingest-rejections`, ownerB.jwt)).body.items?.length >= 1, 10_000, "B's rejection row");
  const aIds = [A.customer.id, A.customer.slug, `a-secret-${tag}`, ...(await s.pool.query(`SELECT id FROM machines WHERE customer_id = $1 UNION ALL SELECT id FROM instances WHERE customer_id = $1`, [A.customer.id])).rows.map((r) => r.id)];
  const bIds = [B.customer.id, B.customer.slug, 'bq-', ...(await s.pool.query(`SELECT id FROM machines WHERE customer_id = $1 UNION ALL SELECT id FROM instances WHERE customer_id = $1`, [B.customer.id])).rows.map((r) => r.id)];
  const serverText = /DB::Exception|Code: \d+|violates|constraint|column|relation|heartbeats|instances|Cannot parse|TabSeparated/i;
  for (const [who, jwt, others] of [['B', ownerB.jwt, aIds], ['A', ownerA.jwt, bIds]] as const) {
    const r = await get(`${s.apiUrl}/api/ingest-rejections?limit=1000`, jwt);
    t.equal(r.status, 200);
    t.ok(r.body.items.length > 0, `${who} has rejection rows to read`);
    const text = JSON.stringify(r.body);
    for (const id of others) t.notOk(text.includes(id), `${who}'s rows do not mention ${id.slice(0, 40)}`);
    for (const row of r.body.items) t.notMatch(row.detail, serverText, `${who}: ${row.detail.slice(0, 80)}`);
  }
});
