// Property: an entry of a batch is answered exactly as it would be alone. Batches of entries with
// bodies generated from the TypeBox schemas (test/helpers/arbitraries.ts: at and past every
// boundary, hostile values included), machines and software from valid and invalid slugs; each
// batch is sent, then each of its entries alone through its single route with the same
// Idempotency-Key, and the per-entry status must equal the single route's (and, when accepted, the
// report id). Every accepted entry is stored once (the batch copy and the single copy share their id).
// The seed is printed; FC_SEED=<seed> repeats a run, FC_RUNS=<n> changes the number of batches.
//
// Kept equal by construction, so that a difference can only come from the gateway: help texts go to
// software of their own (a help entry accepted in one batch cannot turn a later diagnostics answer
// from 202 into 200), the licence and the rate are out of the way, and slugs that a URL would change
// (`/`, `%`, `.`, empty) are not generated.
import t from 'tap';
import fc from 'fast-check';
import { testStack, request, eventually, chRows, drained } from '../helpers/stack.js';
import { arbitraryOf, toJson } from '../helpers/arbitraries.js';
import { Heartbeat, Status, diagnosticsSchema, helpSchema, type BatchKind } from '../../lib/contract/schemas/ingest.js';
import { idempotentReportId } from '../../lib/contract/ids.js';

const s = await testStack(t, 'batchprop', {
  api: false,
  env: { RATE_LIMIT_PER_S: '1000000', RATE_LIMIT_BURST: '1000000', REJECTION_LOG_RATE_PER_S: '100000', REJECTION_LOG_BURST: '100000' },
});
await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [s.customer.id]);
// Both copies of every report (the batch's and the single route's) stay side by side for the comparison of stored rows.
for (const table of ['heartbeats', 'status_history', 'diagnostics']) await s.ch.command({ query: `SYSTEM STOP MERGES ${table}` });
const seed = Number(process.env.FC_SEED ?? Math.floor(Math.random() * 2 ** 31));
const runs = Number(process.env.FC_RUNS ?? 30);
t.comment(`fast-check seed ${seed}, ${runs} batches (FC_SEED=${seed} repeats this run)`);

const schemas: Record<BatchKind, unknown> = { heartbeat: Heartbeat, diagnostics: diagnosticsSchema(1000), status: Status, help: helpSchema(1000) };
const BATCH_LIMIT = 4 * 1024 * 1024;

interface GenEntry {
  machine: string;
  software: string;
  kind: BatchKind;
  /** undefined: no body (as an empty request body). */
  body: unknown;
}

// Mostly valid slugs (a few machines, so entries share instances), some that the path check refuses.
const badSlug = fc.constantFrom('Upper', 'a_b', '-lead', 'x'.repeat(65), '\u00fc');
const slug = (prefix: string) => fc.oneof({ weight: 12, arbitrary: fc.integer({ min: 0, max: 7 }).map((n) => `${prefix}${n}`) }, { weight: 1, arbitrary: fc.constant(`${prefix}-${'y'.repeat(61)}`) }, { weight: 1, arbitrary: badSlug });
const entry = (hostile: boolean): fc.Arbitrary<GenEntry> =>
  fc.constantFrom<BatchKind>('heartbeat', 'diagnostics', 'status', 'help').chain((kind) =>
    fc.record({
      machine: slug('pm'),
      // Help texts to software of their own: diagnostics never find a help text, and are always 202.
      software: slug(kind === 'help' ? 'ph' : 'ps'),
      kind: fc.constant(kind),
      body: fc.oneof(
        { weight: 20, arbitrary: arbitraryOf(schemas[kind], { hostile, longArrays: 0.02 }) },
        { weight: 1, arbitrary: fc.constant(undefined) },
        { weight: hostile ? 1 : 0, arbitrary: fc.constantFrom(null, [], 'text', 7) },
      ),
    }),
  );
const batches = fc.sample(fc.array(fc.oneof({ weight: 2, arbitrary: entry(false) }, { weight: 1, arbitrary: entry(true) }), { minLength: 1, maxLength: 12 }), { seed, numRuns: runs });

