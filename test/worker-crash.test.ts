// A worker killed (SIGKILL) in the middle of its work loses nothing and doubles nothing: what it
// had not acked is redelivered to the next worker, and every write is idempotent.
import t from 'tap';
import { testStack, post, eventually, chRows, drained } from './helpers/stack.js';

const s = await testStack(t, 'crash', {
  worker: false,
  api: false,
  env: { ACK_WAIT_S: '2', PUBLISH_MAX_REPORTS: '25', WORKER_BATCH_MESSAGES: '2' },
});

async function counts() {
  const [r] = await chRows<{ hb: string; hbu: string; dg: string; dgu: string; raw: string }>(
    s.ch,
    `SELECT (SELECT count() FROM heartbeats FINAL) AS hb, (SELECT uniqExact(report_id) FROM heartbeats) AS hbu,
            (SELECT count() FROM diagnostics FINAL) AS dg, (SELECT uniqExact((report_id, item)) FROM diagnostics) AS dgu,
            (SELECT count() FROM heartbeats) AS raw`,
  );
  return { hb: Number(r!.hb), hbu: Number(r!.hbu), dg: Number(r!.dg), dgu: Number(r!.dgu), raw: Number(r!.raw) };
}

t.test('kill -9 mid-stream, restart: every acknowledged report exactly once', async (t) => {
  const N = 3000;
  const url = (i: number, kind: string) => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/m${i % 100}/agent/${kind}`;
  let accepted = 0;
  for (let i = 0; i < N; i += 100) {
    const rs = await Promise.all(
      Array.from({ length: 100 }, (_, j) =>
        (i + j) % 3 === 0
          ? post(url(i + j, 'diagnostics'), s.token, { items: [{ code: i + j, severity: 0 }, { code: 1, severity: 2 }] })
          : post(url(i + j, 'heartbeat'), s.token, { version: String(i + j) }),
      ),
    );
    accepted += rs.filter((r) => r.status === 200 || r.status === 202).length; // 202: accepted, help texts missing
  }
  t.equal(accepted, N, 'all accepted while no worker runs');
  const diagReports = Math.ceil(N / 3);

  const w1 = await s.startWorker();
  await eventually(async () => (await counts()).hb > 0, 20_000, 'the first worker made progress');
  await w1.stop('SIGKILL');
  const mid = await counts();
  t.ok(mid.hb < N - diagReports, `killed part-way (${mid.hb} of ${N - diagReports} heartbeats written)`);

  await s.startWorker();
  const done = await eventually(async () => {
    const c = await counts();
    return c.hb >= N - diagReports && c.dg >= diagReports * 2 ? c : null;
  }, 60_000, 'everything written after the restart');
  // A message the killed worker had not acked stays in the stream until another worker applies and
  // acks it: once the stream is empty, nothing is left to be redelivered, and the counts are final.
  await drained(s, 60_000);
  const end = await counts();
  t.equal(end.hb, N - diagReports, 'heartbeats: exactly the accepted ones');
  t.equal(end.hbu, N - diagReports, 'no heartbeat report id twice');
  t.equal(end.dg, diagReports * 2, 'diagnostics items: exactly the accepted ones');
  t.equal(end.dgu, diagReports * 2, 'no diagnostic item twice');
  t.ok(done.raw >= end.hb, `raw rows before merges: ${done.raw} (copies collapse under FINAL)`);
  const inst = await s.pool.query(`SELECT count(*)::int AS n FROM instances`);
  t.equal(inst.rows[0].n, 100, 'one instance per machine');
  const info = await (await s.nc.jetstreamManager()).consumers.info(s.env.STREAM_NAME!, 'workers');
  t.equal(info.num_pending + info.num_ack_pending, 0, 'the stream is drained');
});
