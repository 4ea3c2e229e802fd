// The diagnostics whitelist on the worker side: every customer's rules in memory (lib/infra/synced-map.ts,
// polled every CACHE_REFRESH_MS, so a rule created, changed or deleted through the api applies on
// every worker replica within about a second), compiled per customer when its rules change
// (lib/domain/whitelist.ts: one automaton for all of a customer's message patterns). `classify` decides per
// diagnostic item, synchronously, which rule (if any) suppresses it, in time linear in the message
// and the number of rules (docs/operations.md "Whitelist matching").
//
// Rules apply when a worker processes the report, not when the gateway received it (normally the
// same moment). A batch applied twice across a rule change may store the newer decision; both are
// valid and the row count is the same (ReplacingMergeTree keyed by report id and item).
// The reads: lib/store/whitelist.ts (`whitelistCopy`).
import type { Pool } from '../lib/infra/postgres.js';
import type { Report } from '../lib/contract/messages.js';
import type { Diagnostics } from '../lib/contract/schemas/ingest.js';
import { SyncedMap } from '../lib/infra/synced-map.js';
import { RuleSet, ruleOrder } from '../lib/domain/whitelist.js';
import { whitelistCopy, type WhitelistCopyRow } from '../lib/store/whitelist.js';

/** Per report: the suppressing rule id of each diagnostics item, or null. */
export type Suppression = Map<Report, (string | null)[]>;

export interface WhitelistLog {
  warn(o: object, msg: string): void;
}

interface Compiled {
  /** The rules' ids and versions: a customer's set is compiled again only when they change. */
  sig: string;
  set: RuleSet;
  /** The refresh at which `sig` was last compared. */
  at: number;
  /** Not compiled again before this (ms): see COMPILE_SHARE. */
  nextCompileAt: number;
}

/**
 * Compiling is synchronous and costs up to ~0.4 s for the largest rule set the limits allow: a
 * customer that changes its rules without pause must not hold the worker's event loop for everyone.
 * After a compile that took c ms, that customer's set is compiled again no sooner than c / COMPILE_SHARE
 * ms later (at most 5 % of a worker's time; a set of typical size, a few ms, is not held back), and
 * until then its previous set applies (docs/operations.md "Whitelist matching").
 */
const COMPILE_SHARE = 0.05;

export class WhitelistCache extends SyncedMap<WhitelistCopyRow, WhitelistCopyRow | null> {
  private rows = new Map<string, WhitelistCopyRow[]>();
  private compiled = new Map<string, Compiled>();
  private indexedAt = -1;

  constructor(
    pool: Pool,
    intervalMs: number,
    onError: (e: unknown) => void,
    private readonly log?: WhitelistLog,
  ) {
    super({
      pool,
      // The delta brings deleted rules too: they become null here, and drop out of their customer's set.
      source: whitelistCopy,
      key: (r) => r.id,
      value: (r) => (r.deleted_at === null && r.enabled ? r : null),
      intervalMs,
      onError,
    });
  }

  /**
   * A customer's compiled rules. After each refresh the rows are grouped again; a customer's set is
   * compiled on its first use after its rules changed (ids and updated_at), the others keep theirs.
   */
  rulesFor(customerId: string): RuleSet | undefined {
    if (this.indexedAt !== this.lastRefresh) {
      const groups = new Map<string, WhitelistCopyRow[]>();
      for (const r of this.values()) {
        if (!r) continue;
        const list = groups.get(r.customer_id);
        if (list) list.push(r);
        else groups.set(r.customer_id, [r]);
      }
      this.rows = groups;
      for (const c of this.compiled.keys()) if (!groups.has(c)) this.compiled.delete(c);
      this.indexedAt = this.lastRefresh;
    }
    const rows = this.rows.get(customerId);
    if (!rows) return undefined;
    let entry = this.compiled.get(customerId);
    if (entry?.at === this.indexedAt) return entry.set;
    rows.sort(ruleOrder);
    const sig = rows.map((r) => `${r.id}@${r.updated_at.getTime()}`).join(',');
    if (entry?.sig !== sig) {
      const now = Date.now();
      // Compiled a moment ago: the previous set applies a little longer (COMPILE_SHARE).
      if (entry && now < entry.nextCompileAt) return entry.set;
      const started = performance.now();
      const set = new RuleSet(rows);
      const ms = performance.now() - started;
      // Rules stored before the matching limits are applied exactly, at a higher cost: say which.
      if (set.overLimits.length) this.log?.warn({ customer_id: customerId, rules: set.overLimits }, 'whitelist rules over the matching limits (created before them): applied exactly, at a higher cost per diagnostic');
      if (ms > 100) this.log?.warn({ customer_id: customerId, rules: rows.length, ms: Math.round(ms) }, 'whitelist rules compiled slowly; the next compile of this customer waits');
      entry = { sig, set, at: this.indexedAt, nextCompileAt: now + ms / COMPILE_SHARE };
      this.compiled.set(customerId, entry);
    } else entry.at = this.indexedAt;
    return entry.set;
  }

  /** Which diagnostics of these reports a rule suppresses; reports without any are left out. */
  classify(reports: Report[]): Suppression {
    const out: Suppression = new Map();
    for (const r of reports) {
      if (r.kind !== 'diagnostics') continue;
      const rules = this.rulesFor(r.customerId);
      if (!rules || rules.size === 0) continue;
      const items = (r.body as Diagnostics).items;
      const candidates = rules.forInstance(r.machine, r.software);
      if (candidates.length === 0) continue;
      let any = false;
      const ids = items.map((it) => {
        const id = rules.match(candidates, it.code, it.message ?? '');
        if (id) any = true;
        return id;
      });
      if (any) out.set(r, ids);
    }
    return out;
  }
}
