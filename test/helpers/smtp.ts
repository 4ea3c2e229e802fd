// A real SMTP server of a test's own (the smtp-server package, on an ephemeral loopback port, no
// TLS, any login): the api sends its e-mail there, and the test reads each message as received.
import { SMTPServer } from 'smtp-server';
import type { AddressInfo } from 'node:net';
import { eventually } from './stack.js';

export interface ReceivedMail {
  from: string;
  to: string[];
  /** The raw message as the server received it. */
  raw: string;
  subject: string;
  /** The decoded text body. */
  text: string;
  /** When the server received it (ms). */
  at: number;
}

/** Quoted-printable (what nodemailer uses for long or non-ASCII lines) to text. */
function decodeQp(s: string): string {
  const bytes = Buffer.from(s.replace(/=\r?\n/g, ''), 'latin1');
  const out: number[] = [];
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] === 0x3d && i + 2 < bytes.length && /^[0-9A-F]{2}$/i.test(bytes.subarray(i + 1, i + 3).toString('latin1'))) {
      out.push(parseInt(bytes.subarray(i + 1, i + 3).toString('latin1'), 16));
      i += 2;
    } else out.push(bytes[i]!);
  }
  return Buffer.from(out).toString('utf8');
}

/** RFC 2047 encoded words (=?UTF-8?Q?...?= or ?B?) in a header. */
function decodeHeader(v: string): string {
  return v.replace(/=\?([^?]+)\?([QB])\?([^?]*)\?=\s*/gi, (_m, _cs: string, enc: string, text: string) =>
    enc.toUpperCase() === 'B' ? Buffer.from(text, 'base64').toString('utf8') : decodeQp(text.replace(/_/g, ' ')),
  );
}

export function parseMail(raw: string, from: string, to: string[]): ReceivedMail {
  const split = raw.indexOf('\r\n\r\n');
  const head = raw.slice(0, split).replace(/\r\n[ \t]+/g, ' ');
  const body = raw.slice(split + 4);
  const header = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'im').exec(head)?.[1] ?? '';
  const cte = header('Content-Transfer-Encoding').toLowerCase();
  const text = cte === 'quoted-printable' ? decodeQp(body) : cte === 'base64' ? Buffer.from(body, 'base64').toString('utf8') : body;
  return { from, to, raw, subject: decodeHeader(header('Subject')), text: text.replace(/\r\n/g, '\n'), at: Date.now() };
}

export async function smtpServer() {
  const received: ReceivedMail[] = [];
  const make = () =>
    new SMTPServer({
      secure: false,
      disabledCommands: ['STARTTLS'],
      authOptional: true,
      logger: false,
      onData(stream, session, callback) {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          received.push(parseMail(Buffer.concat(chunks).toString('latin1'), session.envelope.mailFrom ? session.envelope.mailFrom.address : '', session.envelope.rcptTo.map((r) => r.address)));
          callback();
        });
      },
    });
  let server: SMTPServer | null = make();
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const port = (server.server.address() as AddressInfo).port;
  const close = () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  return {
    port,
    /** The settings that send a stack's e-mail here (plain SMTP on loopback). */
    env: { SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port), SMTP_STARTTLS: 'off' },
    received,
    /** The first message to `to` (after `after` messages to it), waited for. */
    async mailTo(to: string, after = 0, ms = 15_000): Promise<ReceivedMail> {
      return eventually(async () => received.filter((m) => m.to.includes(to.toLowerCase()) || m.to.includes(to))[after], ms, `e-mail #${after + 1} to ${to}`);
    },
    count: (to: string) => received.filter((m) => m.to.includes(to.toLowerCase()) || m.to.includes(to)).length,
    /** Every message to `to`, in the order received. */
    mailsTo: (to: string) => received.filter((m) => m.to.includes(to.toLowerCase()) || m.to.includes(to)),
    /** The server goes away (connections refused) until `up()`; what it received stays. */
    async down(): Promise<void> {
      await close();
      server = null;
    },
    /** The server back on the same port. */
    async up(): Promise<void> {
      if (server) return;
      server = make();
      await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
    },
    close,
  };
}

/** The token in a message's link (`…#token=<token>`). */
export function linkToken(m: ReceivedMail): string {
  const t = /#token=([A-Za-z0-9_-]+)/.exec(m.text)?.[1];
  if (!t) throw new Error(`no link in the e-mail: ${m.text}`);
  return t;
}
