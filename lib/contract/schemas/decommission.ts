// Decommissioning (docs/api.md "Decommissioning"): the answer of retiring a machine or an instance.
import { Type, type Static } from '@sinclair/typebox';

export const Retirement = Type.Object(
  {
    kind: Type.Union([Type.Literal('machine'), Type.Literal('instance')]),
    id: Type.String({ format: 'uuid', description: 'the machine or instance retired' }),
    machine_id: Type.String({ format: 'uuid' }),
    machine: Type.String({ description: "the machine's slug" }),
    retired_at: Type.String({ format: 'date-time', description: 'when it was retired (the first time, if it was retired before)' }),
    already_retired: Type.Boolean({ description: 'it was retired before this request: nothing changed but its Redis state, cleared again' }),
    instances: Type.Array(Type.Object({ id: Type.String({ format: 'uuid' }), software: Type.String() }), { description: 'the instances retired with it' }),
    cancelled_commands: Type.Integer({ description: 'open commands (queued or delivered) this request cancelled' }),
  },
  { $id: 'Retirement' },
);
export type Retirement = Static<typeof Retirement>;
