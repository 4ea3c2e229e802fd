// What the API returns, typed from the same TypeBox schemas the server validates and documents with
// (type-only imports: nothing of the server ends up in the bundle). A schema change that the
// dashboard does not follow fails the dashboard's type check.
import type { Static } from '@sinclair/typebox';
import type * as Api from '../../lib/contract/schemas/api.js';
import type * as Acc from '../../lib/contract/schemas/accounts.js';
import type * as Wl from '../../lib/contract/schemas/whitelist.js';
import type * as Help from '../../lib/contract/schemas/help.js';
import type * as St from '../../lib/contract/schemas/status.js';
import type * as TL from '../../lib/contract/schemas/traffic-light.js';
import type * as Met from '../../lib/contract/schemas/metrics.js';
import type * as Art from '../../lib/contract/schemas/artifacts.js';
import type * as Cmd from '../../lib/contract/schemas/commands.js';
import type * as DL from '../../lib/contract/schemas/dead-letters.js';
import type * as Notify from '../../lib/contract/schemas/notifications.js';
import type * as Maint from '../../lib/contract/schemas/maintenance.js';
import type * as TR from '../../lib/contract/schemas/timeout-rules.js';

export type Light = Static<typeof Api.Light>;
export type Instance = Static<typeof Api.Instance>;
export type InstanceList = Omit<Static<typeof Api.InstanceList>, 'items' | 'groups'> & {
  items: Instance[];
  groups?: { key: string | null; count: number; items: Instance[] }[];
};
export type InstanceDetail = Instance & { snapshot: Record<string, unknown> | null; retired_at?: string | null };
export type Diagnostic = Static<typeof Api.Diagnostic>;
export type Session = Static<typeof Api.Session>;
export type Me = Static<typeof Acc.Me>;
export type CustomerRef = Static<typeof Acc.CustomerRef>;
export type MyCustomers = Static<typeof Acc.MyCustomers>;
export type ApiToken = Static<typeof Acc.ApiToken>;
export type CreatedToken = Static<typeof Acc.CreatedToken>;
export type LicenceStatus = Static<typeof Acc.LicenceStatus>;
export type OnboardingStatus = Static<typeof Acc.OnboardingStatus>;
export type SupportInfo = Static<typeof Acc.SupportInfo>;
export type Member = Static<typeof Acc.Member>;
export type Invitation = Static<typeof Acc.Invitation>;
export type InvitationInfo = Static<typeof Acc.InvitationInfo>;
export type AcceptedInvitation = Static<typeof Acc.AcceptedInvitation>;
export type WhitelistRule = Static<typeof Wl.WhitelistRule>;
export type WhitelistRuleInput = Static<typeof Wl.WhitelistRuleInput>;
export type HelpText = Static<typeof Help.HelpText>;
export type InstanceStatus = Static<typeof St.InstanceStatus>;
export type Role = 'owner' | 'admin' | 'viewer';

/** A change of an instance's colour (GET /api/instances/{id}/events, the live stream). */
export type LightEvent = Static<typeof TL.LightEvent>;
export type FleetSummary = Static<typeof TL.FleetSummary>;
/** A webhook; `secret` only in the answer that created it. */
export type Webhook = Static<typeof TL.Webhook> & { secret?: string };
export type WebhookDelivery = Static<typeof TL.WebhookDelivery>;
/** The caller's e-mail notifications in the active customer. */
export type EmailNotifications = Static<typeof Notify.EmailNotifications>;
export type MailKind = Notify.MailKind;
export type MetricName = Static<typeof Met.MetricName>;
export type MetricSeries = Static<typeof Met.MetricSeries>;
export type Artifact = Static<typeof Art.Artifact>;

export type CommandState = Static<typeof Cmd.CommandStateSchema>;
export type AvailableCommand = Static<typeof Cmd.AvailableCommand>;
export type Command = Static<typeof Cmd.Command>;

/** The dead-letter stream (system administrators). */
export type DeadLetter = Static<typeof DL.DeadLetter>;
export type DeadLetterList = Static<typeof DL.DeadLetterList>;
export type DeadLetterDetail = Static<typeof DL.DeadLetterDetail>;
export type ReplayAnswer = Static<typeof DL.ReplayAnswer>;

/** A maintenance window with its current or next occurrence (GET /api/maintenance-windows). */
export type MaintenanceWindow = Static<typeof Maint.MaintenanceWindow>;

/** Timeout rules (docs/api.md "Timeout rules"). */
export type TimeoutRule = Static<typeof TR.TimeoutRule>;
export type TimeoutRuleList = Static<typeof TR.TimeoutRuleList>;
export type TimeoutRuleInput = Static<typeof TR.TimeoutRuleInput>;
export type TimeoutRuleUpdate = Static<typeof TR.TimeoutRuleUpdate>;
export type TimeoutRuleChanged = Static<typeof TR.TimeoutRuleChanged>;
