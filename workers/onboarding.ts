// Onboarding milestones: the first report of each kind (heartbeat, diagnostics, status, and any kind
// added later, such as help) per customer, with its receive time. GET /api/onboarding/status reads
// them. Each worker remembers what it has recorded, so a customer's steady traffic costs no write.
// The statement is lib/store/onboarding.ts's (`recordReportMilestones`).
import type { Pool } from '../lib/infra/postgres.js';
import type { Report } from '../lib/contract/messages.js';
import { recordReportMilestones } from '../lib/store/onboarding.js';

const recorded = new Set<string>();

export async function recordMilestones(pool: Pool, reports: Report[]): Promise<void> {
  const first = new Map<string, { c: string; k: string; at: number }>();
  for (const r of reports) {
    const key = `${r.customerId}|${r.kind}`;
    if (recorded.has(key)) continue;
    const f = first.get(key);
    if (!f || r.receivedAt < f.at) first.set(key, { c: r.customerId, k: r.kind, at: r.receivedAt });
  }
  if (first.size === 0) return;
  const rows = [...first.values()].sort((a, b) => (a.c + a.k < b.c + b.k ? -1 : 1));
  await recordReportMilestones(pool, rows.map((r) => ({ customerId: r.c, step: r.k, atMs: r.at })));
  if (recorded.size > 1_000_000) recorded.clear();
  for (const k of first.keys()) recorded.add(k);
}
