// The gateway's ingest core, apart from any transport: what happens to a report between the
// request and JetStream. gateway/http/ calls it for the uWS routes; a test or another transport
// calls it alike (test/servers/ingest-core.test.ts runs it with no HTTP server at all).
//
//   admit(path, authorization)            before the body: shutting down (503), path slugs (400),
//                                         bearer (403), the token from the copy, its rate (429)
//   resolve(bearer, path)                 the same for a token the copy does not know yet
//   ingest(call, kind, tok, path, raw, …) after the body: byte rate (429), JSON (400), schema and
//                                         storability (422/413), licence (403), the command of an
//                                         ack (404), then publish
//   publish(call, kind, prepared, …)      claims the Idempotency-Key (422 for another body), hands
//                                         the report to the publisher, answers once JetStream has it
//
// Every step's decision is a pure function of gateway/admission.ts; this file runs them in order.
// The answer comes back as an `Outcome` (an answer, or an HttpError), never written to a socket
// here: gateway/http/edge.ts writes it, logs refusals and counts both.
import { HttpError } from '../lib/contract/errors.js';
import { idempotentReportId, randomId } from '../lib/contract/ids.js';
import { encodeReport, laneOf } from '../lib/contract/messages.js';
import type { Validator } from '../lib/contract/validation.js';
import type { ReportKind } from '../lib/contract/schemas/ingest.js';
import { reportChecker, type ReportChecker, type CheckedKind } from '../lib/domain/report-check.js';
import type { TokenInfo } from './token-cache.js';
import { IngestRates } from './rates.js';
import { acceptedAnswer } from './help-coverage.js';
import { keyReused, keyRegisterUnavailable } from './idempotency.js';
import { KINDS, authorise, parseBearer, missingBearer, pathRefusal, parseJsonObject, deepRefusal, schemaRefusal, type ParsedBody } from './admission.js';
import type { Call, Done, Gate, GatewayDeps, IngestPath, JsonKind, JsonRoute, PreparedReport, RateMode, Refusal } from './types.js';

type PathOf = Pick<IngestPath, 'customer'> & Partial<IngestPath>;

export class Ingest {
  readonly rates: IngestRates;
  private readonly checker: ReportChecker;
  private readonly validators = new Map<CheckedKind, Validator<unknown>>();

  constructor(readonly d: GatewayDeps) {
    this.rates = new IngestRates(d.cfg, d.quotas, d.metrics);
    // Schema and storability of each kind (lib/domain/report-check.ts: the same check a worker
    // repeats on a report storage refused).
    this.checker = reportChecker(d.cfg.gateway.maxItems);
  }

  /** The checks before the body: shutting down, path slugs, bearer, and the token with its rate when this gateway's copy knows it. */
  admit(path: PathOf, authorization: string, rate: RateMode = 'take'): Gate | Refusal {
    const { customer } = path;
    // Closing the connection after the answer sends the proxy's next request to another gateway.
    if (this.d.isClosing()) return { refused: new HttpError(503, 'gateway shutting down; retry', { retryAfterS: 1, close: true }), customer };
    const badPath = pathRefusal(path);
    if (badPath) return { refused: badPath, customer: pathRefusal({ customer }) ? '' : customer };
    const bearer = parseBearer(authorization);
    if (bearer === null) return { refused: missingBearer(), customer };
    const known = this.d.tokens.peek(bearer);
    if (known !== undefined) {
      const now = Date.now();
      const err = authorise(known, customer, path.machine, now) ?? this.rates.refusal(known, rate);
      if (err) return { refused: err, token: known, customer };
      this.d.tokens.touch(known, now);
    }
    return { bearer, known };
  }

  /** `admit` for a token this gateway's copy does not know yet: one lookup (within the copy's budget), then the same checks. */
  async resolve(bearer: string, path: PathOf, rate: RateMode = 'take'): Promise<TokenInfo | Refusal> {
    const { customer } = path;
    let t: TokenInfo | undefined;
    try {
      t = await this.d.tokens.lookup(bearer);
    } catch (e) {
      this.d.log.warn({ err: e }, 'token lookup failed');
      return { refused: new HttpError(503, 'token check unavailable; retry', { retryAfterS: 2 }), customer };
    }
    const now = Date.now();
    const err = t ? (authorise(t, customer, path.machine, now) ?? this.rates.refusal(t, rate)) : new HttpError(403, 'invalid token');
    if (err) return { refused: err, token: t, customer };
    this.d.tokens.touch(t!, now);
    return t!;
  }

  validatorOf(kind: CheckedKind): Validator<unknown> {
    return this.validators.get(kind) ?? this.validators.set(kind, schemaOf(this.checker, kind)).get(kind)!;
  }

  /**
   * After a body is parsed, the same for a single request and a batch entry: the schema (422),
   * beyond it (snapshot size 413, free trees and typed leaves 422), the licence's device limit (403).
   */
  check(kind: JsonKind, validate: Validator<unknown>, tok: TokenInfo, machine: string, data: Record<string, unknown>, rawSize: number): HttpError | null {
    return schemaRefusal(validate, data) ?? deepRefusal(kind, data, rawSize, this.checker) ?? (KINDS[kind].createsMachines ? this.d.licences.check(tok.customerId, machine) : null);
  }

