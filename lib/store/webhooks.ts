// Webhooks of a customer (Postgres `webhooks`) and their deliveries (`webhook_deliveries`) as the
// api manages and reads them, and as the worker that delivers them reads and records them (at the
// end). Signing, delivery and retries are workers/webhooks.ts.
import { withTx, type Pool, type PoolClient } from '../infra/postgres.js';
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

// ---- the worker's side ----------------------------------------------------------------------

/** The webhooks of these customers (ids only): whom a change of colour goes to. */
export async function webhooksOf(db: Pool | PoolClient, customerIds: string[]): Promise<{ id: string; customer_id: string }[]> {
  const r = await db.query<{ id: string; customer_id: string }>(`SELECT id, customer_id FROM webhooks WHERE customer_id = ANY($1::uuid[])`, [customerIds]);
  return r.rows;
}

/** Where a webhook delivers and the secret it signs with; null when it was deleted. */
export async function webhookTarget(db: Pool | PoolClient, id: string): Promise<{ url: string; secret: string } | null> {
  const r = await db.query<{ url: string; secret: string }>(`SELECT url, secret FROM webhooks WHERE id = $1`, [id]);
  return r.rows[0] ?? null;
}

/** Whether this event was delivered to this webhook already. */
export async function wasDelivered(db: Pool | PoolClient, webhookId: string, eventId: string): Promise<boolean> {
  const r = await db.query(`SELECT 1 FROM webhook_deliveries WHERE webhook_id = $1 AND event_id = $2 AND state = 'delivered'`, [webhookId, eventId]);
  return !!r.rows[0];
}

/** One delivery attempt of an event (a change of colour) to a webhook. */
export interface DeliveryAttempt {
  webhookId: string;
  eventId: string;
  instanceId: string;
  fromLight: string;
  toLight: string;
  /** When the colour changed (ISO 8601). */
  eventAt: string;
  state: 'delivered' | 'retrying' | 'failed';
  /** Attempts made so far, this one included (the count never goes back). */
  attempts: number;
  /** The receiver's HTTP status; null: no answer. */
  status: number | null;
  /** What the customer sees of a failure; null: delivered. */
  error: string | null;
  nextAt: Date | null;
}

/**
 * Records an attempt: the delivery's row (created, or updated to this attempt), and on the webhook
 * its last success or failure and its count of failures in a row. Nothing when the webhook was
 * deleted meanwhile.
 */
export async function recordDeliveryAttempt(db: Pool | PoolClient, a: DeliveryAttempt): Promise<void> {
  await db.query(
    `WITH d AS (
       INSERT INTO webhook_deliveries (webhook_id, event_id, customer_id, instance_id, from_light, to_light, event_at, state, attempts,
                                       last_status, last_error, next_attempt_at, delivered_at)
       SELECT w.id, $2, w.customer_id, $3, $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $7 = 'delivered' THEN now() END
         FROM webhooks w WHERE w.id = $1
       ON CONFLICT (webhook_id, event_id) DO UPDATE SET
         state = EXCLUDED.state, attempts = GREATEST(webhook_deliveries.attempts, EXCLUDED.attempts),
         last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error, last_attempt_at = now(),
         next_attempt_at = EXCLUDED.next_attempt_at, delivered_at = EXCLUDED.delivered_at
       RETURNING 1)
     UPDATE webhooks SET
       last_success_at = CASE WHEN $10::text IS NULL THEN now() ELSE last_success_at END,
       last_failure_at = CASE WHEN $10::text IS NULL THEN last_failure_at ELSE now() END,
       last_error = CASE WHEN $10::text IS NULL THEN last_error ELSE $10 END,
       consecutive_failures = CASE WHEN $10::text IS NULL THEN 0 ELSE consecutive_failures + 1 END
     WHERE id = $1`,
    [a.webhookId, a.eventId, a.instanceId, a.fromLight, a.toLight, a.eventAt, a.state, a.attempts, a.status, a.error, a.nextAt],
  );
}
