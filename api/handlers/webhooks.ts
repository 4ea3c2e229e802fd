// Webhooks of the caller's customer (admin role): create, list, delete, and their deliveries.
// The worker side (signing, delivery, retries) is workers/webhooks.ts; the signature lib/domain/webhook-signature.ts.
// A URL is checked against the egress policy (lib/infra/egress.ts) here and again at every delivery: here
// so that an internal target is refused at once, there because DNS can change in between.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import { newWebhookSecret, secretProblem } from '../../lib/domain/webhook-signature.js';
import { EgressPolicy, EgressRefused, EgressUrlError, NOT_ALLOWED } from '../../lib/infra/egress.js';
import { apiRow, isoTime as iso } from '../../lib/infra/postgres.js';
import { describeQuota } from '../../lib/store/quotas.js';
import { createWebhook, deleteWebhook, listWebhookDeliveries, listWebhooks, webhookExists } from '../../lib/store/webhooks.js';

// The webhook as the api answers it (never its secret): the store's SELECT names the fields.
const toWebhook = apiRow;

export function webhookHandlers(d: ApiDeps): HandlersOf<'create_webhook' | 'delete_webhook' | 'list_webhook_deliveries' | 'list_webhooks'> {
  const quotaRefusals = d.metrics.counter('fleet_quota_refusals_total');
  const policy = new EgressPolicy({ allowCidrs: d.cfg.webhooks.allowCidrs });

  /**
   * 400 for a URL that is not http(s), carries credentials, names a refused address or metadata
   * host, or whose host name resolves to any refused address. One detail for every refusal, so the
   * answer does not tell what is behind an internal name; the reason goes to the log. A name that
   * does not resolve now is accepted: every delivery resolves and checks it again.
   */
  async function checkUrl(raw: string, customerId: string): Promise<string> {
    let u: URL;
    try {
      u = EgressPolicy.parseUrl(raw);
    } catch (e) {
      if (e instanceof EgressUrlError) throw badRequest(e.message);
      throw e;
    }
    try {
      await policy.resolve(u);
    } catch (e) {
      if (e instanceof EgressRefused) {
        d.log.info({ customerId, host: u.host, reason: e.reason }, 'webhook url refused by the egress policy');
        throw badRequest(`url: ${NOT_ALLOWED}; webhooks must point to public internet addresses`);
      }
      d.log.info({ customerId, host: u.host, err: (e as Error).message }, 'webhook host does not resolve now; accepted, checked again at each delivery');
    }
    return u.toString();
  }

  async function own(customerId: string, id: string): Promise<void> {
    if (!(await webhookExists(d.pool, customerId, id))) throw notFound('no such webhook');
  }

  return {
    async list_webhooks(req) {
      const p = principal(req);
      return { items: (await listWebhooks(d.pool, p.customerId)).map(toWebhook) };
    },

    async create_webhook(req, reply) {
      const p = principal(req);
      const b = req.body;
      if (b.secret !== undefined) {
        const problem = secretProblem(b.secret);
        if (problem) throw badRequest(problem);
      }
      const url = await checkUrl(b.url, p.customerId);
      const secret = b.secret ?? newWebhookSecret();
      const made = await createWebhook(d.pool, d.cfg, p.customerId, { url, secret, description: b.description ?? '', createdBy: p.userId ?? null });
      if ('full' in made) {
        const { count: n, max } = made.full;
        quotaRefusals.labels('webhooks').inc();
        throw new HttpError(409, `${p.customer} has ${n} webhooks, its quota (${describeQuota('webhooks', max)}); delete one first, or ask the operator to raise the quota`);
      }
      const row = made.created;
      return reply.code(201).send({ ...toWebhook(row), secret });
    },

    async delete_webhook(req, reply) {
      const p = principal(req);
      const { id } = req.params;
      if (!(await deleteWebhook(d.pool, p.customerId, id))) throw notFound('no such webhook');
      return reply.code(204).send();
    },

    async list_webhook_deliveries(req) {
      const p = principal(req);
      const { id } = req.params;
      await own(p.customerId, id);
      const q = req.query;
      const rows = await listWebhookDeliveries(d.pool, p.customerId, id, { state: q.state, limit: q.limit ?? 100 });
      return {
        items: rows.map((x) => ({
          event_id: x.event_id,
          instance_id: x.instance_id,
          from: x.from_light,
          to: x.to_light,
          event_at: iso(x.event_at),
          state: x.state,
          attempts: x.attempts,
          last_status: x.last_status,
          last_error: x.last_error,
          first_attempt_at: iso(x.first_attempt_at),
          last_attempt_at: iso(x.last_attempt_at),
          next_attempt_at: iso(x.next_attempt_at),
          delivered_at: iso(x.delivered_at),
        })),
      };
    },
  };
}
