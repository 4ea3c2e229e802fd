// Crashes under load with the default grouping (up to 512 reports per queue message): kill -9 of
// a worker, of nats-server and of Postgres while two customers report. Every request gets an
// answer (the gateway runs throughout: a broken connection is never an allowed outcome); every
// report answered 200 is stored, as one report (one report id per marker on raw rows, one row per
// marker under FINAL); no answer is a 500 (503 with Retry-After while NATS is away); the worker
// never exits because a server went away, says so in /readyz, and carries on. Copies of one report
// (raw rows of one report id) are allowed here: a message whose ack a killed worker or a killed
// nats-server lost is applied again, and ClickHouse collapses the copies (docs/architecture.md,
// "nothing acknowledged is lost or doubled"); worker-crash.test.ts proves that they come only from
// a message delivered again, counted on raw rows with merges stopped.
import t from 'tap';
import { testStack, post, eventually, chRows, consumed } from '../helpers/stack.js';
import { OwnNats, freePort } from '../helpers/nats-server.js';
import { OwnPostgres } from '../helpers/postgres-server.js';
import { storedOnce, stopMerges } from '../helpers/stored-once.js';

const nats = new OwnNats(await freePort());
const pgServer = new OwnPostgres(await freePort());
const workerPort = await freePort();
const destroyServers = async () => {
  await nats.destroy();
  await pgServer.destroy();
};
let s: Awaited<ReturnType<typeof testStack>>;
try {
  await nats.start();
  await pgServer.start();
  s = await testStack(t, 'crashes', { natsUrl: nats.url, pgUrl: pgServer.url(), api: false, worker: false, env: { ACK_WAIT_S: '5', WORKER_HTTP_PORT: String(workerPort) } });
} catch (e) {
  // Before the stack's teardown exists: the servers must not outlive (or keep alive) the test.
  await destroyServers();
  throw e;
}
// Runs after the stack's own teardown (tap runs teardowns in the order they were added).
t.teardown(destroyServers);
// Merges stopped before any ingest, so that the copies of one report the kills may leave are
// counted exactly (they are allowed; see above). One part per insert: about 90 per table in a run
// here, below ClickHouse's parts_to_delay_insert (150 per partition); the count is printed at the end.
await stopMerges(s.ch, `t_${s.id}`, ['heartbeats', 'diagnostics']);
const B = await s.newCustomer('crash-b');
await s.pool.query(`UPDATE licences SET device_limit = 100000`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readyz = async () => {
  try {
    const r = await fetch(`http://127.0.0.1:${workerPort}/readyz`, { signal: AbortSignal.timeout(2000) });
    return { status: r.status, body: await r.text() };
  } catch (e) {
    return { status: 0, body: String(e) };
  }
};

t.test('kill -9 of a worker, nats-server and Postgres during ingest: every acknowledged report stored exactly once', async (t) => {
  let worker = await s.startWorker();
  const customers = [
    { slug: s.customer.slug, token: s.token },
    { slug: B.customer.slug, token: B.token },
  ];
  const acked: { kind: 'heartbeat' | 'diagnostics'; marker: string }[] = [];
  const answers = new Map<string, number>();
  const note = (k: string) => answers.set(k, (answers.get(k) ?? 0) + 1);
  let running = true;
  let seq = 0;
  const client = async () => {
    while (running) {
      const n = seq++; // also the number of requests sent
      const c = customers[n % 2]!;
      const kind = n % 4 === 0 ? 'diagnostics' : 'heartbeat';
      const marker = `crash-${n}`;
      const body = kind === 'heartbeat' ? { version: marker } : { items: [{ code: n % 1000, severity: 0, message: marker }] };
      try {
        const r = await post(`${s.gatewayUrl}/api/ingest/${c.slug}/m${n % 10}/agent/${kind}`, c.token, body);
        note(String(r.status));
        if (r.status === 200 || r.status === 202) acked.push({ kind, marker });
        else if (r.status === 503 && !r.headers.get('retry-after')) note('503 without Retry-After');
      } catch {
        note('network');
      }
      await sleep(30);
    }
  };
  const load = Promise.all(Array.from({ length: 12 }, client));
  const stored = async (kind: string) => Number((await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM ${kind === 'heartbeat' ? 'heartbeats' : 'diagnostics'} FINAL`))[0]!.n);

  await eventually(async () => (await stored('heartbeat')) > 100, 20_000, 'ingest under way');
  // 1. A worker dies mid-batch; another takes over (what the first had not acked comes back after ACK_WAIT_S).
  await worker.stop('SIGKILL');
  worker = await s.startWorker();
  await sleep(2000);
  // 2. nats-server dies and comes back.
  await nats.kill9();
  await sleep(2000);
  await nats.start();
  await eventually(async () => (await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/probe/agent/heartbeat`, s.token, {})).status === 200, 30_000, 'ingest resumes after NATS is back');
  await sleep(2000);
  // 3. Postgres dies: the worker waits, says it is not ready, and goes on when it is back.
  pgServer.kill9();
  const down = await eventually(async () => {
    const r = await readyz();
    // Its probe (every WORKER_HEALTH_INTERVAL_MS) says so; an outage its messages wait for may be
    // named first ("outage: postgres (connection failed)"): waited past, not failed on.
    return r.status === 503 && /postgres: unreachable/.test(r.body) ? r : null;
  }, 30_000, 'the worker reports Postgres unreachable');
  t.match(down.body, /not ready: .*postgres: unreachable/);
  await sleep(2000);
  await pgServer.start();
  await eventually(async () => (await readyz()).status === 200, 30_000, 'ready again once Postgres is back');
  await sleep(2000);
  running = false;
  await load;
  t.comment(`answers: ${[...answers.entries()].map(([k, v]) => `${k}×${v}`).join(', ')}`);

  // Every request answered: `network` is a request that got no HTTP answer at all (a connection
  // refused or broken). Nothing here stops the gateway, so none may.
  t.notOk(answers.has('network'), 'every request got an HTTP answer (no broken connection)');
  t.equal([...answers].filter(([k]) => /^\d+$/.test(k)).reduce((a, [, v]) => a + v, 0), seq, `all ${seq} requests answered`);
  t.notOk(answers.has('500'), 'no 500');
  t.notOk(answers.has('503 without Retry-After'), 'every 503 has Retry-After');
  t.ok(acked.length > 500, `${acked.length} reports acknowledged`);
  t.ok(worker.running, 'the worker never exited because a server went away');
  t.equal(s.procs.filter((p) => p.name === 'worker' && !p.running).length, 1, 'only the worker killed on purpose is gone');

  const hb = acked.filter((a) => a.kind === 'heartbeat').map((a) => a.marker);
  const dg = acked.filter((a) => a.kind === 'diagnostics').map((a) => a.marker);
  // Raw rows (test/helpers/stored-once.ts): per marker, the rows and the report ids holding them.
  const counts = () => Promise.all([storedOnce(s.ch, 'heartbeats', 'version', hb, { like: 'crash-%' }), storedOnce(s.ch, 'diagnostics', 'message', dg, { like: 'crash-%' })]);
  const end = await eventually(async () => {
    const [h, d] = await counts();
    return h.missing.length === 0 && d.missing.length === 0 ? { h, d } : null;
  }, 90_000, 'every acknowledged report stored').catch(async (e) => {
    const [h, d] = await counts();
    t.fail(`${String(e)}: missing ${h.missing.length} heartbeats (${h.missing.slice(0, 5)}), ${d.missing.length} diagnostics`);
    return { h, d };
  });
  t.same(end.h.split, [], 'no acknowledged heartbeat stored as two reports (raw rows: one report id per marker)');
  t.same(end.d.split, [], 'no acknowledged diagnostic stored as two reports (raw rows: one report id per marker)');
  const parts = await chRows<{ t: string; n: string }>(s.ch, `SELECT table AS t, count() AS n FROM system.parts WHERE database = 't_${s.id}' AND active AND table IN ('heartbeats', 'diagnostics') GROUP BY t`);
  t.comment(`raw copies of one report (merges stopped): ${end.h.doubled.length} heartbeats, ${end.d.doubled.length} diagnostics; parts: ${parts.map((p) => `${p.t} ${p.n}`).join(', ')}`);
  // Under FINAL every copy of a report collapses into one row: a second row for a marker, answered
  // or not, would be a copy that does not (another receive time) or a second report.
  const final = async (table: string, col: string) =>
    (await chRows<{ m: string }>(s.ch, `SELECT ${col} AS m FROM ${table} FINAL WHERE ${col} LIKE 'crash-%' GROUP BY m HAVING count() > 1`)).map((r) => r.m);
  t.same(await final('heartbeats', 'version'), [], 'no heartbeat twice (FINAL)');
  t.same(await final('diagnostics', 'message'), [], 'no diagnostic twice (FINAL)');
  const inst = await s.pool.query(`SELECT count(*)::int AS n FROM instances WHERE software = 'agent' AND machine_id IN (SELECT id FROM machines WHERE slug LIKE 'm%')`);
  t.equal(inst.rows[0].n, 10, 'Postgres: one instance per machine (five per customer)');
  const jsm = await s.nc.jetstreamManager();
  await consumed(s, 30_000);
  const dlq = await jsm.streams.info(`${s.env.STREAM_NAME}_DLQ`);
  t.equal(dlq.state.messages, 0, 'nothing dead-lettered: a server that is down only delays');
});
