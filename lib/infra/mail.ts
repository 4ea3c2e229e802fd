// E-mail: the one module that sends it (nodemailer over SMTP, configured by SMTP_* and MAIL_FROM,
// lib/infra/config.ts), for the api (invitations and password resets; their texts are api/mail.ts) and
// the workers (digests of traffic-light changes, workers/mail-digest.ts).
//
// Not configured (SMTP_HOST empty): nothing is sent; the message, link included, is written to the
// process's log at level warn, for the operator to pass on (docs/operations.md "E-mail"). Callers
// never wait for a send on a request path they must answer in constant time (resets): they start
// it and record the outcome.
import nodemailer, { type Transporter } from 'nodemailer';
import type { Config } from './config.js';
import type { Logger } from './log.js';

export type Lang = 'de' | 'en';
export const LANGS: Lang[] = ['de', 'en'];

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  /** Extra header fields (List-Unsubscribe, ...). */
  headers?: Record<string, string>;
  /** The Message-ID (`<…@…>`); nodemailer makes one when absent. */
  messageId?: string;
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
    await this.transporter().sendMail({ from: this.cfg.from, to: m.to, subject: m.subject, text: m.text, headers: m.headers, messageId: m.messageId });
    return 'sent';
  }

  close(): void {
    this.transport?.close();
  }
}

export const langOf = (v: string | null | undefined): Lang => (v && v.toLowerCase().startsWith('de') ? 'de' : 'en');
