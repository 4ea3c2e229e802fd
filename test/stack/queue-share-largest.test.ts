// The queue share (gateway/queue-share.ts) at the largest bodies: customer A fills a small main
// stream (12 MiB) with diagnostics of just under BODY_LIMIT_BYTES (1 MiB each), alone and as
// batches of three such entries, while the workers are stopped. A is refused (429, "queue
// share", never the 503 of a full stream) once the stream is past half full, single requests and
// batch entries alike, with the entries before the refusal in the same batch accepted; customer
// B's small diagnostics are taken all along. Once a worker runs, every acknowledged report is
// stored once and nothing refused is stored. (The per-customer byte rate is lifted, so that the
// share, not the rate, is what refuses.)
import t from 'tap';
import { testStack, post, eventually } from '../helpers/stack.js';
import { storedOnce } from '../helpers/stored-once.js';

const STREAM_MAX_BYTES = 12 * 1024 * 1024;
const BODY_LIMIT = 1024 * 1024;
const s = await testStack(t, 'qsharebig', {
  worker: false,
  api: false,
  env: { STREAM_MAX_BYTES: String(STREAM_MAX_BYTES), QUOTA_INGEST_BYTES_PER_S: String(64 * 1024 * 1024), BODY_LIMIT_BYTES: String(BODY_LIMIT) },
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A diagnostics body of just under BODY_LIMIT bytes: its first item's message is the marker, the rest 8,192-character fillers. */
function largest(marker: string): { items: { code: number; severity: number; message: string }[] } {
  const items = [{ code: 4100, severity: 1, message: marker }];
  const filler = (i: number) => ({ code: 4101 + i, severity: 0, message: `${marker}/${i}/`.padEnd(8192, 'z') });
  // `{"items":[` + the items joined by commas + `]}`, counted as it grows (ASCII: a character is a byte).
  let size = '{"items":[]}'.length + JSON.stringify(items[0]).length;
  for (let i = 0; ; i++) {
    const next = filler(i);
    const more = 1 + JSON.stringify(next).length;
    if (size + more > BODY_LIMIT) break;
    items.push(next);
    size += more;
  }
  return { items };
}

t.test('the largest bodies: A is refused its share at about half the stream, never with 503; B is taken; afterwards stored once', async (t) => {
  const b = await s.newCustomer('qsharebig-b');
  const body = largest('probe');
  const size = Buffer.byteLength(JSON.stringify(body));
  t.ok(size <= BODY_LIMIT && size > BODY_LIMIT - 8300, `a body of ${size} bytes, the limit ${BODY_LIMIT}`);

  const ackedA: string[] = [];
  const refusedA: string[] = [];
  const answersA = new Map<string, number>();
  const note = (status: number, detail?: string) => {
    const k = status === 429 && /^queue share/.test(detail ?? '') ? '429 queue share' : String(status);
    answersA.set(k, (answersA.get(k) ?? 0) + 1);
    return k;
  };
  let sharedRefusal = false;
  let batchMixed: string[] | null = null;
  for (let i = 0; i < 40 && !sharedRefusal; i++) {
    if (i % 2 === 0) {
      const marker = `qbig-a-${i}`;
      const r = await post(s.ingestUrl(`big-${i % 5}`, 'diagnostics'), s.token, largest(marker));
      const k = note(r.status, r.body?.detail);
      if (k === '200' || k === '202') ackedA.push(marker);
      else {
        refusedA.push(marker);
        sharedRefusal ||= k === '429 queue share';
      }
    } else {
      // A batch of three entries, each just under BODY_LIMIT (3 MiB of the 4 MiB a batch may be).
      const markers = [0, 1, 2].map((j) => `qbig-a-${i}-${j}`);
      const r = await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, s.token, {
        entries: markers.map((m, j) => ({ machine: `big-${(i + j) % 5}`, software: 'agent', kind: 'diagnostics', body: largest(m) })),
      });
      if (r.status !== 200) {
        note(r.status, r.body?.detail);
        refusedA.push(...markers);
        sharedRefusal ||= r.status === 429 && /queue share/.test(r.body?.detail ?? '');
        continue;
      }
      const ks = (r.body.results as { status: number; detail?: string }[]).map((x) => note(x.status, x.detail));
      ks.forEach((k, j) => ((k === '200' || k === '202' ? ackedA : refusedA) as string[]).push(markers[j]!));
      if (ks.includes('429 queue share')) {
        sharedRefusal = true;
        if (ks.some((k) => k === '200' || k === '202')) batchMixed = ks;
      }
    }
    // The gateway reads the stream's fill once a second: let it see each step.
    await sleep(1100);
  }
  const summary = [...answersA].map(([k, n]) => `${k}×${n}`).join(', ');
  t.ok(sharedRefusal, `A refused its share after ${ackedA.length} reports of ~1 MiB (${summary})`);
  t.notOk(answersA.has('503'), 'never the 503 of a full stream');
  t.same([...answersA.keys()].filter((k) => !['200', '202', '429 queue share'].includes(k)), [], 'nothing but accepted or refused its share');
  if (batchMixed) t.comment(`a batch answered entry by entry: ${batchMixed.join(', ')}`);
  const info = await (await s.nc.jetstreamManager()).streams.info(s.env.STREAM_NAME!);
  // The fill is read once a second, so a sender of the largest bodies gets past half by what it
  // sends in between (a batch is 3 MiB here); it never reaches full.
  t.ok(info.state.bytes >= STREAM_MAX_BYTES * 0.45 && info.state.bytes < STREAM_MAX_BYTES, `refused past half the stream, before full (${info.state.bytes} of ${STREAM_MAX_BYTES} bytes)`);

  // B's small diagnostics, on the same stream, are taken: its share is small.
  const ackedB: string[] = [];
  const statusesB = new Set<number>();
  for (let i = 0; i < 20; i++) {
    const marker = `qbig-b-${i}`;
    const r = await post(s.ingestUrl(`calm-${i % 4}`, 'diagnostics', { customer: b.customer.slug }), b.token, { items: [{ code: 4100, severity: 1, message: marker }] });
    statusesB.add(r.status);
    if (r.status === 200 || r.status === 202) ackedB.push(marker);
  }
  t.same([...statusesB].filter((x) => x !== 200 && x !== 202), [], "every one of B's 20 reports taken while A is refused");
  const again = await post(s.ingestUrl('big-0', 'diagnostics'), s.token, largest('qbig-a-again'));
  t.equal(again.status, 429, 'A, at the largest body, still over its share');
  refusedA.push('qbig-a-again');

  // A worker drains the stream: what was taken is stored once, what was refused is not.
  await s.startWorker();
  await eventually(async () => (await storedOnce(s.ch, 'diagnostics', 'message', [...ackedA, ...ackedB])).missing.length === 0, 120_000, 'every acknowledged report stored');
  const stored = await storedOnce(s.ch, 'diagnostics', 'message', [...ackedA, ...ackedB, ...refusedA]);
  t.same(stored.missing, refusedA, 'the refused ones, and only they, are not stored');
  t.same(stored.split, [], 'none as two reports');
  t.same(stored.doubled, [], 'none twice (raw rows, one worker)');
});
