// Token buckets, kept in this process's memory: the gateway's per-token and per-customer ingest
// rates and the per-source rate of its rejection log. With N replicas behind a load balancer the
// effective limit is N times the configured one (documented in docs/operations.md); no round trip
// per request.

interface Bucket {
  tokens: number;
  last: number;
}

/** A bucket's own rate, where it differs from the limiter's (a customer's quota override). */
export interface Rate {
  perS: number;
  burst: number;
}

export class RateLimiter {
  private buckets = new Map<string, Bucket>();

  constructor(
    private readonly ratePerS: number,
    private readonly burst: number,
    private readonly maxKeys = 200_000,
  ) {}

  /** Takes one token; false when the bucket is empty. */
  take(key: string, now = Date.now(), rate?: Rate): boolean {
    return this.takeUpTo(key, 1, now, rate) === 1;
  }

  /**
   * Takes up to `n` tokens, as many as the bucket holds: how many it took (a batch request counts
   * its entries; those beyond the budget are refused one by one).
   */
  takeUpTo(key: string, n: number, now = Date.now(), rate?: Rate): number {
    const b = this.bucket(key, now, rate);
    const taken = Math.max(0, Math.min(n, Math.floor(b.tokens)));
    b.tokens -= taken;
    return taken;
  }

  /** Takes `n` tokens if the bucket holds them all, else none (bytes of a body: all or nothing). */
  takeAll(key: string, n: number, now = Date.now(), rate?: Rate): boolean {
    const b = this.bucket(key, now, rate);
    if (b.tokens < n) return false;
    b.tokens -= n;
    return true;
  }

  /** Gives back tokens taken for work that did not happen (capped at the burst). */
  refund(key: string, n: number, rate?: Rate): void {
    const b = this.buckets.get(key);
    if (b) b.tokens = Math.min(rate?.burst ?? this.burst, b.tokens + n);
  }

  /** Whether `n` tokens (default one) are there, without taking them (a check before a body arrives). */
  has(key: string, now = Date.now(), rate?: Rate, n = 1): boolean {
    return this.bucket(key, now, rate).tokens >= n;
  }

  private bucket(key: string, now: number, rate?: Rate): Bucket {
    const burst = rate?.burst ?? this.burst;
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxKeys) this.prune(now);
      b = { tokens: burst, last: now };
      this.buckets.set(key, b);
    } else if (now > b.last) {
      b.tokens = Math.min(burst, b.tokens + ((now - b.last) * (rate?.perS ?? this.ratePerS)) / 1000);
      b.last = now;
    }
    return b;
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
