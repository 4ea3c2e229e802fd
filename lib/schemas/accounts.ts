// Read-API models of accounts, customers, members, API tokens, licences, onboarding and support.
import { Type } from '@sinclair/typebox';
import { Slug } from './common.js';
import { SessionUser } from './api.js';

const NTime = Type.Union([Type.String({ format: 'date-time' }), Type.Null()]);
const NString = Type.Union([Type.String(), Type.Null()]);
export const RoleSchema = Type.Union([Type.Literal('owner'), Type.Literal('admin'), Type.Literal('viewer')]);
export const ScopeSchema = Type.Union([Type.Literal('ingest'), Type.Literal('read')]);
export const TierSchema = Type.Union([Type.Literal('free'), Type.Literal('paid')]);

export const CustomerRef = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    slug: Type.String(),
    name: Type.String(),
    role: RoleSchema,
    member: Type.Boolean({ description: 'false: not a member, acting as a system administrator (owner rights)' }),
  },
  { $id: 'CustomerRef' },
);

export const Conversion = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    kind: Type.String({ description: 'signup, first_device, licence_activated' }),
    customer_id: Type.Union([Type.String({ format: 'uuid' }), Type.Null()]),
    customer: NString,
    created_at: Type.String({ format: 'date-time' }),
    value: Type.Record(Type.String(), Type.Unknown()),
  },
  { $id: 'Conversion' },
);

export const Me = Type.Object(
  {
    user: SessionUser,
    email_sha256: Type.String({ description: 'SHA-256 hex of the trimmed, lower-cased e-mail address' }),
    is_system_admin: Type.Boolean(),
    customers: Type.Array(CustomerRef),
    active_customer: Type.Union([CustomerRef, Type.Null()]),
    pending_conversions: Type.Array(Conversion),
  },
  { $id: 'Me' },
);

export const ConversionAckBody = Type.Object(
  { ids: Type.Array(Type.String({ format: 'uuid' }), { minItems: 1, maxItems: 100 }) },
  { $id: 'ConversionAckBody' },
);
export const ConversionAck = Type.Object(
  { ok: Type.Literal(true), acked: Type.Integer({ description: 'how many were acknowledged by this call (0 when repeated)' }) },
  { $id: 'ConversionAck' },
);

export const MyCustomers = Type.Object(
  { items: Type.Array(CustomerRef), active_customer_id: Type.Union([Type.String({ format: 'uuid' }), Type.Null()]) },
  { $id: 'MyCustomers' },
);

export const SwitchCustomerBody = Type.Object(
  {
    customer_id: Type.Optional(Type.String({ format: 'uuid' })),
    customer: Type.Optional(Slug),
  },
  { $id: 'SwitchCustomerBody', description: 'the customer by id or by slug' },
);

export const Member = Type.Object(
  {
    user_id: Type.String({ format: 'uuid' }),
    email: Type.String(),
    username: NString,
    role: RoleSchema,
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Member' },
);
export const MemberList = Type.Object({ items: Type.Array(Member) }, { $id: 'MemberList' });
export const AddMemberBody = Type.Object(
  {
    email: Type.String({ minLength: 3, maxLength: 320 }),
    role: RoleSchema,
    username: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9._-]{1,64}$' })),
  },
  { $id: 'AddMemberBody' },
);
export const AddedMember = Type.Object(
  {
    member: Member,
    created_user: Type.Boolean({ description: 'true: no account had this e-mail; one was created' }),
    initial_password: Type.Optional(Type.String({ description: 'only when the account was created: shown once, to pass on to the teammate' })),
  },
  { $id: 'AddedMember' },
);
export const UpdateMemberBody = Type.Object({ role: RoleSchema }, { $id: 'UpdateMemberBody' });
export const UserIdParams = Type.Object({ user_id: Type.String({ format: 'uuid' }) });

/** A machine slug, or a machine-name pattern (`*` any run, `?` one character; lib/whitelist.ts SLUG_PATTERN_RE). */
const MachineBinding = Type.String({ pattern: '^[a-z0-9*?-]{1,128}$', description: 'a machine slug, or a pattern with * (any run of characters) and ? (one character)' });

