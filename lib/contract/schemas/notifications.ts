// E-mail notifications of traffic-light changes (docs/operations.md "E-mail notifications"): a
// user's subscription in one customer, as the read API answers and takes it, and the unsubscribe link.
import { Type, type Static } from '@sinclair/typebox';

/**
 * What a subscription can ask for. Each kind is a kind of change of an instance's traffic light:
 * `red` (turned red), `late` (turned late: its heartbeat is overdue), `yellow` (turned yellow),
 * `green` (recovered: from red, late or yellow to green), `maintenance` (a maintenance window began
 * for it). More kinds are added here, in the kind function (lib/domain/notifications.ts) and in
 * the table's CHECK (a migration).
 */
export const MAIL_KINDS = ['red', 'late', 'yellow', 'green', 'maintenance'] as const;
export type MailKind = (typeof MAIL_KINDS)[number];

const Kind = Type.Union(
  MAIL_KINDS.map((k) => Type.Literal(k)),
  { description: 'red: an instance turned red; late: turned late (heartbeat overdue); yellow: turned yellow; green: recovered (from red, late or yellow to green); maintenance: a maintenance window began for it' },
);
const Lang = Type.Union([Type.Literal('de'), Type.Literal('en')], { description: 'language of the e-mails' });

export const EmailNotifications = Type.Object(
  {
    customer: Type.String({ description: 'the active customer (slug) the subscription is for' }),
    email: Type.String({ description: 'where the e-mails go: the address of the account' }),
    kinds: Type.Array(Kind, { uniqueItems: true, description: 'what is mailed; empty: nothing (unsubscribed)' }),
    lang: Lang,
    available_kinds: Type.Array(Kind, { description: 'every kind this server knows' }),
    digest_interval_s: Type.Integer({ description: 'changes are collected and mailed at most once per this many seconds (MAIL_DIGEST_INTERVAL_S)' }),
  },
  { $id: 'EmailNotifications' },
);
export type EmailNotificationsBody = Static<typeof EmailNotifications>;

export const EmailNotificationsInput = Type.Object(
  {
    kinds: Type.Array(Kind, { uniqueItems: true, maxItems: MAIL_KINDS.length, description: 'what to mail; [] turns the e-mails off' }),
    lang: Type.Optional(Lang),
  },
  { $id: 'EmailNotificationsInput', description: 'lang: default the stored one, else the Accept-Language of the request, else en' },
);

export const UnsubscribeQuery = Type.Object(
  { token: Type.String({ minLength: 1, maxLength: 200, description: 'the token from the link in the e-mail' }) },
);
