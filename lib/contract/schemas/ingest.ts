// Ingest payloads (spec part 2, docs/decisions.md "Ingest"). One source: Ajv compiles these for the
// gateway, TypeScript derives the types the workers use, and the OpenAPI document embeds them.
// Unknown top-level fields are allowed everywhere (older and newer agents keep working).
import { Type, type Static } from '@sinclair/typebox';
import { IsoTime, Text, Int53, MAX_INT, INT32_MIN, INT32_MAX, Slug, Uuid } from './common.js';
import { DeliveredCommand } from './commands.js';
import { MissingHelp } from './help.js';

/**
 * An integer, or an integer written as a numeric string (decisions: group_priority, sort_priority).
 * Both are within ±(2^53 − 1) (a string of at most 15 digits is).
 */
export const IntegerLike = Type.Union([Int53(), Type.String({ pattern: '^-?[0-9]{1,15}$' })]);

export const Heartbeat = Type.Object(
  {
    ts: Type.Optional({ ...IsoTime, description: 'agent time; the server records its own receive time too' }),
    version: Type.Optional(Text({ maxLength: 256 })),
    uptime_seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT })),
    pid: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT })),
    ip_addresses: Type.Optional(Type.Array(Text({ maxLength: 64 }), { maxItems: 256 })),
    group: Type.Optional(Text({ maxLength: 256, description: 'since 5.7.0' })),
    location: Type.Optional(Text({ maxLength: 256, description: 'since 5.7.0' })),
    group_priority: Type.Optional({ ...IntegerLike, description: 'since 5.7.0' }),
    sort_priority: Type.Optional({ ...IntegerLike, description: 'since 5.7.0' }),
  },
  { $id: 'Heartbeat', description: 'Liveness report; every field optional, an empty body counts as {}' },
);
export type Heartbeat = Static<typeof Heartbeat>;

export const Severity = Type.Integer({ minimum: 0, maximum: 2, description: '0 info, 1 warning, 2 error' });

export const DiagnosticItem = Type.Object(
  {
    code: Type.Integer({ minimum: INT32_MIN, maximum: INT32_MAX }),
    message: Type.Optional(Text({ maxLength: 8192 })),
    severity: Severity,
  },
  { $id: 'DiagnosticItem' },
);
export type DiagnosticItem = Static<typeof DiagnosticItem>;

export function diagnosticsSchema(maxItems: number) {
  return Type.Object(
    { items: Type.Array(DiagnosticItem, { minItems: 1, maxItems }) },
    { $id: 'Diagnostics', description: `Coded messages with severity; 1 to ${maxItems} items` },
  );
}
export const Diagnostics = diagnosticsSchema(1000);
export type Diagnostics = Static<typeof Diagnostics>;

export const StatusValue = Type.Union(
  [Type.Literal('running'), Type.Literal('degraded'), Type.Literal('error'), Type.Literal('stopped')],
  { description: 'running, degraded, error or stopped' },
);

export const SNAPSHOT_MAX_BYTES = 256 * 1024;
export const SNAPSHOT_MAX_DEPTH = 32;

export const Status = Type.Object(
  {
    status: StatusValue,
    message: Type.Optional(Text({ maxLength: 8192 })),
    snapshot: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description:
          'Free tree (≤ 256 KiB JSON, depth ≤ 32). Since 5.10.0 a leaf may be {value, type, unit?, label?, hint?}: known types ' +
          '(string, number, integer, boolean, percent, bytes, duration_s, timestamp, enum) are checked (422 when the value does not fit); ' +
          'unknown types and untyped leaves are kept as sent',
      }),
    ),
  },
  { $id: 'Status' },
);
export type Status = Static<typeof Status>;

export const HelpLang = Type.Union([Type.Literal('de'), Type.Literal('en')], { description: 'language: de or en' });

export const HelpItem = Type.Object(
  {
    code: Type.Integer({ minimum: INT32_MIN, maximum: INT32_MAX, description: 'diagnostic code' }),
    lang: HelpLang,
    title: Type.Optional(Text({ maxLength: 256 })),
    text: Text({ minLength: 1, maxLength: 65536 }),
  },
  { $id: 'HelpItem' },
);
export type HelpItem = Static<typeof HelpItem>;

/** Help-text upload (docs/docs/decisions.md): per customer (the token's) and software (the path's). */
export function helpSchema(maxItems: number) {
  return Type.Object(
    { items: Type.Array(HelpItem, { minItems: 1, maxItems }) },
    { $id: 'HelpUpload', description: `Diagnostic help texts, 1 to ${maxItems} items; a later upload of the same code and language replaces the text` },
  );
}
export const HelpUpload = helpSchema(1000);
export type HelpUpload = Static<typeof HelpUpload>;

