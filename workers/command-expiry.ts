// Ends overdue agent commands: queued past expires_at -> expired; delivered past ack_deadline ->
// timed_out. A scheduled job (workers/jobs.ts) runs the sweep every COMMAND_SWEEP_MS on one worker
// replica. The sweep is idempotent (state guards, one event per state), so two sweeps at once would
// only find nothing to do. The statement is lib/store/commands.ts's (`endOverdueCommands`).
import type { Pool } from '../lib/infra/postgres.js';
import { withTx } from '../lib/infra/postgres.js';
import { endOverdueCommands, type InstanceRef } from '../lib/store/commands.js';

const BATCH = 5000;

export interface SweepResult {
  expired: number;
  timedOut: number;
  refs: InstanceRef[];
}

/** One sweep: every overdue command, in batches of 5000 (each its own transaction). */
export async function sweepCommands(pool: Pool): Promise<SweepResult> {
  const out: SweepResult = { expired: 0, timedOut: 0, refs: [] };
  for (const to of ['expired', 'timed_out'] as const) {
    for (;;) {
      const refs = await withTx(pool, (c) => endOverdueCommands(c, to, BATCH));
      out.refs.push(...refs);
      if (to === 'expired') out.expired += refs.length;
      else out.timedOut += refs.length;
      if (refs.length < BATCH) break;
    }
  }
  return out;
}
