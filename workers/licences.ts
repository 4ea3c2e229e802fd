// What workers do for licences and conversions when machines appear. Called from apply-batch.ts
// inside the batch's Postgres transaction, with the machines that batch created (so a batch
// applied twice does this once: the second time no machine is new).
//
// For each customer with new machines, under its licence row's lock (taken in customer order, the
// same lock the licence sweep and licence changes take): count the devices (machines seen in the
// last 30 days); over the limit -> the grace period starts now unless it already runs, and the new
// machines beyond the limit are flagged (machines.over_limit_at). Gateways refuse new machines only
// after the grace period (gateway/licence-gate.ts); here nothing is ever refused or dropped.
import type { PoolClient } from '../lib/infra/postgres.js';
import { DEVICE_WINDOW_DAYS } from '../lib/store/licences.js';

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
  await c.query(
    `INSERT INTO conversions (kind, customer_id, dedup_key, value)
     SELECT 'first_device', cid, 'first_device:' || cid, jsonb_build_object('machine', slug)
       FROM unnest($1::uuid[], $2::text[]) AS t(cid, slug)
     ON CONFLICT (dedup_key) DO NOTHING`,
    [ids, ids.map((id) => byCustomer.get(id)![0]!.slug)],
  );
  const lic = await c.query<{ customer_id: string; device_limit: number }>(
    'SELECT customer_id, device_limit FROM licences WHERE customer_id = ANY($1::uuid[]) ORDER BY customer_id FOR UPDATE',
    [ids],
  );
  const counts = await c.query<{ customer_id: string; n: number }>(
    `SELECT customer_id, count(*)::int AS n FROM machines
      WHERE customer_id = ANY($1::uuid[]) AND last_seen_at > now() - make_interval(days => ${DEVICE_WINDOW_DAYS})
      GROUP BY customer_id`,
    [ids],
  );
  const n = new Map(counts.rows.map((r) => [r.customer_id, r.n]));
  const over: string[] = [];
  for (const l of lic.rows) {
    const excess = (n.get(l.customer_id) ?? 0) - l.device_limit;
    if (excess <= 0) continue;
    over.push(l.customer_id);
    const fresh = byCustomer.get(l.customer_id)!.map((m) => m.id);
    await c.query(
      `UPDATE machines SET over_limit_at = now()
        WHERE id IN (SELECT id FROM machines WHERE id = ANY($1::uuid[]) ORDER BY first_seen_at DESC, slug DESC LIMIT $2)`,
      [fresh, Math.min(excess, fresh.length)],
    );
  }
  if (over.length) {
    await c.query('UPDATE licences SET over_limit_since = now() WHERE customer_id = ANY($1::uuid[]) AND over_limit_since IS NULL', [over]);
  }
}
