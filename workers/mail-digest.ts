// E-mail notifications of traffic-light changes (docs/operations.md "E-mail notifications").
//
// The way a change travels: it is recorded with its outbox row (workers/traffic-light.ts); its
// delivery from the outbox queues one `mail_pending` row per subscription that asks for its kind
// (lib/store/mail-notifications.ts `queueMailNotifications`) before the change leaves the outbox,
// so a change is queued at least once, and a copy of it (the outbox delivered twice) is dropped by
// the row's key. A scheduled job (workers/jobs.ts, queue `mail-digest`, every MAIL_DIGEST_TICK_MS)
// then sends each subscription's waiting changes as one digest once they have waited
// MAIL_DIGEST_INTERVAL_S, and at most one digest per subscription per interval: a fleet that turns
// red at once is one mail per subscriber, not one per instance.
//
// One sender in the cluster: the run holds a Postgres advisory lock (like the light sweep), so
// MAIL_RATE_PER_S is the rate of all workers together. Fair between customers: due digests are
// taken round-robin by customer (lib/store/mail-notifications.ts `dueDigests`).
//
// After a send the digest's changes are marked sent (kept a day, so a copy of a change delivered
// again is not mailed again). A send that fails leaves them waiting, and the subscription is tried
// again after the interval, doubling with each failure (at most 15 minutes): an SMTP server that is
// down delays mail, it loses none and doubles none. Only a worker that dies between the SMTP
// server's acceptance and the commit that follows it (milliseconds) makes the next run send that
// digest again, with the same Message-ID.
import { createHash } from 'node:crypto';
import type { Pool } from '../lib/infra/postgres.js';
import type { Logger } from '../lib/infra/log.js';
import type { Lang, Mailer, MailMessage, MailOutcome } from '../lib/infra/mail.js';
import type { MailKind } from '../lib/contract/schemas/notifications.js';
import {
  digestFailed,
  dueDigests,
  loadDigest,
  pruneFormerMembers,
  pruneSentMail,
  releaseMailDigestLock,
  settleWaiting,
  tryMailDigestLock,
  type Digest,
} from '../lib/store/mail-notifications.js';
import type { RunResult } from './jobs.js';

export interface DigestOptions {
  intervalS: number;
  ratePerS: number;
  maxLines: number;
  /** PUBLIC_DASHBOARD_URL, without a trailing slash. */
  dashboardUrl: string;
}

/** What became of one digest (fleet_worker_mail_digests_total). */
export type DigestOutcome = MailOutcome | 'failed' | 'dropped';

/** A run sends for at most this long, then leaves the rest to the next run (shutdown stays quick). */
const RUN_BUDGET_MS = 30_000;
/** Mailed changes are remembered this long (a copy delivered again is not mailed again). */
const KEEP_SENT_S = 86_400;
const PRUNE_EVERY_MS = 60_000;
const MAX_RETRY_S = 900;

export class MailDigests {
  private nextSlot = 0;
  private stopping = false;
  private prunedAt = 0;

  constructor(
    private readonly pool: Pool,
    private readonly mailer: Mailer,
    private readonly opts: DigestOptions,
    private readonly log: Logger,
    private readonly onOutcome: (o: DigestOutcome) => void = () => {},
  ) {}

  stop(): void {
    this.stopping = true;
  }

  /** One run: sends what is due, paced to MAIL_RATE_PER_S; skipped while another worker's run holds the lock. */
  async run(): Promise<RunResult> {
    const out: RunResult = { sent: 0, failed: 0, dropped: 0, pruned: 0, former_members: 0 };
    const lockClient = await this.pool.connect();
    try {
      if (!(await tryMailDigestLock(lockClient))) return out;
      try {
        const until = Date.now() + RUN_BUDGET_MS;
        // About a second of sends per query: the next query takes in what became due meanwhile, fairly.
        const batch = this.opts.ratePerS;
        rounds: while (!this.stopping && Date.now() < until) {
          const due = await dueDigests(this.pool, this.opts.intervalS, batch);
          if (due.length === 0) break;
          for (const d of due) {
            if (this.stopping || Date.now() >= until) break rounds;
            const digest = await loadDigest(this.pool, d);
            if (!digest) {
              out.dropped!++;
              this.onOutcome('dropped');
              continue;
            }
            await this.pace();
            let outcome: MailOutcome;
            try {
              outcome = await this.mailer.send(digestMessage(digest, this.opts));
            } catch (e) {
              const failures = await digestFailed(this.pool, d, (n) => this.retryS(n));
              out.failed!++;
              this.onOutcome('failed');
              const code = (e as { responseCode?: number }).responseCode;
              this.log.warn({ err: e, userId: d.user_id, customerId: d.customer_id, changes: digest.lines.length, failures, responseCode: code }, 'notification e-mail not sent; its changes wait and it is tried again later');
              // The server refused this recipient (5xx): the others may still go. Anything else (no
              // connection, a timeout, a 4xx) is the server's trouble: the next run tries again.
              if (code !== undefined && code >= 500) continue;
              break rounds;
            }
            await settleWaiting(this.pool, d, digest.lines.map((l) => l.event_id));
            out.sent!++;
            this.onOutcome(outcome);
          }
          if (due.length < batch) break;
        }
        if (Date.now() - this.prunedAt >= PRUNE_EVERY_MS) {
          out.pruned = await pruneSentMail(this.pool, KEEP_SENT_S);
          out.former_members = await pruneFormerMembers(this.pool);
          this.prunedAt = Date.now();
        }
      } finally {
        await releaseMailDigestLock(lockClient);
      }
    } finally {
      lockClient.release();
    }
    return out;
  }

