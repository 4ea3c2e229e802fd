// Batch ingest when JetStream refuses in the middle of a batch, deterministically: a small stream
// (STREAM_MAX_BYTES) and no worker draining it, one report per JetStream message
// (PUBLISH_MAX_REPORTS=1) published one after another (PUBLISH_MAX_INFLIGHT=1). The first entries of
// a batch fill the stream and are acknowledged; the stream then refuses the rest (full). Those
// acknowledged must be answered accepted and stored exactly once; the others answered 503 with
// retry_after, and not stored until they are sent again (same idempotency keys), after which every
// entry is stored once.
import t from 'tap';
import { testStack, post, eventually, chRows, drained } from '../helpers/stack.js';
import { idempotentReportId } from '../../lib/contract/ids.js';

const STREAM_MAX_BYTES = 96 * 1024;
const s = await testStack(t, 'batchmid', {
  api: false,
  worker: false,
  env: { STREAM_MAX_BYTES: String(STREAM_MAX_BYTES), PUBLISH_MAX_REPORTS: '1', PUBLISH_MAX_INFLIGHT: '1', QUEUE_SHARE_FROM_PERCENT: '100' },
});
const url = `${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`;
const N = 30;
// About 8.3 KB per report: the stream holds about 11 of them.
const entries = Array.from({ length: N }, (_, i) => ({
  machine: `mid-${i}`,
  software: 'agent',
  kind: 'status',
  body: { status: 'running', message: `${i}:`.padEnd(8000, 'm') },
  idempotency_key: `mid-${s.id}-${i}`,
}));
const idOf = (i: number) => idempotentReportId(s.customer.id, 'status', entries[i]!.machine, 'agent', entries[i]!.idempotency_key);
const storedIds = async () =>
  (await chRows<{ report_id: string }>(s.ch, `SELECT report_id FROM status_history FINAL WHERE machine LIKE 'mid-%' ORDER BY report_id`)).map((r) => r.report_id);

interface Result {
  status: number;
  id?: string;
  detail?: string;
  retry_after?: number;
}

t.test('the stream fills in the middle of a batch: acknowledged entries accepted and stored once, the rest 503 until sent again', async (t) => {
  const r = await post(url, s.token, { entries });
  t.equal(r.status, 200, 'a batch partly acknowledged is answered 200');
  const results = r.body.results as Result[];
  const statuses = results.map((x) => x.status);
  const k = statuses.indexOf(503);
  t.ok(k > 0 && k < N, `cut in the middle: ${k} of ${N} acknowledged before the stream was full`);
  t.same(statuses, [...Array(k).fill(200), ...Array(N - k).fill(503)], 'the acknowledged entries first (published in order), then only 503');
  t.equal(r.body.accepted, k);
  t.equal(r.body.rejected, N - k);
  t.ok(results.slice(k).every((x) => (x.retry_after ?? 0) >= 1 && !x.id && typeof x.detail === 'string'), 'each 503 with retry_after and a detail, no report id');
  t.ok(Number(r.headers.get('retry-after')) >= 1, 'Retry-After on the 200');
  t.same(
    results.slice(0, k).map((x) => x.id),
    Array.from({ length: k }, (_, i) => idOf(i)),
    'the accepted entries carry the ids of their keys',
  );

  // The stream is full and nothing drains it: a batch now has no entry acknowledged, 503 for the request.
  const whole = await post(url, s.token, { entries: entries.slice(k, k + 3) });
  t.equal(whole.status, 503, 'no entry acknowledged: 503 for the whole batch');
  t.ok(Number(whole.headers.get('retry-after')) >= 1, 'with Retry-After');
  t.match(whole.body.detail, /^no entry accepted: /);

  await s.startWorker();
  const acked = Array.from({ length: k }, (_, i) => idOf(i)).sort();
  await eventually(async () => (await storedIds()).length === k, 30_000, `the ${k} acknowledged entries stored`);
  // Give a stray copy (were one queued) the time to arrive: the worker drains what the stream holds.
  await drained(s, 30_000);
  t.same(await storedIds(), acked, 'exactly the acknowledged entries stored, none of the 503 ones');
  const [raw] = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM status_history WHERE machine LIKE 'mid-%'`);
  t.equal(Number(raw!.n), k, 'one row each, even before merges');

  // The client sends the 503 entries again, with their keys: stored once each.
  const again = await post(url, s.token, { entries: entries.slice(k) });
  t.equal(again.status, 200);
  const more = (again.body.results as Result[]).filter((x) => x.status === 200).length;
  t.ok(more >= 1, `${more} more accepted once the stream had room`);
  // Until all are in (the stream holds about 11 at a time; the worker drains it meanwhile).
  const ans: Result[] = [...results];
  (again.body.results as Result[]).forEach((x, i) => (ans[k + i] = x));
  await eventually(
    async () => {
      const todo = ans.map((x, i) => (x.status === 200 ? -1 : i)).filter((i) => i >= 0);
      if (todo.length === 0) return true;
      const a = await post(url, s.token, { entries: todo.map((i) => entries[i]) });
      if (a.status === 200) (a.body.results as Result[]).forEach((x, j) => (ans[todo[j]!] = x));
      return false;
    },
    60_000,
    'every entry accepted in the end',
  );
  t.same(
    ans.map((x) => x.id),
    entries.map((_, i) => idOf(i)),
    'every entry accepted, with the id of its key',
  );
  const all = entries.map((_, i) => idOf(i)).sort();
  await eventually(async () => (await storedIds()).length === N, 30_000, 'every entry stored');
  await drained(s, 30_000);
  // Some entries once more (as many as the stream holds): repeats of their keys.
  const repeat = await post(url, s.token, { entries: entries.slice(0, 5) });
  t.same(repeat.body.results?.map((x: Result) => [x.status, x.id]), ans.slice(0, 5).map((x) => [200, x.id]), 'a repeat: accepted with the same ids');
  await drained(s, 30_000);
  t.same(await storedIds(), all, `each of the ${N} entries stored exactly once`);
});
