// Agent commands (docs/decisions.md "Agent commands"): what an agent advertises, what a user queues, what
// the gateway hands to the agent and what the agent acknowledges. One source for validation, types
// and the OpenAPI document.
import { Type, type Static } from '@sinclair/typebox';
import { Text } from './common.js';

const NTime = Type.Union([Type.String({ format: 'date-time' }), Type.Null()]);

export const CommandStates = ['queued', 'delivered', 'succeeded', 'failed', 'expired', 'timed_out', 'cancelled'] as const;
export type CommandState = (typeof CommandStates)[number];
/** States in which a command is still offered to the agent. */
export const OpenStates: readonly CommandState[] = ['queued', 'delivered'];

export const CommandStateSchema = Type.Union(
  CommandStates.map((s) => Type.Literal(s)),
  { description: 'queued → delivered → succeeded | failed; queued too long → expired; delivered without ack in time → timed_out; cancelled by a user while queued' },
);

/** Body of `POST /api/ingest/{customer}/{machine}/{software}/commands/{command_id}/ack`. */
export const CommandAck = Type.Object(
  {
    result: Type.Union([Type.Literal('success'), Type.Literal('failure')]),
    message: Type.Optional(Text({ maxLength: 8192 })),
    output: Type.Optional(Type.Unknown({ description: 'any JSON value (text, object, …), bounded by the body limit; strings and keys without NUL' })),
  },
  { $id: 'CommandAck', description: 'The outcome of a command; the same ack again is a no-op (the first ack wins)' },
);
export type CommandAck = Static<typeof CommandAck>;

/** One command as the gateway hands it to the agent. */
export const DeliveredCommand = Type.Object(
  {
    id: Type.String({ format: 'uuid', description: 'acknowledge with this id; the same command is offered again until acked (dedup by id)' }),
    module: Type.String(),
    command: Type.String(),
    args: Type.Record(Type.String(), Type.Unknown()),
  },
  { $id: 'DeliveredCommand' },
);

/** Answer of heartbeat and status: `{ok:true}`, plus `commands` while some are pending. */
export const OkWithCommands = Type.Object(
  { ok: Type.Literal(true), commands: Type.Optional(Type.Array(DeliveredCommand)) },
  { $id: 'OkWithCommands' },
);

export const AvailableCommand = Type.Object(
  {
    module: Type.String(),
    name: Type.String(),
    label: Type.Union([Type.String(), Type.Null()]),
    params: Type.Unknown({ description: 'as advertised by the agent (null when none)' }),
  },
  { $id: 'AvailableCommand' },
);
export type AvailableCommand = Static<typeof AvailableCommand>;

export const AvailableCommandList = Type.Object({ items: Type.Array(AvailableCommand) }, { $id: 'AvailableCommandList' });

export const QueueCommandBody = Type.Object(
  {
    module: Type.String({ minLength: 1, maxLength: 256 }),
    command: Type.String({ minLength: 1, maxLength: 256 }),
    args: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'passed to the agent unchanged; default {}' })),
  },
  { $id: 'QueueCommandBody' },
);
export type QueueCommandBody = Static<typeof QueueCommandBody>;

export const CommandEvent = Type.Object(
  {
    state: CommandStateSchema,
    at: Type.String({ format: 'date-time' }),
    actor: Type.String({ description: 'user:<id>, agent, gateway or system' }),
    detail: Type.Union([Type.String(), Type.Null()]),
  },
  { $id: 'CommandEvent' },
);

export const Command = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    instance_id: Type.String({ format: 'uuid' }),
    module: Type.String(),
    command: Type.String(),
    args: Type.Record(Type.String(), Type.Unknown()),
    state: CommandStateSchema,
    created_by: Type.Union([Type.String({ format: 'uuid' }), Type.Null()]),
    created_at: Type.String({ format: 'date-time' }),
    expires_at: Type.String({ format: 'date-time', description: 'a command still queued then expires' }),
    delivered_at: NTime,
    last_delivered_at: NTime,
    ack_deadline: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'a delivered command not acked by then times out' }),
    finished_at: NTime,
    result_message: Type.Union([Type.String(), Type.Null()]),
    result_output: Type.Unknown({ description: 'the agent’s output, as sent (null when none)' }),
    history: Type.Array(CommandEvent, { description: 'every change of state with its time, oldest first' }),
  },
  { $id: 'Command' },
);
export type Command = Static<typeof Command>;

export const CommandList = Type.Object({ items: Type.Array(Command) }, { $id: 'CommandList' });

export const CommandListQuery = Type.Object({
  state: Type.Optional(CommandStateSchema),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
});