  /** The interval, doubled with each failure in a row, at most 15 minutes. */
  private retryS(failures: number): number {
    return Math.min(MAX_RETRY_S, this.opts.intervalS * 2 ** Math.min(failures - 1, 20));
  }

  /** Waits for the next send slot: at most MAIL_RATE_PER_S sends per second. */
  private async pace(): Promise<void> {
    const now = Date.now();
    const at = Math.max(now, this.nextSlot);
    this.nextSlot = at + 1000 / this.opts.ratePerS;
    if (at > now) await new Promise((r) => setTimeout(r, at - now));
  }
}

// ---- the texts ------------------------------------------------------------------------------

const COLOURS: Record<Lang, Record<string, string>> = {
  de: { red: 'rot', late: 'überfällig', yellow: 'gelb', green: 'grün', grey: 'grau', maintenance: 'Wartung' },
  en: { red: 'red', late: 'late', yellow: 'yellow', green: 'green', grey: 'grey', maintenance: 'maintenance' },
};
const KIND_NAMES: Record<Lang, Record<MailKind, string>> = {
  de: { red: 'auf Rot', late: 'überfällig', yellow: 'auf Gelb', green: 'wieder grün', maintenance: 'in Wartung' },
  en: { red: 'turned red', late: 'late (heartbeat overdue)', yellow: 'turned yellow', green: 'recovered', maintenance: 'in maintenance' },
};
const KIND_ORDER: MailKind[] = ['red', 'late', 'yellow', 'green', 'maintenance'];

const timeOf = (d: Date, lang: Lang) =>
  d.toLocaleString(lang === 'de' ? 'de-DE' : 'en-GB', { dateStyle: 'medium', timeStyle: 'medium', timeZone: 'UTC' }) + ' UTC';

/** The digest of a subscription's waiting changes, in its language, with the unsubscribe link (in the text and as List-Unsubscribe). */
export function digestMessage(d: Digest, o: Pick<DigestOptions, 'maxLines' | 'dashboardUrl'>): MailMessage {
  const lang = d.lang;
  const counts = new Map<MailKind, number>();
  for (const l of d.lines) counts.set(l.kind, (counts.get(l.kind) ?? 0) + 1);
  const summary = KIND_ORDER.filter((k) => counts.has(k))
    .map((k) => `${counts.get(k)} ${KIND_NAMES[lang][k]}`)
    .join(', ');
  const shown = d.lines.slice(0, o.maxLines);
  const more = d.lines.length - shown.length;
  const width = Math.min(60, Math.max(...shown.map((l) => `${l.machine} / ${l.software}`.length)));
  const lines = shown.map((l) => {
    const what = `${l.machine} / ${l.software}`.padEnd(width);
    return `${what}  ${COLOURS[lang][l.from_light] ?? l.from_light} -> ${COLOURS[lang][l.to_light] ?? l.to_light}  ${timeOf(l.event_at, lang)}`;
  });
  if (more > 0) lines.push(lang === 'de' ? `… und ${more} weitere` : `… and ${more} more`);
  const red = `${o.dashboardUrl}/?light=red`;
  const unsubscribe = `${o.dashboardUrl}/unsubscribe?token=${encodeURIComponent(d.token)}`;
  const kinds = KIND_ORDER.filter((k) => d.kinds.includes(k))
    .map((k) => KIND_NAMES[lang][k])
    .join(', ');
  const n = d.lines.length;
  const text =
    lang === 'de'
      ? `Hallo,\n\nim Flottenüberblick von ${d.customer} haben sich Ampeln geändert (${n} ${n === 1 ? 'Änderung' : 'Änderungen'}: ${summary}):\n\n` +
        `${lines.join('\n')}\n\n` +
        `Alle Instanzen, die jetzt rot sind:\n${red}\n` +
        `(Der Überblick zeigt den gewählten Kunden; gehören Sie zu mehreren, wählen Sie dort ${d.customer}.)\n\n` +
        `Sie erhalten diese E-Mail, weil Sie in den Einstellungen Benachrichtigungen für ${d.customer} gewählt haben (${kinds}). ` +
        `Änderungen werden gesammelt und höchstens einmal je Intervall verschickt.\n` +
        `Abbestellen:\n${unsubscribe}\n`
      : `Hello,\n\ntraffic lights of ${d.customer} changed in the fleet dashboard (${n} ${n === 1 ? 'change' : 'changes'}: ${summary}):\n\n` +
        `${lines.join('\n')}\n\n` +
        `Every instance that is red now:\n${red}\n` +
        `(The dashboard shows the customer you chose; if you belong to several, choose ${d.customer} there.)\n\n` +
        `You get this e-mail because you chose notifications for ${d.customer} in the settings (${kinds}). ` +
        `Changes are collected and sent at most once per interval.\n` +
        `Unsubscribe:\n${unsubscribe}\n`;
  const subject = `${d.customer}: ${summary}`;
  // The same digest (the same changes) has the same Message-ID: sent again after a crash, a mail
  // client can tell.
  const digestId = createHash('sha256')
    .update(d.lines.map((l) => l.event_id).join(','))
    .digest('hex')
    .slice(0, 32);
  const domain = safeHost(o.dashboardUrl) ?? 'fleet';
  return {
    to: d.email,
    subject,
    text,
    headers: { 'List-Unsubscribe': `<${unsubscribe}>`, 'Auto-Submitted': 'auto-generated' },
    messageId: `<digest.${digestId}@${domain}>`,
  };
}

function safeHost(url: string): string | null {
  try {
    return new URL(url).hostname || null;
  } catch {
    return null;
  }
}
