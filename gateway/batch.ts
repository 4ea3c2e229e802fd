// POST /api/ingest/{customer}/batch: many reports of one customer in one request (an edge
// aggregator, or an agent sending what it buffered while offline). docs/api.md "Batch ingest".
//
// The request is checked as every ingest request is (framing, slug, token, Content-Type, size,
// JSON), except that the rate is only looked at before the body (one token must be left) and
// taken after it, one token per entry. Then each entry goes through the steps of the single route
// of its kind, in the same order and with the same code (gateway/admission.ts, and the steps of
// the ingest core, gateway/ingest.ts: schema, report-check, licence, commands, help coverage,
// message format): its slugs (400), the rate (429), its Idempotency-Key (400), its body (422), its
// size (413, BODY_LIMIT_BYTES as a single request), schema and storability (422/413), licence (403),
// the queue's message limit (413). Each accepted entry becomes its own report on the queue, exactly
// as the single route would queue it, so the workers see no difference.
//
// The answer is written only when every accepted entry's report is settled by the publisher: 200
// with one result per entry, in order; an entry whose publish failed is 503 in its result and is
// never reported accepted. When every entry failed alike on the way to the queue (all 503, or all
// over the rate: 429), the whole request is answered that way, with Retry-After.
//
// Transport-free, as the core is: gateway/http/routes.ts reads the request and writes the answer
// and the rejection-log rows of the refused entries.
import { HttpError } from '../lib/contract/errors.js';
import { compile } from '../lib/contract/validation.js';
import { batchEnvelopeSchema } from '../lib/contract/schemas/ingest.js';
import type { TokenInfo } from './token-cache.js';
import { batchJsonLimits, entryBodyRefusal, entryHeadRefusal, entryJsonRefusal, machineRefusal, parseJsonObject, sizeRefusal, schemaRefusal, type EntryHead, type ParsedBody } from './admission.js';
import type { Call, Outcome, PreparedReport } from './types.js';
import type { AcceptedAnswer } from './help-coverage.js';
import type { BatchKind } from '../lib/contract/schemas/ingest.js';
import type { Ingest } from './ingest.js';
import { keyReused, keyRegisterUnavailable } from './idempotency.js';
import { laneOf } from '../lib/contract/messages.js';

const ENTRY_BODIES = ['entries', '*', 'body'];
const EMPTY = Buffer.alloc(0);

/** An entry refused: its index, the refusal, and `kind machine/software` when it got that far (the rejection log's detail). */
export interface RefusedEntry {
  index: number;
  err: HttpError;
  what: string;
  bodySize: number;
}

const dec = new TextDecoder();

/** A result: the single route's answer body with its status (and the report id) in front. */
function acceptedResult(answer: AcceptedAnswer, id: string): string {
  // A shared pre-encoded answer carries its text (gateway/help-coverage.ts), so no entry decodes it.
  const text = typeof answer.body === 'string' ? answer.body : (answer.text ?? dec.decode(answer.body));
  return `{"status":${answer.status},"id":"${id}",${text.slice(1)}`;
}

function refusedResult(err: HttpError): string {
  return JSON.stringify({ status: err.status, detail: err.detail, ...(err.errors ? { errors: err.errors } : {}), ...(err.retryAfterS ? { retry_after: err.retryAfterS } : {}) });
}

export class BatchIngest {
  private readonly envelope;
  private readonly entries;
  private readonly limits;

  constructor(private readonly core: Ingest) {
    const { cfg, metrics } = core.d;
    this.envelope = compile(batchEnvelopeSchema(cfg.gateway.maxItems));
    this.entries = metrics.counter('fleet_gateway_batch_entries_total');
    this.limits = batchJsonLimits(cfg.gateway.json, cfg.gateway.batchBodyLimit, cfg.gateway.bodyLimit);
  }

