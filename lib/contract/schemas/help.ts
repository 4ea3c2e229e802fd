// Help texts as the read API returns them.
import { Type } from '@sinclair/typebox';

export const HelpQuery = Type.Object({
  code: Type.Integer({ minimum: -2147483648, maximum: 2147483647, description: 'diagnostic code' }),
  lang: Type.Union([Type.Literal('de'), Type.Literal('en'), Type.Literal('DE'), Type.Literal('EN')], { description: 'de or en (either case)' }),
});

export const HelpText = Type.Object(
  {
    code: Type.Integer(),
    lang: Type.Union([Type.Literal('de'), Type.Literal('en')]),
    software: Type.String(),
    title: Type.String(),
    text: Type.String(),
    updated_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'HelpText' },
);

export const HelpMissing = Type.Object(
  {
    detail: Type.String(),
    code: Type.Optional(Type.Integer()),
    available: Type.Optional(
      Type.Array(Type.Union([Type.Literal('de'), Type.Literal('en')]), { description: 'languages this code does have a text in (may be empty)' }),
    ),
  },
  { $id: 'HelpMissing', description: 'no such instance (`detail` only), or no text in the asked language: `available` lists the languages there are' },
);

export const MissingHelp = Type.Object(
  {
    ok: Type.Literal(true),
    missing_help: Type.Array(
      Type.Object({ code: Type.Integer(), langs: Type.Array(Type.Union([Type.Literal('de'), Type.Literal('en')]), { description: 'the missing languages' }) }),
    ),
  },
  { $id: 'MissingHelp', description: 'accepted (durably queued); some reported codes lack a DE or EN help text' },
);

export const HelpStored = Type.Object(
  { ok: Type.Literal(true), stored: Type.Integer({ description: 'distinct code and language pairs in the upload' }) },
  { $id: 'HelpStored' },
);