const key = (b: number, i: number) => `bp-${seed}-${b}-${i}`;
const entryJson = (e: GenEntry, k: string) =>
  `{"machine":${JSON.stringify(e.machine)},"software":${JSON.stringify(e.software)},"kind":"${e.kind}",${e.body === undefined ? '' : `"body":${toJson(e.body)},`}"idempotency_key":${JSON.stringify(k)}}`;

async function alone(e: GenEntry, k: string): Promise<{ status: number; text: string }> {
  const body = e.body === undefined ? '' : toJson(e.body);
  const url = `${s.gatewayUrl}/api/ingest/${s.customer.slug}/${encodeURIComponent(e.machine)}/${encodeURIComponent(e.software)}/${e.kind}`;
  try {
    const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${s.token}`, 'Idempotency-Key': k }, body });
    return { status: r.status, text: await r.text() };
  } catch (e) {
    // Over the body limit the gateway answers 413 and closes at once; a client still writing may see only the broken pipe.
    if (Buffer.byteLength(body) > 1024 * 1024) return { status: 413, text: '{"detail":"closed while sending"}' };
    throw e;
  }
}

interface Compared {
  e: GenEntry;
  k: string;
  batch: { status: number; id?: string; detail?: string };
  single: number;
  singleText: string;
}

/** The report id of an entry's idempotency key (scoped to its kind, machine and software). */
const idOf = (c: Compared) => idempotentReportId(s.customer.id, c.e.kind, c.e.machine, c.e.software, c.k);
const compared: Compared[] = [];
let sentBatches = 0;
for (let b = 0; b < batches.length; b++) {
  const list = batches[b]!;
  const texts = list.map((e, i) => entryJson(e, key(b, i)));
  const payload = `{"entries":[${texts.join(',')}]}`;
  if (Buffer.byteLength(payload) > BATCH_LIMIT) continue; // the whole request would be 413: nothing per entry to compare
  const r = await request('POST', `${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, s.token, payload);
  if (r.status !== 200) {
    t.fail(`batch ${b} answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`);
    continue;
  }
  sentBatches++;
  for (let i = 0; i < list.length; i++) {
    const single = await alone(list[i]!, key(b, i));
    compared.push({ e: list[i]!, k: key(b, i), batch: r.body.results[i], single: single.status, singleText: single.text });
  }
}
const byStatus = new Map<number, number>();
for (const c of compared) byStatus.set(c.batch.status, (byStatus.get(c.batch.status) ?? 0) + 1);
t.comment(`${sentBatches} batches, ${compared.length} entries; batch answers: ${[...byStatus.entries()].map(([k, v]) => `${k}×${v}`).join(', ')}`);

function detailOf(text: string): string | undefined {
  try {
    const v = JSON.parse(text) as { detail?: unknown };
    return typeof v.detail === 'string' && v.detail !== 'closed while sending' ? v.detail : undefined;
  } catch {
    return undefined;
  }
}

t.test('each entry of a batch gets the status (and detail) it gets alone', async (t) => {
  t.ok(sentBatches >= runs / 2, `most batches sent (${sentBatches} of ${runs})`);
  let same = 0;
  let sameDetail = 0;
  for (const c of compared) {
    if (c.batch.status !== c.single) {
      t.fail(`${c.e.kind} ${c.e.machine}/${c.e.software}: batch ${c.batch.status} ${c.batch.detail ?? ''} vs alone ${c.single} ${c.singleText.slice(0, 200)}; body ${toJson(c.e.body).slice(0, 300)}`);
    } else same++;
    if (c.batch.status >= 500) t.fail(`a 5xx in a batch: ${JSON.stringify(c.batch)}`);
    if (c.batch.status >= 400 && !c.batch.detail) t.fail(`a refusal without a detail: ${JSON.stringify(c.batch)}`);
    if (c.batch.status < 300 && c.batch.id !== idOf(c)) t.fail(`accepted with id ${c.batch.id}, not the id of its key`);
    // The same detail, where the single route could answer (a body over the limit may have closed the
    // connection first) and saw the slugs as the entry has them (not percent-encoded by the URL).
    const urlSafe = [c.e.machine, c.e.software].every((x) => encodeURIComponent(x) === x);
    const singleDetail = urlSafe ? detailOf(c.singleText) : undefined;
    // A body over the limit is measured as sent alone, and as its compact JSON in a batch (docs/api.md): the same words, other numbers.
    const sized = (d?: string) => d?.replace(/^body of \d+ bytes/, 'body of N bytes');
    if (c.batch.status >= 400 && singleDetail !== undefined && sized(c.batch.detail) !== sized(singleDetail)) {
      t.fail(`${c.e.kind} ${c.e.machine}/${c.e.software}: batch detail ${JSON.stringify(c.batch.detail)} vs alone ${JSON.stringify(singleDetail)}`);
    } else if (c.batch.status >= 400 && singleDetail !== undefined) sameDetail++;
  }
  t.equal(same, compared.length, `${same} of ${compared.length} entries answered alike`);
  t.ok(sameDetail > 0, `${sameDetail} refusals with the same detail as alone`);
  const accepted = compared.filter((c) => c.batch.status < 300).length;
  t.ok(accepted > compared.length / 4 && accepted < compared.length, `both accepted and refused entries were generated (${accepted} of ${compared.length} accepted)`);
});

t.test('every accepted entry is stored, once', async (t) => {
  const ids = (kind: BatchKind) => compared.filter((c) => c.e.kind === kind && c.batch.status < 300).map((c) => `'${idOf(c)}'`);
  const hb = ids('heartbeat');
  const st = ids('status');
  const dg = compared.filter((c) => c.e.kind === 'diagnostics' && c.batch.status < 300);
  const items = dg.reduce((n, c) => n + (c.e.body as { items: unknown[] }).items.length, 0);
  const inList = (xs: string[]) => xs.join(',') || "''";
  let seen: number[] = [];
  await eventually(
    async () => {
      const [h, sh, d] = await Promise.all([
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE report_id IN (${inList(hb)})`),
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM status_history FINAL WHERE report_id IN (${inList(st)})`),
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM diagnostics FINAL WHERE report_id IN (${inList(dg.map((c) => `'${idOf(c)}'`))})`),
      ]);
      seen = [Number(h[0]!.n), Number(sh[0]!.n), Number(d[0]!.n)];
      return seen[0] === hb.length && seen[1] === st.length && seen[2] === items;
    },
    90_000,
    `every accepted heartbeat (${hb.length}), status (${st.length}) and diagnostic item (${items}) stored`,
  ).catch((e: Error) => {
    throw new Error(`${e.message}; last seen ${seen.join(', ')}`);
  });
  const [all] = await chRows<{ n: string; u: string }>(s.ch, `SELECT count() AS n, uniqExact(report_id) AS u FROM heartbeats FINAL`);
  t.equal(Number(all!.n), hb.length, 'no heartbeat beyond the accepted ones (the single copy collapsed into the batch copy)');
  t.equal(Number(all!.u), hb.length);

  // The same stored rows: the batch copy and the single copy of an entry share their report id and
  // (by the idempotency key) their receive time, and are written by separate inserts; with merges
  // stopped both rows are there, and they must be identical in every column.
  await drained(s, 60_000);
  let twice = 0;
  for (const [table, ids, key] of [
    ['heartbeats', hb, 'report_id'],
    ['status_history', st, 'report_id'],
    ['diagnostics', dg.map((c) => `'${idOf(c)}'`), 'report_id, item'],
  ] as const) {
    const rows = await chRows<{ k: string; n: string; v: string }>(
      s.ch,
      `SELECT toString(tuple(${key})) AS k, count() AS n, uniqExact(toString(tuple(*))) AS v FROM ${table} WHERE report_id IN (${inList([...ids])}) GROUP BY ${key}`,
    );
    const differ = rows.filter((r) => Number(r.v) !== 1);
    t.same(differ, [], `${table}: the batch copy and the single copy of each report are the same row`);
    twice += rows.filter((r) => Number(r.n) > 1).length;
  }
  t.equal(twice, hb.length + st.length + items, `every stored row seen twice (batch and single copy: ${twice}) and the copies compared column by column`);
});