  /** The body of one request: the customer's byte rate (429), JSON (400), then `check`. */
  parse(kind: JsonKind, tok: TokenInfo, machine: string, raw: Buffer, route: JsonRoute = {}): ParsedBody | HttpError {
    const bytes = this.rates.overBytes(tok, raw.length);
    if (bytes) return bytes;
    const parsed = parseJsonObject(raw, this.d.cfg.gateway.json, route.spanPath);
    if (parsed instanceof HttpError) return parsed;
    return this.check(kind, route.validate ?? this.validatorOf(KINDS[kind].schema!), tok, machine, parsed.data, raw.length) ?? parsed;
  }

  /**
   * One report's way after its body: `parse`, then the route's own `finish` (host metrics,
   * artifact-init), or the command an ack names (404 when it is not this instance's), and `publish`.
   * `done` runs once, with the answer or the refusal.
   */
  ingest(call: Call, kind: JsonKind, tok: TokenInfo, path: IngestPath, raw: Buffer, opts: { idemKey: string; commandId?: string; route?: JsonRoute }, done: Done): void {
    const { idemKey, commandId = '', route = {} } = opts;
    const parsed = this.parse(kind, tok, path.machine, raw, route);
    if (parsed instanceof HttpError) return done(parsed);
    const { data } = parsed;
    if (route.finish) return route.finish(call, tok, raw, data, path, idemKey, parsed.spans, done);
    const go = () => {
      const p = this.prepare(kind, tok, path, raw, data, idemKey, commandId);
      if (p instanceof HttpError) return done(p);
      this.publish(call, kind, p, idemKey ? data : undefined, done);
    };
    if (!KINDS[kind].namesCommand) return go();
    // The command must be this instance's (404 otherwise): in memory, or one read for an id it does not know.
    const ack = this.d.commands.checkAck(tok.customerId, path.machine, path.software, commandId);
    if (!(ack instanceof Promise)) return ack ? done(ack) : go();
    ack.then((e) => (e ? done(e) : go())).catch(call.fail);
  }

  /**
   * The report as queued (lib/contract/messages.ts: the raw body wrapped, never re-serialised) and the answer
   * once JetStream has it, or 413 when it is over the queue's message limit. Pending agent commands
   * go out in the answer of the kinds that offer them, and their ids into the report (recorded as
   * delivered by the worker). With an Idempotency-Key the id is derived from customer and key.
   */
  prepare(kind: JsonKind, tok: TokenInfo, path: IngestPath, raw: Buffer, data: unknown, idemKey: string, commandId = ''): HttpError | PreparedReport {
    const offer = KINDS[kind].offersCommands ? this.d.commands.offer(tok.customerId, path.machine, path.software) : null;
    const id = idemKey ? idempotentReportId(tok.customerId, kind, path.machine, path.software, idemKey) : randomId();
    const report = encodeReport(
      { id, kind: kind as ReportKind, customerId: tok.customerId, customer: tok.customer, machine: path.machine, software: path.software, tokenId: tok.id, receivedAt: Date.now(), idempotencyKey: idemKey || undefined, deliveredCommands: offer?.ids, commandId: commandId || undefined },
      raw,
    );
    if (report.length > this.d.publisher.maxReportBytes) return new HttpError(413, `report of ${report.length} bytes is over the queue's message limit`);
    const answer = offer ? { status: 200, body: offer.body } : acceptedAnswer(kind, data, tok.customerId, path.software, this.d.help);
    return { id, report, customerId: tok.customerId, machine: path.machine, answer };
  }

  /**
   * Queues a prepared report and answers once JetStream has stored it (503 when it did not).
   * `keyedBody`: the body its Idempotency-Key is claimed for before it is queued
   * (gateway/idempotency.ts: 422 when the key was used with another body).
   */
  publish(call: Call, kind: JsonKind, p: PreparedReport, keyedBody: unknown, done: Done): void {
    call.reportId = p.id;
    const queue = () => this.d.publisher.add(p.report, call.guard((err: HttpError | null) => done(err ?? p.answer)), laneOf(kind), p.customerId, p.machine);
    if (keyedBody === undefined) return queue();
    this.d.idempotency
      .claim([{ id: p.id, body: keyedBody }])
      .then(
        ([claim]) => (claim === 'different' ? done(keyReused()) : queue()),
        (e) => {
          this.d.log.warn({ err: e }, 'Idempotency-Key register (Redis) unavailable');
          done(keyRegisterUnavailable());
        },
      )
      .catch(call.fail);
  }
}

/** Whether `admit` or `resolve` refused. */
export const isRefusal = (x: object): x is Refusal => 'refused' in x;

/** The schema check of one kind as a Validator (routes may bring their own: metrics). */
function schemaOf(checker: ReportChecker, kind: CheckedKind): Validator<unknown> {
  return Object.assign((data: unknown): data is unknown => checker.schema(kind, data) === null, {
    errorsOf: (data: unknown) => checker.schema(kind, data)?.errors ?? [],
  });
}