// 'metrics': host-metrics records (body {items}); 'artifact': a completed artifact upload (body
// ArtifactReport, published by the gateway at artifact-complete). See lib/contract/messages.ts.
export const ReportKinds = ['heartbeat', 'diagnostics', 'status', 'help', 'metrics', 'artifact'] as const;
export type ReportKind = (typeof ReportKinds)[number];

// Batch ingest (docs/api.md "Batch ingest"): many reports of one customer in one request. Each
// entry is what one single-route request would carry: the path's machine and software, the kind
// (the path's last segment), the body, and the Idempotency-Key header as a field.

/** The kinds a batch entry may have: those of the single routes `…/{machine}/{software}/{kind}`. */
export const BatchKinds = ['heartbeat', 'diagnostics', 'status', 'help'] as const;
export type BatchKind = (typeof BatchKinds)[number];

function batchEntryOf(kind: BatchKind, body: ReturnType<typeof Type.Object>) {
  return Type.Object({
    machine: { ...Slug, description: 'machine slug, as in the path of the single route (400 for this entry otherwise)' },
    software: { ...Slug, description: 'software slug, as in the path of the single route' },
    kind: Type.Literal(kind),
    // The kind's own schema (a named component in OpenAPI): the body of POST …/{machine}/{software}/{kind}; absent: {}.
    body: Type.Optional(body),
    idempotency_key: Type.Optional(Type.String({ maxLength: 256, description: 'as the Idempotency-Key header of the single route (400 for this entry over 256 characters); empty: none' })),
    customer: Type.Optional({ ...Slug, description: "optional; when given it must be the path's customer (403 for this entry otherwise): a batch never files a report under another customer" }),
  });
}

/** The documented shape of a batch (OpenAPI); the gateway checks the envelope, then each entry on its own. */
export function batchSchema(maxItems: number) {
  return Type.Object(
    {
      entries: Type.Array(
        Type.Union(
          [batchEntryOf('heartbeat', Heartbeat), batchEntryOf('diagnostics', diagnosticsSchema(maxItems)), batchEntryOf('status', Status), batchEntryOf('help', helpSchema(maxItems))],
          { $id: 'BatchEntry', description: 'One report, checked exactly as the single route of its kind would check it; a bad entry gets its own status in `results`' },
        ),
        { minItems: 1, maxItems, description: `1 to ${maxItems} (MAX_ITEMS) entries, answered in this order` },
      ),
    },
    { $id: 'BatchIngest', description: 'Reports of several kinds for many machines and software of the one customer in the path' },
  );
}
export const BatchIngest = batchSchema(1000);

/** What the gateway checks of the whole request (422 for the request); the entries are checked one by one after it. */
export function batchEnvelopeSchema(maxItems: number) {
  return Type.Object({ entries: Type.Array(Type.Unknown(), { minItems: 1, maxItems }) });
}

export const BatchResult = Type.Object(
  {
    status: Type.Integer({ description: 'what this entry alone would have been answered: 200 or 202 accepted (durably queued), else the refusal' }),
    id: Type.Optional({ ...Uuid, description: 'accepted: the report id (derived from the customer and idempotency_key when given)' }),
    ok: Type.Optional(Type.Literal(true)),
    commands: Type.Optional(Type.Array(DeliveredCommand, { description: 'heartbeat and status: agent commands pending for this instance, as the single route offers them' })),
    missing_help: Type.Optional(MissingHelp.properties.missing_help),
    stored: Type.Optional(Type.Integer({ description: 'help: distinct code and language pairs' })),
    detail: Type.Optional(Type.String({ description: 'refused: why' })),
    errors: Type.Optional(
      Type.Array(Type.Object({ path: Type.String(), message: Type.String() }), { description: "422: the failing paths, relative to the entry's body (as the single route names them), or `/kind`, `/body`, … for the entry's own fields" }),
    ),
    retry_after: Type.Optional(Type.Integer({ description: '429 and 503: seconds after which to send this entry again' })),
  },
  { $id: 'BatchResult', description: "One entry's outcome: the single route's answer body with its status (and the report id when accepted)" },
);

export const BatchAnswer = Type.Object(
  {
    ok: Type.Literal(true),
    accepted: Type.Integer({ description: 'entries answered 200 or 202' }),
    rejected: Type.Integer({ description: 'the other entries' }),
    results: Type.Array(BatchResult, { description: 'one per entry, in the order of `entries`' }),
  },
  { $id: 'BatchAnswer' },
);
