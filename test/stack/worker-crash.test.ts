// A worker killed (SIGKILL) in the middle of its work loses nothing and stores nothing twice that
// was delivered once: what it had not acked is redelivered to the next worker, and every write is
// idempotent. Counted on raw rows with merges stopped (test/helpers/stored-once.ts), against what
// JetStream delivered (test/helpers/deliveries.ts): a report whose message was delivered once is
// exactly one raw row; a report whose message was delivered k times (the killed worker's unacked
// messages, or one whose ACK_WAIT_S ran out) is at most k raw rows of its one report id, the copies
// docs/architecture.md allows after a crash ("a retry taken over by another worker (or after a
// crash) may insert them again, and the copies collapse (FINAL)").
import t from 'tap';
import { testStack, post, eventually, chRows, drained } from '../helpers/stack.js';
import { stopMerges } from '../helpers/stored-once.js';
import { watchDeliveries } from '../helpers/deliveries.js';
import { ingestStreams } from '../../lib/contract/messages.js';

const s = await testStack(t, 'crash', {
  worker: false,
  api: false,
  env: { ACK_WAIT_S: '2', PUBLISH_MAX_REPORTS: '25', WORKER_BATCH_MESSAGES: '2' },
});
// Before anything is inserted: a copy stays a row of its own until counted.
await stopMerges(s.ch, `t_${s.id}`, ['heartbeats', 'diagnostics']);

async function counts() {
  const [r] = await chRows<{ hb: string; hbu: string; dg: string; dgu: string }>(
    s.ch,
    `SELECT (SELECT count() FROM heartbeats FINAL) AS hb, (SELECT uniqExact(report_id) FROM heartbeats) AS hbu,
            (SELECT count() FROM diagnostics FINAL) AS dg, (SELECT uniqExact((report_id, item)) FROM diagnostics) AS dgu`,
  );
  return { hb: Number(r!.hb), hbu: Number(r!.hbu), dg: Number(r!.dg), dgu: Number(r!.dgu) };
}

t.test('kill -9 mid-stream, restart: every acknowledged report stored; a second raw row only where its message was delivered again', async (t) => {
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
  // Both lanes: diagnostics in the main stream, heartbeats in their own (lib/contract/messages.ts).
  const deliveries = await watchDeliveries(s.nc, ingestStreams(s.env.STREAM_NAME!));
  t.teardown(() => deliveries.stop());

  const w1 = await s.startWorker();
  await eventually(async () => (await counts()).hb > 0, 20_000, 'the first worker made progress');
  await w1.stop('SIGKILL');
  const mid = await counts();
  t.ok(mid.hb < N - diagReports, `killed part-way (${mid.hb} of ${N - diagReports} heartbeats written)`);

  await s.startWorker();
  await eventually(async () => {
    const c = await counts();
    return c.hb >= N - diagReports && c.dg >= diagReports * 2 ? c : null;
  }, 60_000, 'everything written after the restart');
  // A message the killed worker had not acked stays in the stream until another worker applies and
  // acks it: once the stream is empty, nothing is left to be redelivered, and the counts are final.
  await drained(s, 60_000);
  const end = await counts();
  t.equal(end.hb, N - diagReports, 'heartbeats: exactly the accepted ones (FINAL)');
  t.equal(end.hbu, N - diagReports, 'heartbeats: as many report ids as accepted reports');
  t.equal(end.dg, diagReports * 2, 'diagnostics items: exactly the accepted ones (FINAL)');
  t.equal(end.dgu, diagReports * 2, 'diagnostics: as many (report id, item) as accepted items');

  // What JetStream delivered: every delivery seen, each report in one message.
  const missed = await eventually(async () => ((await deliveries.missed()).length === 0 ? [] : null), 10_000, 'every delivery seen').catch(async () => deliveries.missed());
  t.same(missed, [], 'the record of deliveries is complete');
  t.ok(deliveries.all.some((d) => d.stream === s.env.STREAM_NAME) && deliveries.all.some((d) => d.stream !== s.env.STREAM_NAME), 'deliveries from both lanes seen');
  const messagesOf = new Map<string, Set<string>>();
  for (const d of deliveries.all) for (const id of d.reports) messagesOf.set(id, (messagesOf.get(id) ?? new Set()).add(`${d.stream} ${d.seq}`));
  t.equal(messagesOf.size, N, 'every accepted report delivered');
  t.same([...messagesOf].filter(([, seqs]) => seqs.size > 1).map(([id]) => id), [], 'each report queued in one message');
  const delivered = deliveries.perReport();

  // Raw rows (no FINAL, merges stopped) per report, and per item of a diagnostics report.
  const raw = await chRows<{ id: string; n: string }>(
    s.ch,
    `SELECT report_id AS id, max(n) AS n FROM (
       SELECT report_id, count() AS n FROM heartbeats GROUP BY report_id
       UNION ALL SELECT report_id, count() AS n FROM diagnostics GROUP BY report_id, item
     ) GROUP BY report_id`,
  );
  const rows = new Map(raw.map((r) => [r.id, Number(r.n)]));
  const wrong: string[] = [];
  let copies = 0;
  for (const [id, k] of delivered) {
    const n = rows.get(id) ?? 0;
    copies += Math.max(0, n - 1);
    if (n === 0 || n > k) wrong.push(`${id}: ${n} raw rows, delivered ${k} times`);
  }
  const redelivered = new Set(deliveries.all.filter((d) => d.count > 1).map((d) => `${d.stream} ${d.seq}`)).size;
  t.comment(`${deliveries.all.length} deliveries of ${new Set(deliveries.all.map((d) => `${d.stream} ${d.seq}`)).size} messages, ${redelivered} delivered more than once; ${copies} raw copies`);
  t.same(wrong.slice(0, 20), [], 'no report has more raw rows than deliveries of its message (delivered once: one row)');
  t.equal(rows.size, N, 'raw rows of exactly the accepted reports');
  const inst = await s.pool.query(`SELECT count(*)::int AS n FROM instances`);
  t.equal(inst.rows[0].n, 100, 'one instance per machine');
});
