// Offboarding (docs/operations.md "Offboarding a customer"): a scheduled job (workers/jobs.ts, queue
// `offboarding`) runs every OFFBOARD_SWEEP_MS on one worker replica and finishes the deletion of
// every customer marked at least OFFBOARD_GRACE_S ago (lib/store/offboarding.ts purgeCustomer):
// the deletions the api started (DELETE /api/admin/customers/{id}) and any that stopped half-way
// (a store away during `fleet customer delete`, or during an earlier run). One customer's failure
// does not stop the others; the run fails (and is logged) if any did, and the next run retries it.
import type { Logger } from '../lib/infra/log.js';
import { customersToPurge, purgeCustomer, type PurgeDeps } from '../lib/store/offboarding.js';
import type { RunResult } from './jobs.js';

export async function runOffboarding(d: PurgeDeps & { graceS: number; log: Logger }): Promise<RunResult> {
  const out: RunResult = {};
  let failure: unknown = null;
  for (const c of await customersToPurge(d.pool, d.graceS)) {
    try {
      await purgeCustomer(d, c);
      out.customers = (out.customers ?? 0) + 1;
    } catch (e) {
      failure ??= e;
      d.log.warn({ err: e, customer: c.slug, customerId: c.id, since: c.deleting_at }, 'offboarding: customer not wholly deleted this time (it stays `deleting`; the next run goes on)');
    }
  }
  if (failure !== null) throw failure;
  return out;
}
