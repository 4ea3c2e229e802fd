// Who a credential belongs to, kept in memory so a request does not pay a Postgres round trip to
// learn it (the api's CPU per list request, bench/README.md "The principal from memory"). Cached:
// the rows api/auth.ts judges, an API token's (by its hash) and a session's (user, active customer,
// session); the judging (revoked, expired, scope, role) runs on every request as before, against
// the clock, so an expiry needs nothing from here.
//
// A cached row is dropped the moment it may have changed:
//   - Postgres notifies `fleet_auth_changed` from statement triggers on api_tokens, customers,
//     users, memberships and sessions (migration 0027): every api replica listens
//     (lib/infra/pg-listen.ts) and empties its cache on each notice; whoever made the change (this
//     api, another replica, the CLI, an operator's SQL);
//   - a request of this process that may have written (any method but GET and HEAD, answered
//     below 400) empties it before its answer is sent, so what this replica's answer says was done
//     holds for its next request (a refused one, a failed login, does not: a flood of them would
//     empty the copy for everyone);
//   - while the LISTEN connection is down nothing is cached (each request queries, as without the
//     cache), and what was cached is dropped, since a notice may have gone unheard;
//   - a row read while a notice arrived is not kept (the generation below);
//   - an entry is read again after `maxAgeMs` at the latest (a safety net, not the mechanism).
// Another replica sees a change when its notice arrives: milliseconds after the commit.
export interface PrincipalCacheStats {
  hit(): void;
  miss(): void;
  off(): void;
}

interface Entry {
  value: unknown;
  at: number;
}

export class PrincipalCache {
  private map = new Map<string, Entry>();
  private gen = 0;
  private live = false;

  constructor(
    private readonly maxAgeMs: number,
    private readonly maxEntries = 50_000,
    private readonly stats: PrincipalCacheStats | null = null,
  ) {}

  /** Whether rows may be kept: the LISTEN connection is up (and the cache is on). */
  get on(): boolean {
    return this.live && this.maxAgeMs > 0;
  }

  /** The listener's state (lib/infra/pg-listen.ts): either way, what is cached may be stale. */
  setLive(up: boolean): void {
    this.live = up;
    this.invalidate();
  }

  /** Drops every entry, and every row being read right now. */
  invalidate(): void {
    this.gen++;
    this.map.clear();
  }

  get size(): number {
    return this.map.size;
  }

  /** The row under `key`, from memory or from `load` (kept when `keep` says so and nothing changed meanwhile). */
  async get<T>(key: string, load: () => Promise<T>, keep: (v: T) => boolean): Promise<T> {
    if (!this.on) {
      this.stats?.off();
      return load();
    }
    const now = Date.now();
    const e = this.map.get(key);
    if (e && now - e.at < this.maxAgeMs) {
      this.stats?.hit();
      return e.value as T;
    }
    this.stats?.miss();
    const gen = this.gen;
    const v = await load();
    if (gen === this.gen && this.on && keep(v)) {
      if (this.map.size >= this.maxEntries) this.map.clear();
      this.map.set(key, { value: v, at: now });
    }
    return v;
  }
}
