// The Idempotency-Key register: which body each key was first used with, for IDEMPOTENCY_TTL_S.
// A report sent again with its key is acknowledged again and stored once (the key gives the report
// its id: lib/contract/ids.ts idempotentReportId); the same key with a different body is refused with 422,
// as Stripe refuses it, instead of collapsing two different reports into one.
//
// "The same body" is the same JSON value: the hash is taken over a canonical form (object keys
// sorted, numbers as JavaScript reads them), so a client that re-serialises its retry with other
// spacing or key order is still recognised. Bodies are bounded by JSON_MAX_DEPTH before they get
// here (gateway/json-scan.ts), so the walk below cannot run out of stack.
//
// One round trip per request (a batch: one for all its keyed entries): SET NX GET per key. The
// key is claimed before the report is published: a publish that then fails (503) leaves the claim,
// so the retry must send the same body (it does: it is a retry).
import { createHash, type Hash } from 'node:crypto';
import type { Redis } from '../lib/infra/redis.js';
import { redisKeys } from '../lib/infra/redis.js';
import { HttpError, unprocessable } from '../lib/contract/errors.js';

export type Claim = 'new' | 'same' | 'different';

/** The same Idempotency-Key (same endpoint) with a different body. */
export const keyReused = () =>
  unprocessable('this Idempotency-Key was already used with a different body for this endpoint (kind, machine, software) within 24 h; use a new key for a new report');
export const keyRegisterUnavailable = () => new HttpError(503, 'the Idempotency-Key register (Redis) is unavailable; retry', { retryAfterS: 2 });

export class IdempotencyRegister {
  private readonly keys;

  constructor(
    private readonly redis: Redis,
    prefix: string,
    private readonly ttlS: number,
  ) {
    this.keys = redisKeys(prefix, redis);
  }

  /** For each report (id and parsed body), whether its key is new, was used with this body, or with another. */
  async claim(reports: { id: string; body: unknown }[]): Promise<Claim[]> {
    if (reports.length === 0) return [];
    const hashes = reports.map((r) => bodyHash(r.body));
    // One command per key (the connection pipelines them by itself; in a cluster, per node).
    const results = await Promise.all(reports.map((r, i) => this.redis.set(this.keys.idempotencyBody(r.id), hashes[i]!, 'EX', this.ttlS, 'NX', 'GET')));
    return reports.map((_, i) => {
      const prev = results[i];
      return prev === null ? 'new' : prev === hashes[i] ? 'same' : 'different';
    });
  }
}

/** SHA-256 of a JSON value's canonical form (hex, 32 characters: collisions are not a concern at 128 bits). */
export function bodyHash(value: unknown): string {
  const h = createHash('sha256');
  feed(h, value);
  return h.digest('hex').slice(0, 32);
}

function feed(h: Hash, v: unknown): void {
  if (v === null || typeof v !== 'object') {
    h.update(JSON.stringify(v) ?? 'null');
    return;
  }
  if (Array.isArray(v)) {
    h.update('[');
    for (let i = 0; i < v.length; i++) {
      if (i > 0) h.update(',');
      feed(h, v[i]);
    }
    h.update(']');
    return;
  }
  h.update('{');
  const keys = Object.keys(v).sort();
  for (let i = 0; i < keys.length; i++) {
    if (i > 0) h.update(',');
    h.update(JSON.stringify(keys[i]));
    h.update(':');
    feed(h, (v as Record<string, unknown>)[keys[i]!]);
  }
  h.update('}');
}
