// Read-API models: what the api process returns. The same schemas document the responses in the
// OpenAPI description.
import { Type, type Static } from '@sinclair/typebox';

const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);
const NString = Nullable(Type.String());
const NTime = Type.Union([Type.String({ format: 'date-time' }), Type.Null()]);
const NInt = Type.Union([Type.Integer(), Type.Null()]);

export const Light = Type.Union([Type.Literal('green'), Type.Literal('yellow'), Type.Literal('late'), Type.Literal('red'), Type.Literal('grey'), Type.Literal('maintenance')], {
  description: 'traffic light, derived from the last receive time (against the deadline and late time), the latest status and recent warnings',
});
export type Light = Static<typeof Light>;

export const Instance = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    machine_id: Type.String({ format: 'uuid' }),
    machine: Type.String(),
    software: Type.String(),
    light: Light,
    light_reason: Type.String(),
    light_since: Type.String({ format: 'date-time', description: 'since when the instance has this colour' }),
    first_seen_at: Type.String({ format: 'date-time' }),
    last_seen_at: Type.String({ format: 'date-time' }),
    last_heartbeat_at: NTime,
    version: NString,
    uptime_seconds: NInt,
    pid: NInt,
    ip_addresses: Type.Array(Type.String()),
    group: NString,
    location: NString,
    group_priority: NInt,
    sort_priority: NInt,
    status: NString,
    status_message: NString,
    status_at: NTime,
    agent_ts: { ...NTime, description: "the agent's clock at its newest heartbeat whose ts was plausible (docs/api.md \"Agent clocks\")" },
    clock_skew: Type.Boolean({ description: "the newest heartbeat's ts lay outside the plausible window: the agent's clock is wrong (the light uses receive time)" }),
    timeout_s: Type.Integer({ description: "seconds of silence before red: the instance's timeout rule, else HEARTBEAT_TIMEOUT_S (docs/api.md \"Timeout rules\")" }),
    late_percent: Type.Integer({ description: 'per cent of the timeout after which a silent instance turns late (0: never late)' }),
    deadline: { ...NTime, description: 'when the instance turns red if no heartbeat comes first (null: never sent one, or retired)' },
    late_at: { ...NTime, description: 'when it turns late if no heartbeat comes first (null: no late colour, never sent one, or retired)' },
    maintenance_until: { ...NTime, description: 'in a maintenance window until then (null: not in one); its deadline starts again there' },
  },
  { $id: 'Instance' },
);
export type Instance = Static<typeof Instance>;

export const InstanceDetail = Type.Composite(
  [
    Instance,
    Type.Object({
      snapshot: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
      retired_at: { ...NTime, description: 'when the instance (or its machine) was retired: it is no longer listed or counted, its light stays grey (docs/api.md "Decommissioning")' },
    }),
  ],
  { $id: 'InstanceDetail' },
);

/** Keys `GET /api/instances?sort=` understands (lib/store/instance-order.ts); `-key` sorts descending. */
export const INSTANCE_SORT_KEYS = ['group', 'group_priority', 'sort_priority', 'location', 'machine', 'software', 'light', 'status', 'last_seen', 'first_seen'] as const;
export const INSTANCE_GROUP_KEYS = ['group', 'location', 'machine', 'software'] as const;
const sortKey = `-?(${INSTANCE_SORT_KEYS.join('|')})`;

export const InstanceGroup = Type.Object({
  key: Type.Union([Type.String(), Type.Null()], { description: 'the group (or location, machine, software); null: instances without one' }),
  count: Type.Integer({ description: 'instances of this group on this page' }),
  items: Type.Array(Instance),
});

export const InstanceList = Type.Object(
  {
    items: Type.Array(Instance, { description: 'the page, in the requested order' }),
    total: Type.Integer({ description: 'instances matching the filters (all pages); cached per customer and filter for up to API_COUNT_CACHE_MS (default 1 s)' }),
    next: Type.Optional(
      Type.Union([Type.String(), Type.Null()], { description: 'cursor of the next page (pass it as `after` with the same filters and sort); null on the last page' }),
    ),
    groups: Type.Optional(Type.Array(InstanceGroup, { description: 'with group_by: the same page, split into groups in order' })),
  },
  { $id: 'InstanceList' },
);

