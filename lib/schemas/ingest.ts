// Ingest payloads (spec part 2, docs/decisions.md "Ingest"). One source: Ajv compiles these for the
// gateway, TypeScript derives the types the workers use, and the OpenAPI document embeds them.
// Unknown top-level fields are allowed everywhere (older and newer agents keep working).
import { Type, type Static } from '@sinclair/typebox';
import { IsoTime, Text, Int53, MAX_INT, INT32_MIN, INT32_MAX } from './common.js';

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
// ArtifactReport, published by the gateway at artifact-complete). See lib/messages.ts.
export const ReportKinds = ['heartbeat', 'diagnostics', 'status', 'help', 'metrics', 'artifact'] as const;
export type ReportKind = (typeof ReportKinds)[number];