  /**
   * A batch's body from a token allowed for `customer`: `done` runs once, with the answer (or the
   * refusal of the whole request) and the entries refused, in order.
   */
  ingest(call: Call, tok: TokenInfo, customer: string, raw: Buffer, done: (o: Outcome, refused: RefusedEntry[]) => void): void {
    const { core } = this;
    // A refusal of the whole request after its body costs one rate token, as a refused single request does.
    const refuse = (err: HttpError) => {
      core.rates.takeUpTo(tok, 1);
      done(err, []);
    };
    const bytes = core.rates.overBytes(tok, raw.length);
    if (bytes) return refuse(bytes);
    const parsed = parseJsonObject(raw, this.limits, ENTRY_BODIES);
    if (parsed instanceof HttpError) return refuse(parsed);
    const bad = schemaRefusal(this.envelope, parsed.data);
    if (bad) return refuse(bad);
    this.run(call, tok, customer, parsed.data.entries as unknown[], raw, parsed, done);
  }

  /** `spans`: where each entry's body stands in `request` (it is queued as those bytes); `shapes`: its value count and depth. */
  private run(call: Call, tok: TokenInfo, customer: string, entryList: unknown[], request: Buffer, parsed: ParsedBody, done: (o: Outcome, refused: RefusedEntry[]) => void): void {
    const { core } = this;
    // The parsed request, read only while the entries are queued (this turn): let go of before
    // the answers come back. Every callback below shares this function's scope, so anything they
    // could reach stayed alive until the last PubAck, and a batch's whole parsed tree and body
    // outlived a young-generation collection or two (copied each time: most of the gateway's GC).
    let src: { list: unknown[]; request: Buffer; parsed: ParsedBody } | null = { list: entryList, request, parsed };
    const { d } = core;
    const { cfg } = d;
    const entries = this.entries;
    const n = entryList.length;
    const results: string[] = new Array<string>(n);
    const okIds: string[] = new Array<string>(n);
    const okAnswers: AcceptedAnswer[] = new Array<AcceptedAnswer>(n);
    const refused: RefusedEntry[] = [];
    let accepted = 0;
    let pending = 0;
    let queued = false;
    // Entries per kind and status, added to the counter once per request (a labelled inc() per
    // entry was 2-3 % of a batch's CPU).
    const tally = new Map<string, Map<number, number>>();
    const count = (kind: string, status: number) => {
      let byStatus = tally.get(kind);
      if (!byStatus) tally.set(kind, (byStatus = new Map()));
      byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
    };

    const keyed: { i: number; kind: BatchKind; p: PreparedReport; head: EntryHead; raw: Buffer; body: unknown }[] = [];
    // An entry's `kind machine/software` is written only when it is refused: built for every
    // entry, the strings stayed in the callbacks until the answer (most of what a batch in flight
    // held on the heap).
    const refuseEntry = (index: number, err: HttpError, head: EntryHead | null = null, bodySize = 0) => {
      results[index] = refusedResult(err);
      refused.push({ index, err, what: head ? `${head.kind} ${head.path.machine}/${head.path.software}` : '', bodySize });
    };

    // Before the rate, as on the single route: the entry's shape, its path and the token's machine
    // binding (no token spent).
    const heads = entryList.map((e) => {
      const h = entryHeadRefusal(e, customer);
      return h instanceof HttpError ? h : (machineRefusal(tok, h.path.machine) ?? h);
    });
    // One rate token per entry that got past its path; those beyond the budget are 429 alone. A
    // batch costs at least one token, whatever its entries.
    const wanted = heads.filter((h) => !(h instanceof HttpError)).length;
    let budget = core.rates.takeUpTo(tok, Math.max(1, wanted));

    for (let i = 0; i < n; i++) {
      const head = heads[i]!;
      if (head instanceof HttpError) {
        refuseEntry(i, head);
        continue;
      }
      if (budget === 0) {
        refuseEntry(i, core.rates.overRate(), head);
        continue;
      }
      budget--;
      queue(i, head);
    }
    src = null;
    claimKeys();
    queued = true;
    if (pending === 0) finish();

    /** The entries with an idempotency key: one round trip claims every key for its body, then they are queued (gateway/idempotency.ts). */
    function claimKeys(): void {
      if (keyed.length === 0) return;
      const held = keyed.splice(0);
      pending += held.length; // held until the register answers
      const settle = () => {
        if (--pending === 0 && queued) finish();
      };
      d.idempotency
        .claim(held.map((e) => ({ id: e.p.id, body: e.body })))
        .then(
          (claims) =>
            held.forEach((e, j) => {
              if (claims[j] === 'different') refuseEntry(e.i, keyReused(), e.head, e.raw.length);
              else send(e.i, e.kind, e.p, e.head, e.raw.length);
              settle();
            }),
          (err) => {
            d.log.warn({ err }, 'Idempotency-Key register (Redis) unavailable');
            held.forEach((e) => {
              refuseEntry(e.i, keyRegisterUnavailable(), e.head, e.raw.length);
              settle();
            });
          },
        )
        .catch(call.fail);
    }

    function queue(i: number, head: EntryHead): void {
      const { kind, path } = head;
      const { list, request, parsed } = src!;
      const b = entryBodyRefusal(list[i] as Record<string, unknown>);
      if (b instanceof HttpError) return refuseEntry(i, b, head);
      // The body as it will be queued: the bytes the client sent for it (no body: `{}`), held
      // to a single request's limits, so that nothing grows on its way to the queue.
      const span = parsed.spans.get(i);
      const raw = span ? request.subarray(span[0], span[1]) : EMPTY;
      const refusal =
        sizeRefusal(raw.length, cfg.gateway.bodyLimit) ??
        entryJsonRefusal(raw, cfg.gateway.json, parsed.shapes.get(i)) ??
        core.check(kind, core.validatorOf(kind), tok, path.machine, b.body, raw.length);
      if (refusal) return refuseEntry(i, refusal, head, raw.length);
      const p = core.prepare(kind, tok, path, raw, b.body, b.idemKey);
      if (p instanceof HttpError) return refuseEntry(i, p, head, raw.length);
      if (b.idemKey) keyed.push({ i, kind, p, head, raw, body: b.body });
      else send(i, kind, p, head, raw.length);
    }

    function send(i: number, kind: BatchKind, p: PreparedReport, head: EntryHead, size: number): void {
      pending++;
      // The callback holds the id and answer, not the prepared report (its buffer is the publisher's).
      const { id, answer } = p;
      d.publisher.add(p.report, call.guard((err: HttpError | null) => {
        // Not acknowledged by JetStream: never reported accepted.
        if (err) refuseEntry(i, err, head, size);
        else {
          accepted++;
          // Its result is written with the answer (one string per entry held until then was garbage the GC copied).
          okIds[i] = id;
          okAnswers[i] = answer;
          count(kind, answer.status);
        }
        if (--pending === 0 && queued) finish();
      }), laneOf(kind), p.customerId, p.machine);
    }

    function finish(): void {
      for (const r of refused) count(r.what.split(' ')[0] || 'invalid', r.err.status);
      for (const [kind, byStatus] of tally) for (const [status, v] of byStatus) entries.labels(kind, String(status)).inc(v);
      refused.sort((a, b) => a.index - b.index);
      // Everything failed the same way on its way to the queue: the request is answered so (its
      // entries are logged, one row each, by the route).
      for (const status of [503, 429]) {
        if (refused.length === n && refused.every((r) => r.err.status === status)) {
          const retryAfterS = Math.max(...refused.map((r) => r.err.retryAfterS ?? 1));
          const all = new HttpError(status, `no entry accepted: ${refused[0]!.err.detail}`, { retryAfterS });
          return done({ status, body: all.body(), headers: { 'Retry-After': String(retryAfterS) } }, refused);
        }
      }
      const retryAfter = refused.reduce((m, r) => Math.max(m, r.err.retryAfterS ?? 0), 0);
      for (let i = 0; i < n; i++) if (results[i] === undefined) results[i] = acceptedResult(okAnswers[i]!, okIds[i]!);
      done({ status: 200, body: `{"ok":true,"accepted":${accepted},"rejected":${n - accepted},"results":[${results.join(',')}]}`, headers: retryAfter ? { 'Retry-After': String(retryAfter) } : undefined }, refused);
    }
  }
}
