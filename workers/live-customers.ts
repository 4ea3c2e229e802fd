// Which customers' reports a worker applies: those that exist and are not being deleted. Reports
// of a customer being offboarded (lib/store/offboarding.ts) that were still in the ingest stream
// when it was marked are dropped here, acknowledged and logged, so that none of its rows comes
// back after its data was removed. Asked per batch attempt (a retried or isolated batch asks
// again); a customer found live is believed for LIVE_MS, which the offboarding grace period
// (OFFBOARD_GRACE_S) is far longer than.
import type { Pool } from '../lib/infra/postgres.js';
import { liveCustomerIds } from '../lib/store/customers.js';

export const LIVE_MS = 1000;

export class LiveCustomers {
  private readonly live = new Map<string, number>();

  constructor(private readonly pool: Pool) {}

  /** Of `ids` (customer ids; '' is "no customer" and always kept), the set that is live now. */
  async check(ids: Iterable<string>, now = Date.now()): Promise<Set<string>> {
    const out = new Set<string>();
    const ask: string[] = [];
    for (const id of new Set(ids)) {
      if (id === '') out.add(id);
      else if ((this.live.get(id) ?? 0) > now) out.add(id);
      else ask.push(id);
    }
    if (ask.length > 0) {
      const found = await liveCustomerIds(this.pool, ask);
      if (this.live.size > 100_000) this.live.clear();
      for (const id of found) {
        this.live.set(id, now + LIVE_MS);
        out.add(id);
      }
    }
    return out;
  }
}
