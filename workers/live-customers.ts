// Which reports a worker drops because their customer is being deleted or was deleted (offboarding,
// lib/store/offboarding.ts): reports of it that were still in the ingest stream when it was marked
// are dropped here, acknowledged and logged, so that none of its rows comes back after its data was
// removed, and none of its data waits in the dead-letter stream. A report naming an id that never was
// a customer is not dropped here: it fails on the foreign key and is dead-lettered, as before. Asked
// per batch attempt (a retried or isolated batch asks again); "not gone" is believed for NOT_GONE_MS,
// far shorter than the grace before a purge (OFFBOARD_GRACE_S); "gone" for good.
import type { Pool } from '../lib/infra/postgres.js';
import { isUuid } from '../lib/contract/ids.js';
import { goneCustomerIds } from '../lib/store/customers.js';

export const NOT_GONE_MS = 1000;

export class LiveCustomers {
  private readonly notGone = new Map<string, number>();
  private readonly gone = new Set<string>();

  constructor(private readonly pool: Pool) {}

  /** Of `ids` (customer ids of reports and rejection records), those whose reports are dropped. */
  async goneOf(ids: Iterable<string>, now = Date.now()): Promise<Set<string>> {
    const out = new Set<string>();
    const ask: string[] = [];
    for (const id of new Set(ids)) {
      if (this.gone.has(id)) out.add(id);
      else if (isUuid(id) && (this.notGone.get(id) ?? 0) <= now) ask.push(id);
    }
    if (ask.length > 0) {
      const found = await goneCustomerIds(this.pool, ask);
      if (this.notGone.size > 100_000) this.notGone.clear();
      if (this.gone.size > 100_000) this.gone.clear();
      for (const id of ask) {
        if (found.has(id)) {
          this.gone.add(id);
          out.add(id);
        } else this.notGone.set(id, now + NOT_GONE_MS);
      }
    }
    return out;
  }
}
