// The ingest rates, in memory on each gateway: requests per token, and per customer over all its
// tokens requests (batch entries one each) and body bytes (docs/operations.md "Quotas per
// customer"). Whatever one customer sends, this is what it can cost the pipeline the others share.
// A customer whose quotas a system administrator overrode has its own buckets' sizes
// (lib/store/quotas.ts); every other customer has the defaults.
import { HttpError } from '../lib/contract/errors.js';
import type { Config } from '../lib/infra/config.js';
import type { Metrics } from '../lib/infra/metrics.js';
import type { QuotaCache } from '../lib/store/quotas.js';
import type { TokenInfo } from './token-cache.js';
import type { RateMode } from './types.js';
import { RateLimiter } from './rate-limiter.js';

export class IngestRates {
  private readonly perToken: RateLimiter;
  private readonly customerRequests: RateLimiter;
  private readonly customerBytes: RateLimiter;
  private readonly refusedBy;

  constructor(
    private readonly cfg: Config,
    private readonly quotas: QuotaCache,
    metrics: Metrics<'gateway'>,
  ) {
    const g = cfg.gateway;
    this.perToken = new RateLimiter(g.rateLimit, g.rateBurst);
    this.customerRequests = new RateLimiter(g.customerRate.perS, g.customerRate.burst);
    this.customerBytes = new RateLimiter(g.customerBytes.perS, g.customerBytes.burst);
    const refusals = metrics.counter('fleet_quota_refusals_total');
    this.refusedBy = { requests: refusals.labels('ingest_requests_per_s'), bytes: refusals.labels('ingest_bytes_per_s') };
  }

  /** A customer's own buckets where a system administrator overrode its ingest quotas, else undefined: the defaults. */
  private ratesOf(t: TokenInfo) {
    return this.quotas.ingestRates(t.customerId) ?? undefined;
  }

  /** The 429 of a request (or batch entry) over its token's rate, with Retry-After. */
  overRate(): HttpError {
    return new HttpError(429, `over the rate limit of ${this.cfg.gateway.rateLimit} requests/s for this token`, { retryAfterS: this.perToken.retryAfterS() });
  }

  private overCustomerRate(t: TokenInfo): HttpError {
    this.refusedBy.requests.inc();
    const perS = this.ratesOf(t)?.requests.perS ?? this.cfg.gateway.customerRate.perS;
    return new HttpError(429, `over the ingest rate of ${perS} requests/s for customer ${t.customer} (all its tokens together: quota ingest_requests_per_s)`, { retryAfterS: 1 });
  }

  /** `take`: one token of this token's and its customer's buckets for this request; `has`: only that one is left (a batch takes one per entry once it has read them). */
  refusal(t: TokenInfo, mode: RateMode = 'take'): HttpError | null {
    const now = Date.now();
    const own = this.ratesOf(t);
    if (mode === 'has') return !this.perToken.has(t.id, now) ? this.overRate() : !this.customerRequests.has(t.customerId, now, own?.requests) ? this.overCustomerRate(t) : null;
    if (!this.perToken.take(t.id, now)) return this.overRate();
    if (this.customerRequests.take(t.customerId, now, own?.requests)) return null;
    this.perToken.refund(t.id, 1);
    return this.overCustomerRate(t);
  }

  /** Takes up to `n` requests of this token's and its customer's buckets (a batch's entries): how many both allow. */
  takeUpTo(t: TokenInfo, n: number): number {
    const now = Date.now();
    const byToken = this.perToken.takeUpTo(t.id, n, now);
    const both = this.customerRequests.takeUpTo(t.customerId, byToken, now, this.ratesOf(t)?.requests);
    if (both < byToken) this.perToken.refund(t.id, byToken - both);
    return both;
  }

  /** The customer's byte rate for a body of `size` bytes (all or nothing): null, or the 429. */
  overBytes(t: TokenInfo, size: number): HttpError | null {
    return this.customerBytes.takeAll(t.customerId, size, Date.now(), this.ratesOf(t)?.bytes) ? null : this.overByteRate(t, size);
  }

  /**
   * Before the body: a Content-Length the customer's byte rate cannot take now is refused without
   * reading the body (and the connection closed, so the rest of it is not read either): a customer
   * flooding large bodies costs the gateway no parsing.
   */
  announcedOverBytes(t: TokenInfo | undefined, contentLength: string): HttpError | null {
    if (t === undefined || contentLength === '') return null;
    const size = Number(contentLength);
    if (!(size > 0) || this.customerBytes.has(t.customerId, Date.now(), this.ratesOf(t)?.bytes, size)) return null;
    return this.overByteRate(t, size, true);
  }

  private overByteRate(t: TokenInfo, size: number, close = false): HttpError {
    this.refusedBy.bytes.inc();
    const perS = this.ratesOf(t)?.bytes.perS ?? this.cfg.gateway.customerBytes.perS;
    return new HttpError(429, `over the ingest byte rate of ${perS} bytes/s for customer ${t.customer} (all its tokens together: quota ingest_bytes_per_s)`, {
      retryAfterS: Math.max(1, Math.ceil(size / perS)),
      close,
    });
  }
}
