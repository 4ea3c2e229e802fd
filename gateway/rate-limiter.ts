// Token buckets, kept in this process's memory: the per-token ingest rate and the per-source rate
// of the rejection log. With N gateway replicas behind a load balancer the effective per-token
// limit is N times the configured one (documented in docs/operations.md); no round trip per request.

interface Bucket {
  tokens: number;
  last: number;
}

export class RateLimiter {
  private buckets = new Map<string, Bucket>();

  constructor(
    private readonly ratePerS: number,
    private readonly burst: number,
    private readonly maxKeys = 200_000,
  ) {}

  /** Takes one token; false when the bucket is empty. */
  take(key: string, now = Date.now()): boolean {
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxKeys) this.prune(now);
      b = { tokens: this.burst, last: now };
      this.buckets.set(key, b);
    } else if (now > b.last) {
      b.tokens = Math.min(this.burst, b.tokens + ((now - b.last) * this.ratePerS) / 1000);
      b.last = now;
    }
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** Seconds until one token is available again (for Retry-After). */
  retryAfterS(): number {
    return Math.max(1, Math.ceil(1 / this.ratePerS));
  }

  /** Drops buckets that are full again (idle keys); they would be recreated full anyway. */
  prune(now = Date.now()): void {
    for (const [k, b] of this.buckets) {
      if (b.tokens + ((now - b.last) * this.ratePerS) / 1000 >= this.burst) this.buckets.delete(k);
    }
    if (this.buckets.size >= this.maxKeys) this.buckets.clear();
  }
}
