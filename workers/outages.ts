// What a worker waits for. Every message it nak'ed because of an outage (lib/infra/storage-errors.ts)
// is noted with the dependency it waits for, until the message is acked (applied, or
// dead-lettered for its data) or, should another worker have taken it over, until its retry is
// well overdue. While any message waits for a dependency, that dependency is in an outage:
// /readyz answers 503 naming it and fleet_worker_outage{dependency} is 1.
//
// And which reports' rows already landed in which ClickHouse table, for messages being retried:
// an apply that failed half-way (Postgres committed, one ClickHouse table refused, the others
// took their rows) is applied again later, and must not insert the rows that landed a second
// time (LandedRows, handed to applyBatch as its RowLedger).
import type { Dependency, Failure } from '../lib/infra/storage-errors.js';
import type { RowLedger } from './apply-batch.js';

interface Waiting {
  dependency: Dependency;
  reason: string;
  since: number;
  /** After this the entry is dropped even without an ack (its retry went to another worker). */
  until: number;
}

export interface Outage {
  dependency: Dependency;
  /** The last failure's customer-safe reason. */
  reason: string;
  /** When the oldest message still waiting started to wait. */
  since: number;
  /** Messages waiting. */
  messages: number;
}

export class Outages {
  private readonly waiting = new Map<string, Waiting>();

  /** `graceMs`: how long after its retry was due a message is still counted as waiting. */
  constructor(private readonly graceMs: number) {}

  /** Message `key` was nak'ed to wait `retryInMs` for `failure`'s dependency. */
  wait(key: string, failure: Pick<Failure, 'dependency' | 'reason'>, retryInMs: number, now = Date.now()): void {
    const prev = this.waiting.get(key);
    this.waiting.set(key, { dependency: failure.dependency, reason: failure.reason, since: prev?.since ?? now, until: now + retryInMs + this.graceMs });
  }

  /** Message `key` is done with (acked). */
  done(key: string): void {
    this.waiting.delete(key);
  }

  get size(): number {
    return this.waiting.size;
  }

  /** The outages now, one per dependency. */
  current(now = Date.now()): Outage[] {
    const by = new Map<Dependency, Outage>();
    for (const [key, w] of this.waiting) {
      if (w.until < now) {
        this.waiting.delete(key);
        continue;
      }
      const o = by.get(w.dependency);
      if (!o) by.set(w.dependency, { dependency: w.dependency, reason: w.reason, since: w.since, messages: 1 });
      else {
        o.messages++;
        o.since = Math.min(o.since, w.since);
        o.reason = w.reason;
      }
    }
    return [...by.values()];
  }

  /** One line for /readyz, or null. */
  problem(now = Date.now()): string | null {
    const all = this.current(now);
    if (all.length === 0) return null;
    return all
      .map((o) => `${o.dependency} (${o.reason}) for ${Math.round((now - o.since) / 1000)} s, ${o.messages} ${o.messages === 1 ? 'message' : 'messages'} waiting`)
      .join(', ');
  }
}

/**
 * Report ids whose rows landed in a ClickHouse table while their message still has to be
 * retried. Bounded: beyond `max` reports the oldest are forgotten (a retry may then insert their
 * rows again; ReplacingMergeTree collapses the copy, read FINAL).
 */
export class LandedRows {
  private readonly byId = new Map<string, string[]>();

  constructor(private readonly max = 200_000) {}

  get size(): number {
    return this.byId.size;
  }

  has(table: string, id: string): boolean {
    return this.byId.get(id)?.includes(table) ?? false;
  }

  add(table: string, ids: readonly string[]): void {
    for (const id of ids) {
      const tables = this.byId.get(id);
      if (!tables) this.byId.set(id, [table]);
      else if (!tables.includes(table)) tables.push(table);
    }
    for (const id of this.byId.keys()) {
      if (this.byId.size <= this.max) break;
      this.byId.delete(id);
    }
  }

  forget(ids: Iterable<string>): void {
    if (this.byId.size === 0) return;
    for (const id of ids) this.byId.delete(id);
  }

  /**
   * The ledger of one apply: what landed before is skipped; what this apply inserts is kept
   * aside and recorded by `commit()` (called when the reports may be applied again).
   */
  ledger(): RowLedger & { commit(): void } {
    const inserted: [string, readonly string[]][] = [];
    return {
      landed: (table, id) => this.byId.size > 0 && this.has(table, id),
      inserted: (table, ids) => void inserted.push([table, ids]),
      commit: () => {
        for (const [table, ids] of inserted) this.add(table, ids);
        inserted.length = 0;
      },
    };
  }
}
