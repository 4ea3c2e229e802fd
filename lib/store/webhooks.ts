// Webhooks of a customer (Postgres `webhooks`) and their deliveries (`webhook_deliveries`) as the
// api manages and reads them. The worker side (signing, delivery, retries) is workers/webhooks.ts.
import { withTx, type Pool } from '../infra/postgres.js';
import type { Config } from '../infra/config.js';
import { loadQuotas } from './quotas.js';

/** A webhook as the api answers it (never its secret). */
export interface WebhookRow {
  id: string;
  url: string;
  description: string;
  created_at: Date;
  last_success_at: Date | null;
  last_failure_at: Date | null;
  last_error: string | null;
  consecutive_failures: number;
}

const COLUMNS = 'id, url, description, created_at, last_success_at, last_failure_at, last_error, consecutive_failures';

/** The customer's webhooks, oldest first. */
export async function listWebhooks(pool: Pool, customerId: string): Promise<WebhookRow[]> {
  return (await pool.query<WebhookRow>(`SELECT ${COLUMNS} FROM webhooks WHERE customer_id = $1 ORDER BY created_at, id`, [customerId])).rows;
}

/**
 * A new webhook, unless the customer holds its quota of them already (then `full`, with the count
 * and the quota). One creation at a time per customer (the customer's row locked), so the quota
 * holds under concurrent requests.
 */
export async function createWebhook(
  pool: Pool,
  cfg: Pick<Config, 'quotas'>,
  customerId: string,
  w: { url: string; secret: string; description: string; createdBy: string | null },
): Promise<{ created: WebhookRow } | { full: { count: number; max: number } }> {
  return withTx(pool, async (c) => {
    await c.query('SELECT 1 FROM customers WHERE id = $1 FOR UPDATE', [customerId]);
    const max = (await loadQuotas(c, cfg, customerId)).webhooks;
    const n = (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM webhooks WHERE customer_id = $1', [customerId])).rows[0]!.n;
    if (n >= max) return { full: { count: n, max } };
    const r = await c.query<WebhookRow>(
      `INSERT INTO webhooks (customer_id, url, secret, description, created_by) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLUMNS}`,
      [customerId, w.url, w.secret, w.description, w.createdBy],
    );
    return { created: r.rows[0]! };
  });
}

/** Deletes one of the customer's webhooks; false when it has none of that id. */
export async function deleteWebhook(pool: Pool, customerId: string, id: string): Promise<boolean> {
  const r = await pool.query('DELETE FROM webhooks WHERE customer_id = $1 AND id = $2', [customerId, id]);
  return r.rowCount !== 0;
}

/** Whether the customer has a webhook of this id. */
export async function webhookExists(pool: Pool, customerId: string, id: string): Promise<boolean> {
  const r = await pool.query('SELECT 1 FROM webhooks WHERE customer_id = $1 AND id = $2', [customerId, id]);
  return !!r.rows[0];
}

export interface WebhookDeliveryRow {
  event_id: string;
  instance_id: string;
  from_light: string;
  to_light: string;
  event_at: Date | null;
  state: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  first_attempt_at: Date | null;
  last_attempt_at: Date | null;
  next_attempt_at: Date | null;
  delivered_at: Date | null;
}

/** A webhook's deliveries (of one state, or all), the latest attempt first. */
export async function listWebhookDeliveries(pool: Pool, customerId: string, webhookId: string, q: { state?: string; limit: number }): Promise<WebhookDeliveryRow[]> {
  const params: unknown[] = [customerId, webhookId];
  const r = await pool.query<WebhookDeliveryRow>(
    `SELECT event_id, instance_id, from_light, to_light, event_at, state, attempts, last_status, last_error,
                first_attempt_at, last_attempt_at, next_attempt_at, delivered_at
           FROM webhook_deliveries WHERE customer_id = $1 AND webhook_id = $2 ${q.state ? `AND state = $${params.push(q.state)}` : ''}
          ORDER BY last_attempt_at DESC, event_id LIMIT $${params.push(q.limit)}`,
    params,
  );
  return r.rows;
}
