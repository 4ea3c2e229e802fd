// Maintenance windows (docs/api.md "Maintenance windows"): what an admin defines, and the list
// with each window's current or next occurrence. The rules of occurrences: lib/domain/maintenance.ts.
import { Type, type Static } from '@sinclair/typebox';
import { Text } from './common.js';

const Time = Type.String({ format: 'date-time' });
const NTime = Type.Union([Time, Type.Null()]);
const NId = Type.Union([Type.String({ format: 'uuid' }), Type.Null()]);

export const MaintenanceScope = Type.Union([Type.Literal('customer'), Type.Literal('machine'), Type.Literal('software'), Type.Literal('instance')], {
  description: 'what the window covers: every instance of the customer, those of one machine, those whose software matches a pattern, or one instance',
});
export const Weekday = Type.Union(
  ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'].map((d) => Type.Literal(d)),
  { description: 'a local weekday' },
);

export const Recurrence = Type.Object(
  {
    time_zone: Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone (Europe/Berlin); the start time and weekdays are local to it' }),
    start_time: Type.String({ pattern: '^([01][0-9]|2[0-3]):[0-5][0-9]$', description: 'local start time, HH:MM. One that a spring-forward change skips starts when the gap ends; one a fall-back change repeats starts at the earlier instant' }),
    duration_minutes: Type.Integer({ minimum: 1, maximum: 7 * 1440, description: 'elapsed minutes; at most the shortest distance between two of the weekdays (7 days for one) less 2 hours: daily at most 1320' }),
    days: Type.Array(Weekday, { minItems: 1, maxItems: 7, uniqueItems: true, description: 'the local weekdays it starts on; all seven: daily' }),
    valid_from: Type.Optional(NTime),
    valid_until: Type.Optional(NTime),
  },
  { additionalProperties: false, description: 'a recurring window; occurrences start within [valid_from, valid_until)' },
);

export const MaintenanceWindowBody = Type.Object(
  {
    scope: MaintenanceScope,
    machine_id: Type.Optional(Type.String({ format: 'uuid', description: 'scope machine: one of the customer’s machines' })),
    instance_id: Type.Optional(Type.String({ format: 'uuid', description: 'scope instance: one of the customer’s instances' })),
    software_pattern: Type.Optional(
      Type.String({ pattern: '^[a-z0-9*-]{1,128}$', description: 'scope software: `*` matches any run of characters, everything else itself (`db-*`), against the software name' }),
    ),
    starts_at: Type.Optional(Type.String({ format: 'date-time', description: 'a one-off window: its start (with ends_at)' })),
    ends_at: Type.Optional(Type.String({ format: 'date-time', description: 'a one-off window: its end, after starts_at, at most 31 days later' })),
    recurrence: Type.Optional(Recurrence),
    description: Type.Optional(Text({ maxLength: 256 })),
  },
  { $id: 'MaintenanceWindowBody', additionalProperties: false, description: 'a one-off window (starts_at, ends_at) or a recurring one (recurrence), never both' },
);
export type MaintenanceWindowBody = Static<typeof MaintenanceWindowBody>;

export const MaintenanceOccurrence = Type.Object(
  {
    starts_at: Time,
    ends_at: Time,
    in_progress: Type.Boolean({ description: 'it covers the time of the answer' }),
  },
  { description: 'the occurrence in progress, else the next one' },
);

export const MaintenanceWindow = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    scope: MaintenanceScope,
    machine_id: Type.Union([Type.String({ format: 'uuid' }), Type.Null()], { description: 'scope machine, and the machine of scope instance' }),
    machine: Type.Union([Type.String(), Type.Null()], { description: "that machine's name" }),
    instance_id: NId,
    software: Type.Union([Type.String(), Type.Null()], { description: "scope instance: the instance's software" }),
    software_pattern: Type.Union([Type.String(), Type.Null()]),
    kind: Type.Union([Type.Literal('once'), Type.Literal('recurring')]),
    starts_at: NTime,
    ends_at: NTime,
    recurrence: Type.Union([
      Type.Object({
        time_zone: Type.String(),
        start_time: Type.String(),
        duration_minutes: Type.Integer(),
        days: Type.Array(Weekday),
        valid_from: NTime,
        valid_until: NTime,
      }),
      Type.Null(),
    ]),
    description: Type.String(),
    created_at: Time,
    next: Type.Union([MaintenanceOccurrence, Type.Null()], { description: 'null: no occurrence left (a one-off window that ended, a recurring one past valid_until)' }),
  },
  { $id: 'MaintenanceWindow' },
);
export type MaintenanceWindow = Static<typeof MaintenanceWindow>;

export const MaintenanceWindowList = Type.Object({ items: Type.Array(MaintenanceWindow), now: Time }, { $id: 'MaintenanceWindowList' });
