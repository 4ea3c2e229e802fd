// Webhooks: on each change to or from red, every webhook of the customer gets a signed POST
// (lib/domain/webhook-signature.ts). Deliveries are BullMQ jobs, one per webhook and event, with WEBHOOK_ATTEMPTS
// attempts and exponential backoff (WEBHOOK_BACKOFF_MS, doubled each time). The job id is
// `<webhook id>.<instance id>.<seq>`, so an event handed over twice (outbox redelivery) is queued
// once. Every attempt is recorded in Postgres (webhook_deliveries, and the webhook's last success
// or failure; the statements are lib/store/webhooks.ts's), which the api shows: GET /api/webhooks,
// GET /api/webhooks/{id}/deliveries.
//
// Every attempt goes through the egress policy (lib/infra/egress.ts): the host is resolved, every address
// checked (WEBHOOK_ALLOW_CIDRS), and the connection made to the checked addresses only; redirects
// are not followed. What the customer sees of a failure is generic (`address not allowed`,
// `timeout`, `connection refused`, `connection failed`, `HTTP <status>`); the reason is logged.
import { Queue, Worker, type Job } from 'bullmq';
import { scanKeys, type Redis } from '../lib/infra/redis.js';
import type { Pool, PoolClient } from '../lib/infra/postgres.js';
import type { Logger } from '../lib/infra/log.js';
import { QUEUES, bullPrefix } from './jobs.js';
import { publicLightEvent, type LightEvent } from '../lib/domain/traffic-light.js';
import { signatureHeaders } from '../lib/domain/webhook-signature.js';
import { EgressPolicy, egressPost } from '../lib/infra/egress.js';
import type { WebhookEnqueuer } from './traffic-light.js';
import { recordDeliveryAttempt, wasDelivered, webhookTarget, webhooksOf, type DeliveryAttempt } from '../lib/store/webhooks.js';

export interface WebhookOptions {
  attempts: number;
  backoffMs: number;
  timeoutMs: number;
  concurrency: number;
  /** WEBHOOK_ALLOW_CIDRS: internal addresses deliveries may reach after all. */
  allowCidrs: string;
}

/** What a delivery attempt came to (fleet_worker_webhook_deliveries_total). */
export type DeliveryOutcome = 'delivered' | 'retrying' | 'failed' | 'skipped';

interface DeliveryJob {
  webhookId: string;
  event: LightEvent;
}

/** The body a receiver gets: the change, with the customer's slug (a receiver may serve several). */
export function webhookPayload(e: LightEvent) {
  return { type: 'light.changed', customer: e.customer, ...publicLightEvent(e) };
}

export class Webhooks implements WebhookEnqueuer {
  private queue: Queue<DeliveryJob> | null = null;
  private worker: Worker<DeliveryJob> | null = null;
  private readonly policy: EgressPolicy;

  constructor(
    private readonly connection: Redis,
    private readonly redisPrefix: string,
    private readonly pool: Pool,
    private readonly opts: WebhookOptions,
    private readonly log: Logger,
    private readonly onOutcome: (outcome: DeliveryOutcome) => void = () => {},
  ) {
    this.policy = new EgressPolicy({ allowCidrs: opts.allowCidrs });
  }

  async start(): Promise<void> {
    const prefix = bullPrefix(this.redisPrefix, this.connection);
    this.queue = new Queue<DeliveryJob>(QUEUES.webhooks, { connection: this.connection, prefix });
    this.queue.on('error', (e) => this.log.warn({ err: e }, 'webhook queue error'));
    this.worker = new Worker<DeliveryJob>(QUEUES.webhooks, (job) => this.deliver(job), {
      connection: this.connection,
      prefix,
      concurrency: this.opts.concurrency,
    });
    this.worker.on('error', (e) => this.log.warn({ err: e }, 'webhook worker error'));
  }

