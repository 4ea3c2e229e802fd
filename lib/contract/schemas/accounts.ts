// Read-API models of accounts, customers, members, API tokens, licences, onboarding and support.
import { Type } from '@sinclair/typebox';
import { Slug } from './common.js';
import { Session, SessionUser } from './api.js';

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
export const UpdateMemberBody = Type.Object({ role: RoleSchema }, { $id: 'UpdateMemberBody' });
export const UserIdParams = Type.Object({ user_id: Type.String({ format: 'uuid' }) });

/** A machine slug, or a machine-name pattern (`*` any run, `?` one character; lib/contract/schemas/common.ts SLUG_PATTERN_RE). */
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

// The account life cycle: invitations, sessions, passwords (api/handlers/invitations.ts, sessions.ts).
const LangSchema = Type.Union([Type.Literal('de'), Type.Literal('en')]);
const Password = (description: string) => Type.String({ minLength: 1, maxLength: 1024, description });
const LinkToken = Type.String({ minLength: 1, maxLength: 200, description: 'the token from the link in the e-mail (after #token=)' });

export const InviteBody = Type.Object(
  {
    email: Type.String({ minLength: 3, maxLength: 320 }),
    role: RoleSchema,
    lang: Type.Optional(LangSchema),
  },
  { $id: 'InviteBody', description: 'lang: the language of the e-mail (default: the Accept-Language of the request, else en)' },
);
export const Invitation = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    email: Type.String(),
    role: RoleSchema,
    lang: LangSchema,
    status: Type.Union([Type.Literal('pending'), Type.Literal('expired')], { description: 'expired: resend it for a new link' }),
    created_at: Type.String({ format: 'date-time' }),
    expires_at: Type.String({ format: 'date-time' }),
    sent_at: NTime,
    send_count: Type.Integer(),
    mail_status: Type.Union([Type.Literal('pending'), Type.Literal('sent'), Type.Literal('logged'), Type.Literal('failed')], {
      description: 'pending: being sent; sent: the SMTP server took it; logged: no SMTP server configured, the link is in the api log; failed: the SMTP server refused it or was unreachable (resend)',
    }),
    invited_by: NString,
  },
  { $id: 'Invitation' },
);
export const InvitationAnswer = Type.Object({ invitation: Invitation }, { $id: 'InvitationAnswer' });
export const InvitationList = Type.Object({ items: Type.Array(Invitation) }, { $id: 'InvitationList' });
export const InvitationTokenBody = Type.Object({ token: LinkToken }, { $id: 'InvitationTokenBody' });
export const InvitationInfo = Type.Object(
  {
    customer: Type.Object({ slug: Type.String(), name: Type.String() }),
    email: Type.String(),
    role: RoleSchema,
    expires_at: Type.String({ format: 'date-time' }),
    has_account: Type.Boolean({ description: 'true: log in with this address, then accept; false: choose a password' }),
  },
  { $id: 'InvitationInfo' },
);
export const AcceptInvitationBody = Type.Object(
  { token: LinkToken, password: Type.Optional(Password('for an address without an account: the password of the new account')) },
  { $id: 'AcceptInvitationBody' },
);
export const AcceptedInvitation = Type.Composite([Session, Type.Object({ created_account: Type.Boolean() })], { $id: 'AcceptedInvitation' });

export const SessionsEnded = Type.Object(
  { ok: Type.Literal(true), sessions_ended: Type.Integer({ description: 'how many sessions this ended' }) },
  { $id: 'SessionsEnded' },
);
export const ChangePasswordBody = Type.Object(
  { current_password: Password('the password now'), new_password: Password('the new password (docs/operations.md "Password rules")') },
  { $id: 'ChangePasswordBody' },
);
export const PasswordResetBody = Type.Object(
  { email: Type.String({ minLength: 3, maxLength: 320 }), lang: Type.Optional(LangSchema) },
  { $id: 'PasswordResetBody', description: 'lang: the language of the e-mail (default: the Accept-Language of the request, else en)' },
);
export const PasswordResetRequested = Type.Object({ ok: Type.Literal(true), detail: Type.String() }, { $id: 'PasswordResetRequested' });
export const PasswordResetConfirmBody = Type.Object({ token: LinkToken, new_password: Password('the new password') }, { $id: 'PasswordResetConfirmBody' });

/** A customer being deleted (DELETE /api/admin/customers/{id}; docs/operations.md "Offboarding a customer"). */
export const CustomerDeletion = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    slug: Type.String(),
    state: Type.Literal('deleting', { description: 'marked: gone for every reader; its data is removed by the offboarding job' }),
    deleting_since: Type.String({ format: 'date-time' }),
    purge_after: Type.String({ format: 'date-time', description: 'when the job removes its data (deleting_since + OFFBOARD_GRACE_S); a run that fails is repeated' }),
  },
  { $id: 'CustomerDeletion' },
);
