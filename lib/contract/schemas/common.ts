// Schemas shared by the ingest and read sides: error bodies, slugs, ids.
import { Type, type Static, type StringOptions, type IntegerOptions } from '@sinclair/typebox';

export const Slug = Type.String({ pattern: '^[a-z0-9][a-z0-9-]*$', minLength: 1, maxLength: 64 });
export const Uuid = Type.String({ format: 'uuid' });
export const IsoTime = Type.String({ format: 'date-time', description: 'ISO 8601 timestamp with time zone' });

export const ErrorBody = Type.Object(
  {
    detail: Type.String(),
    errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
  },
  { $id: 'Error', description: 'Every error: a human-readable detail, plus the failing paths on a schema violation' },
);
export type ErrorBody = Static<typeof ErrorBody>;

export const Ok = Type.Object({ ok: Type.Literal(true) }, { $id: 'Ok' });

// What storage can hold, decided here once (docs/api.md "What the gateway accepts"). A report the
// gateway answers 200 must never fail in Postgres or ClickHouse for a reason in its data.

/**
 * Text Postgres can store: no NUL (refused in text and jsonb) and no half of a UTF-16 surrogate
 * pair (JSON's "\ud800" escape; refused in jsonb, silently replaced in text). Ajv compiles patterns
 * with the `u` flag, under which a paired surrogate is one code point outside the class.
 */
export const STORABLE_TEXT = '^[^\\u0000\\uD800-\\uDFFF]*$';
export const STORABLE_TEXT_RE = new RegExp(STORABLE_TEXT, 'u');

/** A string that storage can hold (see STORABLE_TEXT); same options as Type.String. */
export const Text = (opts: StringOptions = {}) => Type.String({ pattern: STORABLE_TEXT, ...opts });

/** Integers are bounded to 2^53 − 1: every integer column is bigint / Int64, and JSON numbers are doubles. */
export const MAX_INT = Number.MAX_SAFE_INTEGER;
export const Int53 = (opts: IntegerOptions = {}) => Type.Integer({ minimum: -MAX_INT, maximum: MAX_INT, ...opts });
/** Postgres `integer` / ClickHouse Int32 columns. */
export const INT32_MIN = -2147483648;
export const INT32_MAX = 2147483647;

/** Machine and software patterns of whitelist rules and licence lists: slug characters plus the wildcards `*` and `?`. */
export const SLUG_PATTERN_RE = /^[a-z0-9*?-]{1,128}$/;
