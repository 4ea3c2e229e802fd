// Counts per traffic-light colour of a customer's instances (all of them, or those matching the
// list's filters): the fleet summary and the `total` of GET /api/instances. Counting reads every
// matching row (the stored colour, joined to the instance for the filters and its retirement),
// which at 100,000 instances costs more than the page itself; so counts are cached per customer and filter for
// API_COUNT_CACHE_MS (default 1 s), and concurrent requests for the same count share one query
// (single flight). A count is at most that old when answered; the rows of a page never are.
// Bounded: at most 10,000 entries per api process, least recently used first out. A count whose
// entry is pushed out while its query is under way (more distinct filters at once than entries:
// the exact-machine filter over 25,000 machines did it) is still answered with that query's
// result: lru-cache would otherwise reject the waiting requests with `evicted`, a 500 (bench/README.md
// "The 500 of the exact machine").
import { LRUCache } from 'lru-cache';
import type { ApiDeps } from './types.js';
import { countLights, type InstanceFilter, type LightCountsValue } from '../lib/store/instances.js';

export type { LightCountsValue };

/** The list's filters other than the colour (a count serves every colour of a filter). */
export type CountFilter = InstanceFilter;

export class LightCounts {
  private readonly cache: LRUCache<string, LightCountsValue, { customerId: string; filter: CountFilter }> | null;

  constructor(
    private readonly d: Pick<ApiDeps, 'cfg' | 'pool'>,
    max = 10_000,
  ) {
    const ttl = d.cfg.api.countCacheMs;
    this.cache =
      ttl > 0
        ? new LRUCache({
            max,
            ttl,
            // An entry evicted (or replaced) while its query runs: the query goes on, and the
            // requests waiting for it get its result instead of an `evicted` rejection.
            ignoreFetchAbort: true,
            // A count is cached from when its query started: never older than the TTL when served.
            ttlAutopurge: false,
            fetchMethod: (_key, _stale, { context }) => this.query(context.customerId, context.filter),
          })
        : null;
  }

  /** Counts per colour for this customer and filter (at most API_COUNT_CACHE_MS old). */
  async get(customerId: string, filter: CountFilter = {}): Promise<LightCountsValue> {
    if (!this.cache) return this.query(customerId, filter);
    const key = JSON.stringify([customerId, filter.machine ?? null, filter.software ?? null, filter.group ?? null, filter.location ?? null, filter.q || null]);
    const v = await this.cache.fetch(key, { context: { customerId, filter } });
    return v!;
  }

  private query(customerId: string, filter: CountFilter): Promise<LightCountsValue> {
    return countLights(this.d.pool, customerId, filter);
  }
}

const perDeps = new WeakMap<ApiDeps, LightCounts>();

/** The counts of this api (one cache per process, shared by the handlers). */
export function lightCounts(d: ApiDeps): LightCounts {
  let c = perDeps.get(d);
  if (!c) perDeps.set(d, (c = new LightCounts(d)));
  return c;
}
