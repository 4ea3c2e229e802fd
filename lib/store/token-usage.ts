// When each API token was last used (`api_tokens.last_used_at`), recorded without costing a request
// anything: the gateway's hot path (and the api's token check) only notes the token id and the time
// in memory (`mark`: one Map write); a timer writes what was noted every TOKEN_USAGE_FLUSH_MS, in
// one UPDATE per 5000 tokens, off every request's path. The UPDATE writes a row only when its
// last_used_at is a minute (RESOLUTION_S) or more older than the use, so a token is written at most
// once a minute however many replicas use it (two replicas flushing at once: the second finds the
// row already written and skips it). The column is therefore accurate to about a minute plus the
// flush interval. Writing it does not move the row's updated_at (lib/store/schema.ts, migration
// 0011), so the gateways' token copies do not re-read a row for being used.
//
// A flush that fails (Postgres away) keeps what it held for the next one; a process that stops
// flushes once more on the way out (what a crash loses is at most one interval of marks).
import type { Pool } from '../infra/postgres.js';

/** A use is written when the stored one is at least this much older. */
export const RESOLUTION_S = 60;
const CHUNK = 5000;

export interface TokenUsageOptions {
  pool: Pool;
  flushMs: number;
  /** After each flush: rows written, and uses left alone because the row had one within the minute. */
  onFlush?(written: number, skipped: number): void;
  onError?(e: unknown): void;
}

export class TokenUsage {
  private pending = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;

  constructor(private readonly o: TokenUsageOptions) {}

  /** A use of token `id` at `at` (ms since the epoch). */
  mark(id: string, at: number): void {
    const was = this.pending.get(id);
    if (was === undefined || was < at) this.pending.set(id, at);
  }

  get size(): number {
    return this.pending.size;
  }

  start(): void {
    this.timer = setInterval(() => void this.flush().catch((e) => this.o.onError?.(e)), this.o.flushMs);
    this.timer.unref();
  }

  /** Stops the timer and writes what is left. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush().catch((e) => this.o.onError?.(e));
  }

  /** Writes the uses noted so far (one flush at a time). */
  flush(): Promise<void> {
    this.flushing ??= this.write().finally(() => (this.flushing = null));
    return this.flushing;
  }

  private async write(): Promise<void> {
    if (this.pending.size === 0) return;
    const all = [...this.pending];
    this.pending = new Map();
    let written = 0;
    let done = 0;
    try {
      for (let i = 0; i < all.length; i += CHUNK) {
        const part = all.slice(i, i + CHUNK);
        written += await writeLastUsed(this.o.pool, part);
        done += part.length;
      }
    } catch (e) {
      // Kept for the next flush (a newer mark made meanwhile wins).
      for (const [id, at] of all.slice(done)) this.mark(id, at);
      throw e;
    } finally {
      if (done > 0) this.o.onFlush?.(written, done - written);
    }
  }
}

/** Writes `last_used_at` of each token whose stored value is RESOLUTION_S or more older than its use; the number of rows written. */
export async function writeLastUsed(pool: Pool, uses: [string, number][]): Promise<number> {
  if (uses.length === 0) return 0;
  const r = await pool.query(
    `UPDATE api_tokens t SET last_used_at = u.at
       FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, at)
      WHERE t.id = u.id AND (t.last_used_at IS NULL OR t.last_used_at <= u.at - make_interval(secs => $3))`,
    [uses.map(([id]) => id), uses.map(([, at]) => new Date(at).toISOString()), RESOLUTION_S],
  );
  return r.rowCount ?? 0;
}