  /**
   * Removes the delivery jobs of these webhooks, queued or kept after they ran (offboarding: their
   * data names the customer). Job ids begin with the webhook id. A job running at that moment is
   * left to finish (BullMQ refuses to remove it) and goes with removeOnComplete / removeOnFail.
   */
  async removeJobsOf(webhookIds: string[]): Promise<number> {
    if (!this.queue || webhookIds.length === 0) return 0;
    const base = `${bullPrefix(this.redisPrefix, this.connection)}:${QUEUES.webhooks}:`;
    let removed = 0;
    for (const webhookId of webhookIds) {
      const ids = new Set<string>();
      for await (const keys of scanKeys(this.connection, `${base}${webhookId}.*`)) for (const k of keys) ids.add(k.slice(base.length).split(':')[0]!);
      for (const id of ids) removed += await this.queue.remove(id);
    }
    return removed;
  }

  async enqueue(events: LightEvent[], db: Pool | PoolClient = this.pool): Promise<void> {
    if (!this.queue || events.length === 0) return;
    const customers = [...new Set(events.map((e) => e.customer_id))];
    const rows = await webhooksOf(db, customers);
    if (rows.length === 0) return;
    const hooks = new Map<string, string[]>();
    for (const w of rows) hooks.set(w.customer_id, [...(hooks.get(w.customer_id) ?? []), w.id]);
    const jobs = events.flatMap((event) =>
      (hooks.get(event.customer_id) ?? []).map((webhookId) => ({
        name: 'deliver',
        data: { webhookId, event },
        opts: {
          jobId: `${webhookId}.${event.id}`,
          attempts: this.opts.attempts,
          backoff: { type: 'exponential', delay: this.opts.backoffMs },
          // The job id drops a second copy of the event while the first is queued or kept; after
          // that, the delivery row in Postgres does (deliver() skips what was delivered).
          removeOnComplete: { age: 3600, count: 10_000 },
          removeOnFail: { age: 86_400, count: 10_000 },
        },
      })),
    );
    for (let i = 0; i < jobs.length; i += 1000) await this.queue.addBulk(jobs.slice(i, i + 1000));
  }

  private async deliver(job: Job<DeliveryJob>): Promise<string> {
    const { webhookId, event } = job.data;
    const hook = await webhookTarget(this.pool, webhookId);
    if (!hook) {
      this.onOutcome('skipped');
      return 'webhook deleted';
    }
    if (await wasDelivered(this.pool, webhookId, event.id)) {
      this.onOutcome('skipped');
      return 'delivered before';
    }
    const attempt = Math.max(job.attemptsStarted, job.attemptsMade + 1);
    const body = JSON.stringify(webhookPayload(event));
    const ts = Math.floor(Date.now() / 1000);
    const r = await egressPost(this.policy, hook.url, {
      headers: {
        'Content-Type': 'application/json',
        'User-Agent': 'fleet-ingest-webhook/1',
        'X-Fleet-Event': 'light.changed',
        'X-Fleet-Event-Id': event.id,
        'X-Fleet-Delivery-Attempt': String(attempt),
        ...signatureHeaders(hook.secret, event.id, ts, body),
      },
      body,
      timeoutMs: this.opts.timeoutMs,
    });
    const { status, error } = r;
    if (error !== null) {
      // The reason (which address, which class, the socket error) is for operators only.
      let host = '';
      try {
        host = new URL(hook.url).host;
      } catch {
        /* stored URLs are valid */
      }
      this.log.warn({ webhookId, customerId: event.customer_id, eventId: event.id, attempt, host, address: r.address, status, error, detail: r.detail }, 'webhook delivery failed');
    }
    const final = error === null || attempt >= this.opts.attempts;
    const state = error === null ? 'delivered' : final ? 'failed' : 'retrying';
    const nextAt = final ? null : new Date(Date.now() + this.opts.backoffMs * 2 ** (attempt - 1));
    await this.record(webhookId, event, state, attempt, status, error, nextAt);
    this.onOutcome(state);
    if (error !== null) throw new Error(`webhook delivery failed: ${error}`);
    return 'delivered';
  }

  private async record(webhookId: string, e: LightEvent, state: DeliveryAttempt['state'], attempts: number, status: number | null, error: string | null, nextAt: Date | null): Promise<void> {
    await recordDeliveryAttempt(this.pool, { webhookId, eventId: e.id, instanceId: e.instance_id, fromLight: e.from, toLight: e.to, eventAt: e.at, state, attempts, status, error, nextAt });
  }

  async stop(): Promise<void> {
    await this.worker?.close().catch(() => {});
    await this.queue?.close().catch(() => {});
  }
}
