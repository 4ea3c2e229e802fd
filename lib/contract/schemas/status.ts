// Status snapshots as the read API returns them: typed leaves (5.10.0) resolved (lib/domain/snapshot.ts).
import { Type } from '@sinclair/typebox';

const NString = Type.Union([Type.String(), Type.Null()]);

export const ResolvedSnapshot = Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], {
  description:
    'the snapshot tree as sent, except that every typed leaf of a known type is {value, type, unit, label, hint, display}; ' +
    'unknown-type leaves and untyped values are unchanged',
});

export const InstanceStatus = Type.Object(
  {
    instance_id: Type.String({ format: 'uuid' }),
    status: NString,
    message: NString,
    status_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    snapshot: ResolvedSnapshot,
  },
  { $id: 'InstanceStatus' },
);

export const StatusHistoryQuery = Type.Object({
  from: Type.Optional(Type.String({ format: 'date-time' })),
  to: Type.Optional(Type.String({ format: 'date-time' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  snapshot: Type.Optional(Type.Boolean({ default: true, description: 'false: leave the snapshots out (status and message only)' })),
});

export const StatusHistoryEntry = Type.Object({
  report_id: Type.String(),
  received_at: Type.String({ format: 'date-time' }),
  status: Type.String(),
  message: Type.String(),
  snapshot: ResolvedSnapshot,
});

export const StatusHistory = Type.Object({ items: Type.Array(StatusHistoryEntry) }, { $id: 'StatusHistory' });
