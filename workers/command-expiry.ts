// Ends overdue agent commands: queued past expires_at -> expired; delivered past ack_deadline ->
// timed_out. A scheduled job (workers/jobs.ts) runs the sweep every COMMAND_SWEEP_MS on one worker
// replica. The sweep is idempotent (state guards, one event per state), so two sweeps at once would
// only find nothing to do.
import type { Pool } from '../lib/infra/postgres.js';
import { withTx } from '../lib/infra/postgres.js';
import type { InstanceRef } from '../lib/store/commands.js';

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
