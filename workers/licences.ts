// What workers do for licences and conversions when machines appear. Called from apply-batch.ts
// inside the batch's Postgres transaction, with the machines that batch created (so a batch
// applied twice does this once: the second time no machine is new).
//
// For each customer with new machines, under its licence row's lock (taken in customer order, the
// same lock the licence sweep and licence changes take): count the devices (machines seen in the
// last 30 days); over the limit -> the grace period starts now unless it already runs, and the new
// machines beyond the limit are flagged (machines.over_limit_at). Gateways refuse new machines only
// after the grace period (gateway/licence-gate.ts); here nothing is ever refused or dropped. The
// statements are lib/store/licences.ts's, conversions.ts's and machines.ts's, run in that transaction.
import type { PoolClient } from '../lib/infra/postgres.js';
import { deviceCounts, lockLicences, startGracePeriods } from '../lib/store/licences.js';
import { recordFirstDevices } from '../lib/store/conversions.js';
import { flagOverLimit } from '../lib/store/machines.js';

export interface NewMachine {
  id: string;
  customer_id: string;
  slug: string;
}

export async function noteNewMachines(c: PoolClient, created: NewMachine[]): Promise<void> {
  if (created.length === 0) return;
  const byCustomer = new Map<string, NewMachine[]>();
  for (const m of created) {
    const list = byCustomer.get(m.customer_id);
    if (list) list.push(m);
    else byCustomer.set(m.customer_id, [m]);
  }
  const ids = [...byCustomer.keys()].sort();
  // The customer's first machine: a conversion its dashboard reports once.
  await recordFirstDevices(c, ids.map((id) => ({ customerId: id, machine: byCustomer.get(id)![0]!.slug })));
  const lic = await lockLicences(c, ids);
  const n = await deviceCounts(c, ids);
  const over: string[] = [];
  for (const l of lic) {
    const excess = (n.get(l.customer_id) ?? 0) - l.device_limit;
    if (excess <= 0) continue;
    over.push(l.customer_id);
    const fresh = byCustomer.get(l.customer_id)!.map((m) => m.id);
    await flagOverLimit(c, fresh, Math.min(excess, fresh.length));
  }
  if (over.length) await startGracePeriods(c, over);
}
