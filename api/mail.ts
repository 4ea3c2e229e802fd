// E-mail: the one module that sends it (nodemailer over SMTP, configured by SMTP_* and MAIL_FROM,
// lib/infra/config.ts) and the texts of every message, in German and English. Invitations and password
// resets use it now; notifications later.
//
// Not configured (SMTP_HOST empty): nothing is sent; the message, link included, is written to the
// process's log at level warn, for the operator to pass on (docs/operations.md "E-mail"). Callers
// never wait for a send on a request path they must answer in constant time (resets): they start
// it and record the outcome.
import nodemailer, { type Transporter } from 'nodemailer';
import type { Config } from '../lib/infra/config.js';
import type { Logger } from '../lib/infra/log.js';

export type Lang = 'de' | 'en';
export const LANGS: Lang[] = ['de', 'en'];

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
}

/** What became of one message. */
export type MailOutcome = 'sent' | 'logged';

export class Mailer {
  private transport: Transporter | null = null;

  constructor(
    private readonly cfg: Config['mail'],
    private readonly log: Logger,
  ) {}

  get configured(): boolean {
    return this.cfg.host !== '';
  }

  private transporter(): Transporter {
    if (!this.transport) {
      const c = this.cfg;
      this.transport = nodemailer.createTransport({
        host: c.host,
        port: c.port,
        secure: c.secure,
        requireTLS: !c.secure && c.starttls === 'required',
        ignoreTLS: !c.secure && c.starttls === 'off',
        auth: c.user ? { user: c.user, pass: c.password } : undefined,
        connectionTimeout: c.timeoutMs,
        greetingTimeout: c.timeoutMs,
        socketTimeout: c.timeoutMs,
      });
    }
    return this.transport;
  }

  /** Sends one message; resolves 'logged' when no SMTP server is configured. Throws when the server refused it or could not be reached. */
  async send(m: MailMessage): Promise<MailOutcome> {
    if (!this.configured) {
      this.log.warn({ to: m.to, subject: m.subject, text: m.text }, 'e-mail not sent: SMTP_HOST is not set; pass this message on by hand');
      return 'logged';
    }
    await this.transporter().sendMail({ from: this.cfg.from, to: m.to, subject: m.subject, text: m.text });
    return 'sent';
  }

  close(): void {
    this.transport?.close();
  }
}

export const langOf = (v: string | null | undefined): Lang => (v && v.toLowerCase().startsWith('de') ? 'de' : 'en');

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
