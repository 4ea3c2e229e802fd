// Schemas shared by the ingest and read sides: error bodies, slugs, ids.
import { Type, type Static } from '@sinclair/typebox';

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
