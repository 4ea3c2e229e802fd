// The diagnostics whitelist on the worker side: every customer's rules in memory (lib/synced-map.ts,
// polled every CACHE_REFRESH_MS, so a rule created, changed or deleted through the api applies on
// every worker replica within about a second), compiled once (lib/whitelist.ts). `classify` decides
// per diagnostic item, synchronously, which rule (if any) suppresses it.
//
// Rules apply when a worker processes the report, not when the gateway received it (normally the
// same moment). A batch applied twice across a rule change may store the newer decision; both are
// valid and the row count is the same (ReplacingMergeTree keyed by report id and item).
import type { Pool } from '../lib/db/postgres.js';
import type { Report } from '../lib/messages.js';
import type { Diagnostics } from '../lib/schemas/ingest.js';
import { SyncedMap } from '../lib/synced-map.js';
import { compileRule, matchRule, ruleOrder, type CompiledRule, type RuleRow } from '../lib/whitelist.js';

interface Row extends RuleRow {
  deleted_at: Date | null;
  updated_at: Date;
}

const SELECT = `SELECT id, customer_id, machine_pattern, software_pattern, code_from, code_to, message_pattern,
                       enabled, created_at, updated_at, deleted_at FROM whitelist_rules`;

/** Per report: the suppressing rule id of each diagnostics item, or null. */
export type Suppression = Map<Report, (string | null)[]>;

export class WhitelistCache extends SyncedMap<Row, CompiledRule | null> {
  private index = new Map<string, CompiledRule[]>();
  private indexedAt = -1;

  constructor(pool: Pool, intervalMs: number, onError: (e: unknown) => void) {
    super({
      pool,
      fullQuery: `${SELECT} WHERE deleted_at IS NULL`,
      // Deleted rows too: the delta must tell that a rule went away.
      deltaQuery: `${SELECT} WHERE updated_at > $1`,
      key: (r) => r.id,
      value: (r) => (r.deleted_at === null && r.enabled ? compileRule(r) : null),
      intervalMs,
      onError,
    });
  }

  private rulesFor(customerId: string): CompiledRule[] | undefined {
    if (this.indexedAt !== this.lastRefresh) {
      const next = new Map<string, CompiledRule[]>();
      for (const r of this.values()) {
        if (!r) continue;
        const list = next.get(r.customerId);
        if (list) list.push(r);
        else next.set(r.customerId, [r]);
      }
      for (const list of next.values()) list.sort(ruleOrder);
      this.index = next;
      this.indexedAt = this.lastRefresh;
    }
    return this.index.get(customerId);
  }

  /** Which diagnostics of these reports a rule suppresses; reports without any are left out. */
  classify(reports: Report[]): Suppression {
    const out: Suppression = new Map();
    for (const r of reports) {
      if (r.k !== 'diagnostics') continue;
      const rules = this.rulesFor(r.c);
      if (!rules || rules.length === 0) continue;
      const items = (r.b as Diagnostics).items;
      let any = false;
      const ids = items.map((it) => {
        const id = matchRule(rules, r.m, r.s, it.code, it.message ?? '');
        if (id) any = true;
        return id;
      });
      if (any) out.set(r, ids);
    }
    return out;
  }
}
