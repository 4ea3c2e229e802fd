// Ends overdue agent commands: queued past expires_at -> expired; delivered past ack_deadline ->
// timed_out. A BullMQ job scheduler runs the sweep every COMMAND_SWEEP_MS; every worker replica
// registers the same scheduler (idempotent) and runs a BullMQ worker for it, and BullMQ hands each
// run to one of them. The sweep itself is idempotent too (state guards, one event per state), so
// two sweeps at once would only find nothing to do.
import { Queue, Worker } from 'bullmq';
import type { Pool } from '../lib/db/postgres.js';
import { withTx } from '../lib/db/postgres.js';
import { createRedis, type Redis } from '../lib/db/redis.js';
import type { Logger } from '../lib/log.js';
import type { InstanceRef } from '../lib/commands.js';

export const SWEEP_QUEUE = 'command-expiry';
const BATCH = 5000;

export interface SweepResult {
  expired: number;
  timedOut: number;
  refs: InstanceRef[];
}

/** One sweep: every overdue command, in batches of 5000 (each its own transaction). */
export async function sweepCommands(pool: Pool): Promise<SweepResult> {
  const out: SweepResult = { expired: 0, timedOut: 0, refs: [] };
  for (const [from, to, deadline] of [
    ['queued', 'expired', 'expires_at'],
    ['delivered', 'timed_out', 'ack_deadline'],
  ] as const) {
    for (;;) {
      const rows = await withTx(pool, async (c) => {
        const r = await c.query<{ customer_id: string; machine: string; software: string }>(
          `WITH u AS (
             UPDATE commands SET state = '${to}', finished_at = clock_timestamp()
              WHERE id IN (SELECT id FROM commands WHERE state = '${from}' AND ${deadline} <= clock_timestamp()
                            ORDER BY ${deadline} LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
                AND state = '${from}'
              RETURNING id, instance_id, customer_id, finished_at
           ), e AS (
             INSERT INTO command_events (command_id, state, at, actor, detail)
             SELECT id, '${to}', finished_at, 'system', '${to === 'expired' ? 'not delivered before expires_at' : 'no ack before ack_deadline'}' FROM u
             ON CONFLICT (command_id, state) DO NOTHING
           )
           SELECT u.customer_id, m.slug AS machine, i.software
             FROM u JOIN instances i ON i.id = u.instance_id JOIN machines m ON m.id = i.machine_id`,
        );
        return r.rows;
      });
      for (const r of rows) out.refs.push({ customerId: r.customer_id, machine: r.machine, software: r.software });
      if (to === 'expired') out.expired += rows.length;
      else out.timedOut += rows.length;
      if (rows.length < BATCH) break;
    }
  }
  return out;
}

export interface CommandExpiryOptions {
  pool: Pool;
  redisUrl: string;
  redisPrefix: string;
  everyMs: number;
  log: Logger;
  /** After each sweep that ended something: hint the gateways. */
  commandsChanged(refs: InstanceRef[]): void;
}

export class CommandExpiry {
  private queue: Queue | null = null;
  private worker: Worker | null = null;
  private conns: Redis[] = [];

  constructor(private readonly o: CommandExpiryOptions) {}

  async start(): Promise<void> {
    // BullMQ keys live under REDIS_PREFIX (queue names may not contain ':', the prefix may).
    const prefix = `${this.o.redisPrefix}bull`;
    const qc = createRedis(this.o.redisUrl, { bullmq: true });
    const wc = createRedis(this.o.redisUrl, { bullmq: true });
    this.conns = [qc, wc];
    for (const c of this.conns) c.on('error', (e) => this.o.log.warn({ err: e }, 'redis error (command expiry)'));
    this.queue = new Queue(SWEEP_QUEUE, { connection: qc, prefix });
    await this.queue.upsertJobScheduler('sweep', { every: this.o.everyMs }, { name: 'sweep', opts: { removeOnComplete: 100, removeOnFail: 100 } });
    this.worker = new Worker(
      SWEEP_QUEUE,
      async () => {
        const r = await sweepCommands(this.o.pool);
        if (r.refs.length > 0) {
          this.o.commandsChanged(r.refs);
          this.o.log.info({ expired: r.expired, timed_out: r.timedOut }, 'agent commands ended by the sweep');
        }
        return { expired: r.expired, timed_out: r.timedOut };
      },
      { connection: wc, prefix, concurrency: 1 },
    );
    this.worker.on('failed', (_job, err) => this.o.log.warn({ err }, 'command sweep failed; the next run retries'));
    this.worker.on('error', (err) => this.o.log.warn({ err }, 'command sweep worker error'));
  }

  async stop(): Promise<void> {
    await this.worker?.close().catch(() => {});
    await this.queue?.close().catch(() => {});
    // quit() waits for Redis; a connection that never came up must not hold the shutdown.
    await Promise.race([Promise.allSettled(this.conns.map((c) => c.quit())), new Promise((r) => setTimeout(r, 2000).unref())]);
    for (const c of this.conns) c.disconnect();
  }
}
