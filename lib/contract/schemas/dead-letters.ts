// Read-API models of the dead-letter stream (system administrators only): the list, one dead
// letter with its reports, and a replay's outcome. lib/store/dead-letters.ts produces exactly these; the
// CLI's `--json` prints them too.
import { Type, type Static } from '@sinclair/typebox';

const NString = Type.Union([Type.String(), Type.Null()]);
const NInt = Type.Union([Type.Integer(), Type.Null()]);

/** A customer slug, or `_none` for dead letters of no known customer (an undecodable message). */
export const DeadLetterCustomer = Type.String({
  pattern: '^([a-z0-9][a-z0-9-]*|_none)$',
  minLength: 1,
  maxLength: 64,
  description: 'customer slug, or `_none` for dead letters of no known customer',
});

const Since = Type.String({
  minLength: 1,
  maxLength: 64,
  description: 'dead-lettered at or after this time: ISO 8601 (`2026-11-20T08:00:00Z`) or a duration back from now (`90s`, `30m`, `2h`, `7d`, `1w`)',
  examples: ['2h'],
});
const Reason = Type.String({ minLength: 1, maxLength: 200, description: 'text the reason, its kind or its class contains (case-insensitive)' });

export const DeadLetterQuery = Type.Object({
  customer: Type.Optional(DeadLetterCustomer),
  since: Type.Optional(Since),
  reason: Type.Optional(Reason),
  after_seq: Type.Optional(Type.Integer({ minimum: 0, description: 'only dead letters after this sequence number: `next_seq` of the previous page' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
});

export const DeadLetterContent = Type.Union([Type.Literal('reports'), Type.Literal('rejection'), Type.Literal('undecodable')], {
  description: 'reports: a report batch (replayable); rejection: a rejection-log record (replayable); undecodable: neither (kept, never replayed)',
});

export const DeadLetter = Type.Object(
  {
    seq: Type.Integer({ description: 'sequence number in the dead-letter stream: what show and replay take' }),
    dead_lettered_at: Type.String({ format: 'date-time' }),
    customer: NString,
    customer_id: NString,
    kind: Type.Union([Type.String(), Type.Null()], { description: 'report kind (heartbeat, diagnostics, status, …)' }),
    machine: NString,
    software: NString,
    reports: Type.Integer({ description: 'reports the dead letter holds (one, since dead letters are isolated per report)' }),
    report_ids: Type.Array(Type.String(), { description: 'their ids (the first 100)' }),
    failure: Type.Union([Type.String(), Type.Null()], { description: 'class: data (storage refused its values), unknown (failed WORKER_MAX_DELIVER times), decode (not a batch)' }),
    error_kind: NString,
    error: Type.Union([Type.String(), Type.Null()], { description: 'the customer-safe reason (server, error class and code, field)' }),
    deliveries: NInt,
    subject: Type.Union([Type.String(), Type.Null()], { description: 'the subject it was queued on' }),
    stream_seq: Type.Union([Type.Integer(), Type.Null()], { description: 'its sequence number in the ingest stream' }),
    content: DeadLetterContent,
    size: Type.Integer({ description: 'bytes' }),
  },
  { $id: 'DeadLetter' },
);

export const DeadLetterList = Type.Object(
  {
    items: Type.Array(DeadLetter, { description: 'oldest first' }),
    next_seq: Type.Union([Type.Integer(), Type.Null()], { description: 'more may follow: pass it as `after_seq`; null: the end of the stream was reached' }),
    scanned: Type.Integer({ description: 'dead letters examined for this page (at most 10,000 per request)' }),
  },
  { $id: 'DeadLetterList' },
);

export const DeadLetterParams = Type.Object({ seq: Type.Integer({ minimum: 1, description: 'sequence number in the dead-letter stream' }) });

export const RenderedBody = Type.Object(
  {
    format: Type.Union([Type.Literal('json'), Type.Literal('text'), Type.Literal('hex')], { description: 'json: pretty-printed; text: not JSON; hex: not UTF-8 (a hex dump)' }),
    text: Type.String({ description: 'at most 64 KiB of characters, 64 levels deep' }),
    truncated: Type.Boolean(),
    bytes: Type.Integer(),
  },
  { $id: 'RenderedBody' },
);

export const DeadLetterReport = Type.Object(
  {
    id: NString,
    kind: NString,
    customer: NString,
    customer_id: NString,
    machine: NString,
    software: NString,
    received_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: "the gateway's receive time" }),
    idempotency_key: NString,
    body: RenderedBody,
  },
  { $id: 'DeadLetterReport', description: "a report; `body.bytes` is the body's compact JSON size (-1: too deeply nested to measure)" },
);

export const DeadLetterDetail = Type.Object(
  {
    dead_letter: DeadLetter,
    headers: Type.Record(Type.String(), Type.String(), { description: 'every header of the dead letter (Fleet-Error, Fleet-Customer, …)' }),
    reports: Type.Array(DeadLetterReport, { description: 'the reports (the first 20), each body rendered' }),
    raw: Type.Union([RenderedBody, Type.Null()], { description: 'the whole message rendered, when it is not a report batch' }),
  },
  { $id: 'DeadLetterDetail' },
);

export const ReplayBody = Type.Object(
  {
    seqs: Type.Optional(Type.Array(Type.Integer({ minimum: 1 }), { minItems: 1, maxItems: 1000, description: 'these dead letters (the filters, when given too, must also match)' })),
    customer: Type.Optional(DeadLetterCustomer),
    since: Type.Optional(Since),
    reason: Type.Optional(Reason),
    all: Type.Optional(Type.Boolean({ description: 'true: every dead letter, when neither seqs nor a filter is given' })),
    after_seq: Type.Optional(Type.Integer({ minimum: 0, description: 'with a filter or all: only dead letters after this sequence number (`next_seq` of the previous call)' })),
    dry_run: Type.Optional(Type.Boolean({ description: 'say what would be done, change nothing' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000, default: 1000, description: 'dead letters handled by this call' })),
  },
  { $id: 'ReplayBody' },
);

export const ReplayResult = Type.Union(
  [Type.Literal('replayed'), Type.Literal('would-replay'), Type.Literal('skipped'), Type.Literal('would-skip'), Type.Literal('failed'), Type.Literal('gone')],
  {
    description:
      'replayed: republished (PubAck) and removed from the dead-letter stream; skipped: undecodable, kept; failed: not republished (the dead letter stays); gone: no such dead letter (replayed already, or expired)',
  },
);

export const ReplayItem = Type.Object(
  {
    seq: Type.Integer(),
    report_ids: Type.Array(Type.String()),
    customer: NString,
    kind: NString,
    result: ReplayResult,
    detail: Type.String(),
  },
  { $id: 'ReplayItem' },
);

export const ReplayAnswer = Type.Object(
  {
    dry_run: Type.Boolean(),
    items: Type.Array(ReplayItem),
    summary: Type.Object({
      selected: Type.Integer(),
      replayed: Type.Integer(),
      would_replay: Type.Integer(),
      skipped: Type.Integer(),
      failed: Type.Integer(),
      gone: Type.Integer(),
    }),
    next_seq: Type.Union([Type.Integer(), Type.Null()], { description: 'the selection stopped early (limit or scan budget): run again to go on' }),
  },
  { $id: 'ReplayAnswer' },
);

export type DeadLetterT = Static<typeof DeadLetter>;
export type DeadLetterListT = Static<typeof DeadLetterList>;
export type DeadLetterDetailT = Static<typeof DeadLetterDetail>;
export type DeadLetterReportT = Static<typeof DeadLetterReport>;
export type RenderedBodyT = Static<typeof RenderedBody>;
export type ReplayItemT = Static<typeof ReplayItem>;
export type ReplayAnswerT = Static<typeof ReplayAnswer>;
export type ReplayResultT = Static<typeof ReplayResult>;