export const ApiToken = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    prefix: Type.String({ description: 'the first characters, to recognise the token by' }),
    scopes: Type.Array(ScopeSchema),
    machine: Type.Union([MachineBinding, Type.Null()], { description: 'the machine (or machine-name pattern) the token may post as; null: any machine of the customer' }),
    created_at: Type.String({ format: 'date-time' }),
    created_by: Type.Union([Type.Object({ id: Type.String({ format: 'uuid' }), email: Type.String() }), Type.Null()], {
      description: 'the dashboard user who created it; null: created with the CLI (or before this was recorded), or the user is gone',
    }),
    expires_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'refused from this time on; null: never expires' }),
    last_used_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'last accepted request, to about a minute; null: never used' }),
    revoked_at: NTime,
  },
  { $id: 'ApiToken' },
);
export const ApiTokenList = Type.Object({ items: Type.Array(ApiToken) }, { $id: 'ApiTokenList' });
export const CreateTokenBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 100 })),
    scopes: Type.Optional(Type.Array(ScopeSchema, { minItems: 1, maxItems: 2, uniqueItems: true, description: 'default ["ingest"]' })),
    machine: Type.Optional(Type.Union([MachineBinding, Type.Null()], { description: 'bind the token to this machine or machine-name pattern (ingest scope only)' })),
    expires_at: Type.Optional(Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'refuse the token from this time on (in the future); default: never' })),
  },
  { $id: 'CreateTokenBody' },
);
export const CreatedToken = Type.Composite([ApiToken, Type.Object({ token: Type.String({ description: 'the token itself: shown only in this answer' }) })], {
  $id: 'CreatedToken',
});

export const GracePeriod = Type.Object({
  days: Type.Integer(),
  started_at: NTime,
  ends_at: NTime,
  active: Type.Boolean(),
  expired: Type.Boolean(),
  days_left: Type.Union([Type.Integer(), Type.Null()]),
});

const licenceFields = {
  customer_id: Type.String({ format: 'uuid' }),
  customer: Type.String(),
  tier: TierSchema,
  device_limit: Type.Integer(),
  device_count: Type.Integer({ description: 'machines seen in the last window_days days' }),
  usage_percent: Type.Number(),
  limit_status: Type.Union([Type.Literal('ok'), Type.Literal('warning'), Type.Literal('exceeded')]),
  window_days: Type.Integer(),
  grace_period: GracePeriod,
  new_machines_refused: Type.Boolean({ description: 'the grace period is over: machines new to the customer are refused at ingest' }),
};
export const LicenceStatus = Type.Object(licenceFields, { $id: 'LicenceStatus' });
export const LicenceKey = Type.Object(
  {
    license_key: Type.String(),
    ...licenceFields,
    flagged_machines: Type.Array(
      Type.Object({ machine: Type.String(), first_seen_at: Type.String({ format: 'date-time' }), last_seen_at: Type.String({ format: 'date-time' }), flagged_at: Type.String({ format: 'date-time' }) }),
      { description: 'machines that arrived while the customer was over its limit (newest first, at most 100)' },
    ),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'LicenceKey' },
);
export const SetLicenceBody = Type.Object(
  {
    tier: Type.Optional(TierSchema),
    device_limit: Type.Optional(Type.Integer({ minimum: 0, maximum: 10_000_000 })),
    grace_days: Type.Optional(Type.Integer({ minimum: 0, maximum: 365 })),
  },
  { $id: 'SetLicenceBody', minProperties: 1 },
);

export const OnboardingStep = Type.Object({
  key: Type.String(),
  title: Type.String(),
  hint: Type.String(),
  done: Type.Boolean(),
  done_at: NTime,
});
export const OnboardingStatus = Type.Object(
  {
    steps: Type.Array(OnboardingStep),
    done: Type.Integer(),
    total: Type.Integer(),
    progress: Type.Number({ description: 'done / total, 0 to 1' }),
    percent: Type.Integer(),
    complete: Type.Boolean(),
  },
  { $id: 'OnboardingStatus' },
);

export const SupportChannel = Type.Object({
  kind: Type.Union([Type.Literal('community'), Type.Literal('email'), Type.Literal('phone')]),
  label: Type.String(),
  value: Type.String({ description: 'URL, e-mail address or phone number' }),
  hours: Type.Optional(Type.String()),
});
export const SupportInfo = Type.Object(
  {
    tier: TierSchema,
    channels: Type.Array(SupportChannel),
    contact: Type.Union([Type.Object({ name: Type.String(), email: Type.String(), phone: Type.String() }), Type.Null()]),
  },
  { $id: 'SupportInfo' },
);
