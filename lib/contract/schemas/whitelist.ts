// Whitelist rules as the read API takes and returns them (docs/decisions.md "Diagnostics whitelist").
import { Type, type Static } from '@sinclair/typebox';
import { INT32_MIN, INT32_MAX, SLUG_PATTERN_RE } from './common.js';

const CodeInt = Type.Integer({ minimum: INT32_MIN, maximum: INT32_MAX });
const SlugPattern = Type.String({
  pattern: SLUG_PATTERN_RE.source,
  description: 'slug pattern: slug characters, `*` (any run, also none) and `?` (one character); matches the whole slug',
});
const MessagePattern = Type.String({
  minLength: 1,
  maxLength: 512,
  pattern: '^[^\\u0000-\\u001f]*$',
  description: 'message pattern: `*` and `?` are wildcards, everything else literal; matches the whole message, ignoring case',
});

export const WhitelistRuleInput = Type.Object(
  {
    machine: Type.Optional(Type.Union([SlugPattern, Type.Null()])),
    software: Type.Optional(Type.Union([SlugPattern, Type.Null()])),
    code: Type.Optional({ ...CodeInt, description: 'one code (same as code_from = code_to)' }),
    code_from: Type.Optional({ ...CodeInt, description: 'first code of a range (with code_to)' }),
    code_to: Type.Optional({ ...CodeInt, description: 'last code of a range, inclusive (with code_from)' }),
    message: Type.Optional(Type.Union([MessagePattern, Type.Null()])),
    note: Type.Optional(Type.String({ maxLength: 1024 })),
    enabled: Type.Optional(Type.Boolean({ default: true })),
  },
  {
    $id: 'WhitelistRuleInput',
    additionalProperties: false,
    description: 'A rule: `code`, or `code_from` and `code_to`; machine, software and message patterns are optional (absent or null: any)',
  },
);
export type WhitelistRuleInput = Static<typeof WhitelistRuleInput>;

export const WhitelistRule = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    machine: Type.Union([Type.String(), Type.Null()]),
    software: Type.Union([Type.String(), Type.Null()]),
    code_from: Type.Integer(),
    code_to: Type.Integer(),
    message: Type.Union([Type.String(), Type.Null()]),
    note: Type.String(),
    enabled: Type.Boolean(),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'WhitelistRule' },
);

export const WhitelistRuleList = Type.Object({ items: Type.Array(WhitelistRule) }, { $id: 'WhitelistRuleList' });
