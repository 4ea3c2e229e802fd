// E-mail notifications of traffic-light changes: a member reads and sets their own subscription in
// the active customer (which kinds of change, which language), and the link in every mail turns it
// off without login. Sending is the workers' (workers/mail-digest.ts); the tables lib/store/mail-notifications.ts.
import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { badRequest, forbidden } from '../../lib/contract/errors.js';
import { MAIL_KINDS, type MailKind } from '../../lib/contract/schemas/notifications.js';
import { langOf, type Lang } from '../../lib/infra/mail.js';
import { getSubscription, putSubscription, unsubscribeByToken } from '../../lib/store/mail-notifications.js';

/** Only a user has an address to mail: an API token (a viewer too) has none. */
function userOf(req: FastifyRequest) {
  const p = principal(req);
  if (p.kind !== 'user' || !p.userId) throw forbidden('e-mail notifications belong to a user: log in to the dashboard (an API token has none)');
  return p as typeof p & { userId: string };
}

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The page the unsubscribe link answers: short, no script, in the subscription's language. */
function unsubscribedPage(lang: Lang, customer: string, email: string, dashboardUrl: string): string {
  const t =
    lang === 'de'
      ? {
          title: 'Abbestellt',
          text: `${esc(email)} erhält keine E-Mails mehr über Ampeländerungen von ${esc(customer)}.`,
          again: 'In den Einstellungen des Flottenüberblicks können Sie sie wieder bestellen',
        }
      : {
          title: 'Unsubscribed',
          text: `${esc(email)} gets no more e-mails about traffic-light changes of ${esc(customer)}.`,
          again: 'You can subscribe again in the settings of the fleet dashboard',
        };
  return (
    `<!doctype html>\n<html lang="${lang}"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
    `<title>${t.title}</title></head><body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 3em auto; padding: 0 1em">` +
    `<h1>${t.title}</h1><p>${t.text}</p><p><a href="${esc(dashboardUrl)}/settings#notifications">${t.again}</a>.</p></body></html>\n`
  );
}

export function notificationHandlers(d: ApiDeps): HandlersOf<'get_email_notifications' | 'put_email_notifications' | 'unsubscribe_email'> {
  const answer = (customer: string, email: string, kinds: MailKind[], lang: Lang) => ({
    customer,
    email,
    kinds: MAIL_KINDS.filter((k) => kinds.includes(k)),
    lang,
    available_kinds: [...MAIL_KINDS],
    digest_interval_s: d.cfg.notifications.digestIntervalS,
  });

  return {
    async get_email_notifications(req) {
      const p = userOf(req);
      const s = await getSubscription(d.pool, p.userId, p.customerId);
      return answer(p.customer, p.email ?? '', s?.kinds ?? [], s?.lang ?? langOf(req.headers['accept-language']));
    },

    async put_email_notifications(req) {
      const p = userOf(req);
      const before = await getSubscription(d.pool, p.userId, p.customerId);
      const lang = req.body.lang ?? before?.lang ?? langOf(req.headers['accept-language']);
      const s = await putSubscription(d.pool, p.userId, p.customerId, { kinds: req.body.kinds, lang }, randomBytes(32).toString('base64url'));
      if (!s) throw forbidden(`only members of ${p.customer} get its e-mail notifications`);
      return answer(p.customer, p.email ?? '', s.kinds, s.lang);
    },

    async unsubscribe_email(req, reply) {
      const r = await unsubscribeByToken(d.pool, req.query.token);
      if (!r) throw badRequest('this unsubscribe link is invalid or unknown; change your e-mail notifications in the settings of the dashboard');
      // No script, nothing loaded; the token in this page's address goes to no one as a Referer.
      return reply
        .type('text/html; charset=utf-8')
        .header('Cache-Control', 'no-store')
        .header('Referrer-Policy', 'no-referrer')
        .header('Content-Security-Policy', "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
        .send(unsubscribedPage(r.lang, r.customer, r.email, d.cfg.api.publicDashboardUrl));
    },
  };
}
