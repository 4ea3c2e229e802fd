// A read-only copy of a small Postgres table kept in memory on every replica, refreshed by
// polling: rows changed since the last poll (by their updated_at, with an overlap that covers
// transactions committing late) every `intervalMs`, and the whole table every `fullEveryMs`.
// The hot paths extend it for what they must know without a query per request: the gateway's
// tokens (gateway/token-cache.ts), licences (gateway/licence-gate.ts) and help-text coverage
// (gateway/help-coverage.ts), the workers' whitelist rules (workers/whitelist-cache.ts), the
// quota overrides and stored artifact bytes (lib/store/quotas.ts).
//
// The map knows no SQL: it reads through a `SyncedSource`, which the store module of the table
// implements (lib/store/tokens.ts `tokenCopy`, …; infra does not import the store, the types flow
// downwards).
import type { Pool } from './postgres.js';

/** How a copy reads its table: implemented by the table's store module. */
export interface SyncedSource<R> {
  /** The database's clock: the next delta reads from this time (less the overlap). */
  now(pool: Pool): Promise<Date>;
  /** Every row the copy holds. */
  all(pool: Pool): Promise<R[]>;
  /**
   * The rows changed after `since` (by their updated_at). A row the copy must forget comes back
   * too, in a shape `value` tells apart (e.g. a deleted whitelist rule): the map only sets.
   */
  changedSince(pool: Pool, since: Date): Promise<R[]>;
}

export interface SyncedMapOptions<R, V> {
  pool: Pool;
  source: SyncedSource<R>;
  key(row: R): string;
  value(row: R): V;
  intervalMs: number;
  fullEveryMs?: number;
  overlapMs?: number;
  onError?(e: unknown): void;
}

export class SyncedMap<R, V> {
  private map = new Map<string, V>();
  private since: Date | null = null;
  private lastFull = 0;
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  /** Time of the last successful refresh (ms); readiness checks can look at it. */
  lastRefresh = 0;

  constructor(private readonly opts: SyncedMapOptions<R, V>) {}

  get(key: string): V | undefined {
    return this.map.get(key);
  }

  set(key: string, value: V): void {
    this.map.set(key, value);
  }

  get size(): number {
    return this.map.size;
  }

  values(): IterableIterator<V> {
    return this.map.values();
  }

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh().catch((e) => this.opts.onError?.(e)), this.opts.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  async refresh(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const { pool, source } = this.opts;
      const overlap = this.opts.overlapMs ?? 10_000;
      const dbNow = await source.now(pool);
      const full = this.since === null || Date.now() - this.lastFull >= (this.opts.fullEveryMs ?? 60_000);
      if (full) {
        const rows = await source.all(pool);
        const next = new Map<string, V>();
        for (const r of rows) next.set(this.opts.key(r), this.opts.value(r));
        this.map = next;
        this.lastFull = Date.now();
      } else {
        const from = new Date(this.since!.getTime() - overlap);
        const rows = await source.changedSince(pool, from);
        for (const r of rows) this.map.set(this.opts.key(r), this.opts.value(r));
      }
      this.since = dbNow;
      this.lastRefresh = Date.now();
    } finally {
      this.running = false;
    }
  }
}
