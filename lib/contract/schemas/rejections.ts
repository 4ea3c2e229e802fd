// The ingest rejection log as the read API returns it.
import { Type } from '@sinclair/typebox';

export const RejectionQuery = Type.Object({
  from: Type.Optional(Type.String({ format: 'date-time', description: 'from this receive time (inclusive)' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'up to this receive time (inclusive)' })),
  status: Type.Optional(Type.Integer({ minimum: 100, maximum: 599, description: 'only this HTTP status' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000, default: 500 })),
});

export const AdminRejectionQuery = Type.Composite([
  RejectionQuery,
  Type.Object({
    customer: Type.Optional(Type.String({ maxLength: 200, description: 'only rows whose path named this customer slug' })),
  }),
]);

export const Rejection = Type.Object(
  {
    id: Type.String(),
    received_at: Type.String({ format: 'date-time' }),
    customer: Type.String({ description: 'customer slug: the token owner, or the path segment when the token is unknown' }),
    token_id: Type.Union([Type.String(), Type.Null()]),
    method: Type.String(),
    path: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    body_size: Type.Integer(),
    remote: Type.String(),
    dropped: Type.Integer({ description: 'rejections from the same source that were counted but not written (rate limit of the log)' }),
  },
  { $id: 'Rejection' },
);

export const RejectionList = Type.Object({ items: Type.Array(Rejection) }, { $id: 'RejectionList' });
