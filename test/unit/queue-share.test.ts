// Each customer's share of a stream that fills up (gateway/queue-share.ts), on its own: when a
// customer is refused, when it is not, and how the window forgets. The gateway under a real
// stream: test/stack/queue-share.test.ts.
import t from 'tap';
import { QueueShares, WINDOW_MS } from '../../gateway/queue-share.js';

const S = 'INGEST_HB';
const KB = 1024;

t.test('below QUEUE_SHARE_FROM_PERCENT nobody is refused, however large their share', async (t) => {
  const q = new QueueShares({ fromPercent: 50, sharePercent: 50 });
  q.record(S, 'a', 1000 * KB, 0);
  q.setFill(S, 0.49, 1_000_000 * KB);
  t.equal(q.refusal(S, 'a', 1), null);
  q.setFill(S, 0.5, 1_000_000 * KB);
  t.equal(q.refusal(S, 'a', 1)?.status, 429, 'at 50 % it is');
});

t.test('over its share: 429 with Retry-After and a detail that says why; the others go on', async (t) => {
  const refused: string[] = [];
  const q = new QueueShares({ fromPercent: 50, sharePercent: 50 }, (s) => refused.push(s));
  q.record(S, 'a', 900 * KB, 0);
  q.record(S, 'b', 100 * KB, 0);
  q.setFill(S, 0.8, 10_000 * KB);
  const r = q.refusal(S, 'a', 10);
  t.equal(r?.status, 429);
  t.equal(r?.retryAfterS, 5);
  t.match(r?.message, /queue share: .* 80 % full; this customer's reports are 90 % .* share of 50 %/);
  t.equal(q.refusal(S, 'b', 10), null, 'the smaller sender is taken');
  t.equal(q.refusal(S, 'c', 10), null, 'a customer not seen yet is taken');
  t.equal(q.refusal('OTHER', 'a', 10), null, 'another stream is judged by its own fill');
  t.same(refused, [S], 'counted per stream');
  // Two equal senders: neither is over half.
  const even = new QueueShares({ fromPercent: 50, sharePercent: 50 });
  even.record(S, 'a', 500 * KB, 0);
  even.record(S, 'b', 500 * KB, 0);
  even.setFill(S, 0.9, 10_000 * KB);
  t.equal(even.refusal(S, 'a', 1), null);
  t.equal(even.refusal(S, 'b', 1), null);
});

t.test('too few bytes in the window to tell: nobody is refused', async (t) => {
  const q = new QueueShares({ fromPercent: 50, sharePercent: 50 });
  q.record(S, 'a', 10 * KB, 0);
  q.setFill(S, 0.9, 100_000 * KB);
  t.equal(q.refusal(S, 'a', 1), null, '10 KiB of a large stream');
  q.setFill(S, 0.9, 100 * KB);
  t.equal(q.refusal(S, 'a', 1)?.status, 429, 'of a 100 KiB stream, 10 KiB is enough (a twentieth)');
});

t.test('the window forgets: the older half weighs less as it ages, and is gone after two windows', async (t) => {
  const q = new QueueShares({ fromPercent: 50, sharePercent: 50 });
  q.setFill(S, 0.9, 10_000 * KB);
  q.record(S, 'a', 900 * KB, 0);
  q.record(S, 'b', 100 * KB, 0);
  t.equal(q.refusal(S, 'a', 1)?.status, 429);
  // Half a window into the next: a's old bytes weigh half, b sends more meanwhile.
  q.record(S, 'b', 400 * KB, WINDOW_MS + WINDOW_MS / 2);
  const s = q.share(S, 'a', WINDOW_MS + WINDOW_MS / 2);
  t.ok(Math.abs(s.share - 450 / 900) < 0.01, `a: 450 of 900 weighted KiB (${s.share.toFixed(3)})`);
  t.equal(q.refusal(S, 'a', WINDOW_MS + WINDOW_MS / 2), null, 'no longer over half');
  t.same(q.share(S, 'a', 5 * WINDOW_MS), { share: 0, bytes: 0 }, 'two windows later nothing is left');
});

t.test('a refused customer is not counted, so its share falls while the others send; then it is let in again', async (t) => {
  const q = new QueueShares({ fromPercent: 50, sharePercent: 50 });
  q.setFill(S, 0.9, 10_000 * KB);
  q.record(S, 'a', 600 * KB, 0);
  q.record(S, 'b', 100 * KB, 0);
  let now = 1;
  let refusedA = 0;
  let takenA = 0;
  for (let i = 0; i < 200; i++, now += 10) {
    if (q.refusal(S, 'a', now)) refusedA++;
    else {
      takenA++;
      q.record(S, 'a', 10 * KB, now);
    }
    q.record(S, 'b', 10 * KB, now);
  }
  t.ok(refusedA > 0 && takenA > 0, `a refused ${refusedA} times and taken ${takenA} times`);
  const { share } = q.share(S, 'a', now);
  t.ok(share <= 0.52, `a ends near half of what was queued (${share.toFixed(3)})`);
});

t.test('QUEUE_SHARE_FROM_PERCENT=100 turns shares off', async (t) => {
  const q = new QueueShares({ fromPercent: 100, sharePercent: 50 });
  t.notOk(q.enabled);
  q.record(S, 'a', 1000 * KB, 0);
  q.setFill(S, 1, 1000 * KB);
  t.equal(q.refusal(S, 'a', 1), null);
});
