// Every API token (hash, customer, scopes, revoked, expiry, machine binding) in memory: the ingest
// hot path authorises without a query. Refreshed every CACHE_REFRESH_MS, so a revocation is
// effective on every replica from its next refresh on (test/servers/token-cache.test.ts); an expiry needs no refresh (the copy holds the
// time, and each request compares it with the clock). A token unknown to the copy (created a moment
// ago on another replica) is looked up once, under a global budget, so a flood of random tokens
// cannot reach Postgres. Uses are noted in memory and written in the background (lib/store/token-usage.ts).
// The reads (the copy's and the lookup): lib/store/tokens.ts.
import { hashToken } from '../lib/contract/ids.js';
import type { Pool } from '../lib/infra/postgres.js';
import { SyncedMap } from '../lib/infra/synced-map.js';
import { compilePattern, type Matcher } from '../lib/domain/whitelist.js';
import type { TokenUsage } from '../lib/store/token-usage.js';
import { tokenCopy, tokenCopyRowByHash, type TokenCopyRow } from '../lib/store/tokens.js';
import { RateLimiter } from './rate-limiter.js';

export interface TokenInfo {
  id: string;
  customerId: string;
  customer: string;
  scopes: string[];
  revoked: boolean;
  /** Refused from this time on (ms since the epoch); Infinity: never. */
  expiresMs: number;
  /** The machine (or machine-name pattern) the token is bound to; null: any machine of its customer. */
  machine: string | null;
  /** `machine` compiled (a compare for a plain slug); null when unbound. */
  machineOk: Matcher | null;
  /** When this copy last noted a use (ms): a token is noted at most once a second per replica. */
  usedAt: number;
}

export class TokenCache extends SyncedMap<TokenCopyRow, TokenInfo> {
  /** Bearer string -> hash, so the hot path hashes each distinct token once. */
  private hashes = new Map<string, string>();
  private misses = new Map<string, number>();
  private missBudget = new RateLimiter(50, 100);

  constructor(
    private readonly pool: Pool,
    intervalMs: number,
    onError: (e: unknown) => void,
    private readonly usage: TokenUsage | null = null,
  ) {
    super({
      pool,
      source: tokenCopy,
      key: (r) => r.token_hash,
      value: toInfo,
      intervalMs,
      onError,
    });
  }

  private hashOf(bearer: string): string {
    let h = this.hashes.get(bearer);
    if (h === undefined) {
      h = hashToken(bearer);
      if (this.hashes.size > 100_000) this.hashes.clear();
      this.hashes.set(bearer, h);
    }
    return h;
  }

  /** Synchronous answer from the copy: the token, or undefined when the copy does not know it. */
  peek(bearer: string): TokenInfo | undefined {
    return this.get(this.hashOf(bearer));
  }

  /** Notes a use of `t` (written in the background, lib/store/token-usage.ts): a compare on most requests. */
  touch(t: TokenInfo, now: number): void {
    if (now - t.usedAt < 1000 || this.usage === null) return;
    t.usedAt = now;
    this.usage.mark(t.id, now);
  }

  /** The slow path for a token the copy does not know: one query, within the global budget. */
  async lookup(bearer: string): Promise<TokenInfo | undefined> {
    const hash = this.hashOf(bearer);
    const known = this.get(hash);
    if (known) return known;
    const now = Date.now();
    const missedAt = this.misses.get(hash);
    if (missedAt !== undefined && now - missedAt < 2000) return undefined;
    if (!this.missBudget.take('all', now)) return undefined;
    const row = await tokenCopyRowByHash(this.pool, hash);
    if (!row) {
      if (this.misses.size > 10_000) this.misses.clear();
      this.misses.set(hash, now);
      return undefined;
    }
    const info = toInfo(row);
    this.set(hash, info);
    return info;
  }
}

function toInfo(r: TokenCopyRow): TokenInfo {
  return {
    id: r.id,
    customerId: r.customer_id,
    customer: r.customer,
    scopes: r.scopes,
    revoked: r.revoked_at !== null,
    expiresMs: r.expires_at ? r.expires_at.getTime() : Infinity,
    machine: r.machine,
    machineOk: r.machine === null ? null : compilePattern(r.machine),
    usedAt: 0,
  };
}
