// The licence check on the ingest hot path, without a query per request. Every gateway keeps
//   - a copy of every customer's licence state (lib/infra/synced-map.ts over `licences`, refreshed every
//     CACHE_REFRESH_MS: a licence change is effective on every replica within about a second), and
//   - only for customers past their grace period, the set of their known machine slugs (loaded once
//     when the customer's grace period ends, then topped up with machines created since, by
//     `machines.created_at`).
// A report for a machine that is not in the set of a customer past its grace period is refused
// with 403. Everyone else passes: known machines keep reporting, customers within their limit or
// their grace period are not affected. Workers start the grace period (workers/licences.ts); the
// licence sweep and licence changes end it (lib/store/licences.ts). The reads: lib/store/licences.ts
// (`licenceCopy`), lib/store/machines.ts (the slugs), lib/store/clock.ts.
import type { Pool } from '../lib/infra/postgres.js';
import { SyncedMap } from '../lib/infra/synced-map.js';
import { forbidden, type HttpError } from '../lib/contract/errors.js';
import { databaseNow } from '../lib/store/clock.js';
import { licenceCopy, type LicenceCopyRow } from '../lib/store/licences.js';
import { machineSlugsCreatedSince, machineSlugsOf } from '../lib/store/machines.js';

interface Licence {
  customerId: string;
  limit: number;
  graceEndsMs: number | null;
  overSince: Date | null;
}

interface Enforced {
  limit: number;
  overSince: Date;
  graceEnds: Date;
  known: Set<string>;
}

const DAY_MS = 86_400_000;
const OVERLAP_MS = 10_000;

export class LicenceGate {
  private readonly licences: SyncedMap<LicenceCopyRow, Licence>;
  private enforced = new Map<string, Enforced>();
  private machinesSince: Date | null = null;
  private timer: NodeJS.Timeout | null = null;
  private running = false;

  constructor(
    private readonly pool: Pool,
    private readonly intervalMs: number,
    private readonly onError: (e: unknown) => void,
  ) {
    this.licences = new SyncedMap<LicenceCopyRow, Licence>({
      pool,
      source: licenceCopy,
      key: (r) => r.customer_id,
      value: (r) => ({
        customerId: r.customer_id,
        limit: r.device_limit,
        overSince: r.over_limit_since,
        graceEndsMs: r.over_limit_since ? r.over_limit_since.getTime() + r.grace_days * DAY_MS : null,
      }),
      intervalMs,
    });
  }

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh().catch(this.onError), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Synchronous: null to let the report through, or the 403 to answer. */
  check(customerId: string, machine: string): HttpError | null {
    const e = this.enforced.get(customerId);
    if (e === undefined || e.known.has(machine)) return null;
    return forbidden(
      `licence limit reached: this customer has had more than ${e.limit} devices since ${e.overSince.toISOString()} and the grace period ended ` +
        `${e.graceEnds.toISOString()}, so the new machine ${JSON.stringify(machine)} is refused (machines already known keep reporting). ` +
        'Raise the licence\'s device limit, or let unused machines age out (30 days without a report).',
    );
  }

  /** Customers whose new machines are refused now (for metrics and tests). */
  get enforcedCustomers(): number {
    return this.enforced.size;
  }

  async refresh(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      await this.licences.refresh();
      const now = Date.now();
      const due = new Map<string, Licence>();
      for (const l of this.licences.values()) if (l.graceEndsMs !== null && now >= l.graceEndsMs) due.set(l.customerId, l);

      if (due.size === 0) {
        this.enforced = new Map();
        this.machinesSince = null;
        return;
      }
      const next = new Map<string, Enforced>();
      const keep = [...due.keys()].filter((id) => this.enforced.has(id));
      const fresh = [...due.keys()].filter((id) => !this.enforced.has(id));
      const dbNow = await databaseNow(this.pool);
      const entry = (l: Licence, known: Set<string>): Enforced => ({
        limit: l.limit,
        overSince: l.overSince!,
        graceEnds: new Date(l.graceEndsMs!),
        known,
      });
      for (const id of keep) next.set(id, entry(due.get(id)!, this.enforced.get(id)!.known));
      if (keep.length && this.machinesSince) {
        // Machines created since the last look (accepted before this gateway's copy knew, or by
        // another replica a moment before the grace period ended): they are known now.
        const rows = await machineSlugsCreatedSince(this.pool, keep, new Date(this.machinesSince.getTime() - OVERLAP_MS));
        for (const m of rows) next.get(m.customer_id)?.known.add(m.slug);
      }
      if (fresh.length) {
        const sets = new Map(fresh.map((id) => [id, new Set<string>()]));
        for (const m of await machineSlugsOf(this.pool, fresh)) sets.get(m.customer_id)!.add(m.slug);
        for (const id of fresh) next.set(id, entry(due.get(id)!, sets.get(id)!));
      }
      this.enforced = next;
      this.machinesSince = dbNow;
    } finally {
      this.running = false;
    }
  }
}