/** The filters of the instance list that the fleet summary takes too (counts of the same rows). */
const instanceFilters = {
  machine: Type.Optional(Type.String({ description: 'only the instances of this machine (its exact name)' })),
  software: Type.Optional(Type.String()),
  group: Type.Optional(Type.String({ description: 'only instances of this heartbeat group' })),
  location: Type.Optional(Type.String({ description: 'only instances at this location' })),
  q: Type.Optional(Type.String({ maxLength: 200, description: 'only instances whose machine name contains this text (any case)' })),
};

export const FleetSummaryQuery = Type.Object(instanceFilters);

export const InstanceListQuery = Type.Object({
  light: Type.Optional(Light),
  ...instanceFilters,
  sort: Type.Optional(
    Type.String({
      pattern: `^${sortKey}(,${sortKey}){0,9}$`,
      description:
        `comma-separated sort keys (${INSTANCE_SORT_KEYS.join(', ')}), \`-\` before a key for descending; missing values last; ` +
        'default machine,software; e.g. group,group_priority,sort_priority,location,machine',
    }),
  ),
  group_by: Type.Optional(
    Type.Union(
      INSTANCE_GROUP_KEYS.map((k) => Type.Literal(k)),
      { description: 'also return the page split into groups (`groups`); rows are ordered by group first (groups by lowest group_priority, then name), then by `sort`' },
    ),
  ),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000, default: 1000 })),
  offset: Type.Optional(Type.Integer({ minimum: 0, default: 0 })),
  after: Type.Optional(
    Type.String({ maxLength: 8000, description: "keyset paging: the previous page's `next`; the rows after its last row in the same sort (not with offset or group_by)" }),
  ),
});

export const Diagnostic = Type.Object(
  {
    report_id: Type.String(),
    item: Type.Integer(),
    received_at: Type.String({ format: 'date-time' }),
    ts: Type.String({ format: 'date-time' }),
    code: Type.Integer(),
    severity: Type.Integer(),
    message: Type.String(),
    suppressed: Type.Boolean(),
    rule_id: NString,
  },
  { $id: 'Diagnostic' },
);

export const DiagnosticList = Type.Object({ items: Type.Array(Diagnostic) }, { $id: 'DiagnosticList' });

export const DiagnosticsQuery = Type.Object({
  from: Type.Optional(Type.String({ format: 'date-time' })),
  to: Type.Optional(Type.String({ format: 'date-time' })),
  severity: Type.Optional(Type.Integer({ minimum: 0, maximum: 2, description: 'minimum severity' })),
  suppressed: Type.Optional(
    Type.Union([Type.Literal('exclude'), Type.Literal('include'), Type.Literal('only')], {
      description: 'diagnostics suppressed by a whitelist rule: exclude (default), include, or only those',
    }),
  ),
  code: Type.Optional(Type.Integer({ description: 'only this code' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000, default: 500 })),
});

export const IdParams = Type.Object({ id: Type.String({ format: 'uuid' }) });

export const LoginBody = Type.Object(
  {
    email: Type.Optional(Type.String({ maxLength: 320, description: 'e-mail address (or, for older accounts, the user name)' })),
    username: Type.Optional(Type.String({ maxLength: 64, description: 'user name, still accepted' })),
    login: Type.Optional(Type.String({ maxLength: 320, description: 'e-mail address or user name' })),
    password: Type.String({ minLength: 1, maxLength: 1024 }),
  },
  { $id: 'LoginBody' },
);

export const SessionUser = Type.Object({
  id: Type.String({ format: 'uuid' }),
  email: Type.String(),
  username: Type.Union([Type.String(), Type.Null()]),
  is_system_admin: Type.Boolean(),
});

export const ActiveCustomer = Type.Union([
  Type.Object({ id: Type.String({ format: 'uuid' }), slug: Type.String(), role: Type.String() }),
  Type.Null(),
]);

export const Session = Type.Object(
  {
    token: Type.String({ description: 'JWT; also set as the HttpOnly cookie fleet_session' }),
    token_type: Type.Literal('Bearer'),
    expires_at: Type.String({ format: 'date-time' }),
    user: SessionUser,
    customer: ActiveCustomer,
  },
  { $id: 'Session' },
);
