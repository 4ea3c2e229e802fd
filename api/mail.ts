// The texts of the api's e-mails (invitations, password resets), in German and English. Sending is
// lib/infra/mail.ts (`Mailer`), which the workers' digests of traffic-light changes use too.
import type { Lang, MailMessage } from '../lib/infra/mail.js';

export { Mailer, LANGS, langOf, type Lang, type MailMessage, type MailOutcome } from '../lib/infra/mail.js';

const ROLE_NAMES: Record<Lang, Record<string, string>> = {
  de: { owner: 'Eigentümer', admin: 'Administrator', viewer: 'Betrachter' },
  en: { owner: 'owner', admin: 'admin', viewer: 'viewer' },
};

const dateOf = (d: Date, lang: Lang) =>
  d.toLocaleString(lang === 'de' ? 'de-DE' : 'en-GB', { dateStyle: 'long', timeStyle: 'short', timeZone: 'UTC' }) + ' UTC';

/** The texts of every message, by language. */
export const messages = {
  invitation(lang: Lang, v: { to: string; customer: string; inviter: string; role: string; link: string; expiresAt: Date }): MailMessage {
    const role = ROLE_NAMES[lang][v.role] ?? v.role;
    if (lang === 'de') {
      return {
        to: v.to,
        subject: `Einladung zu ${v.customer}`,
        text:
          `Hallo,\n\n${v.inviter} lädt Sie ein, ${v.customer} im Flottenüberblick als ${role} mitzuverwalten.\n\n` +
          `Einladung annehmen:\n${v.link}\n\n` +
          `Haben Sie noch kein Konto, legen Sie dort Ihr Passwort fest. Haben Sie schon eines, melden Sie sich an und nehmen die Einladung an.\n` +
          `Der Link gilt bis ${dateOf(v.expiresAt, lang)} und nur einmal.\n\n` +
          `Erwarten Sie diese Einladung nicht, können Sie diese E-Mail ignorieren.\n`,
      };
    }
    return {
      to: v.to,
      subject: `Invitation to ${v.customer}`,
      text:
        `Hello,\n\n${v.inviter} invites you to help manage ${v.customer} in the fleet dashboard as ${role}.\n\n` +
        `Accept the invitation:\n${v.link}\n\n` +
        `Without an account yet, you choose your password there. With one, you log in and accept.\n` +
        `The link works once, until ${dateOf(v.expiresAt, lang)}.\n\n` +
        `If you did not expect this invitation, ignore this e-mail.\n`,
    };
  },

  passwordReset(lang: Lang, v: { to: string; link: string; expiresAt: Date }): MailMessage {
    if (lang === 'de') {
      return {
        to: v.to,
        subject: 'Passwort zurücksetzen',
        text:
          `Hallo,\n\nfür Ihr Konto im Flottenüberblick wurde ein neues Passwort angefordert. Legen Sie es hier fest:\n${v.link}\n\n` +
          `Der Link gilt bis ${dateOf(v.expiresAt, lang)} und nur einmal; danach sind alle Ihre Sitzungen abgemeldet.\n` +
          `Haben Sie nichts angefordert, ignorieren Sie diese E-Mail: Ihr Passwort bleibt, wie es ist.\n`,
      };
    }
    return {
      to: v.to,
      subject: 'Reset your password',
      text:
        `Hello,\n\nsomeone asked for a new password for your fleet dashboard account. Choose it here:\n${v.link}\n\n` +
        `The link works once, until ${dateOf(v.expiresAt, lang)}; afterwards every session of yours is signed out.\n` +
        `If you did not ask for this, ignore this e-mail: your password stays as it is.\n`,
    };
  },
};
