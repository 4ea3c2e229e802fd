// Instances per stored traffic-light colour, all customers: the metric fleet_worker_instances, and
// through it the alert on the share of red instances (deploy/prometheus/alerts.yml).
//
// Counting is one query over `instances` (a scan: it grows with the fleet). So it is not run per
// worker or per scrape: a scheduled job (workers/jobs.ts) runs it on one worker every
// LIGHT_CENSUS_INTERVAL_MS and keeps the counts in one Redis hash, and every worker reads that hash
// when it is scraped. Every worker thus reports the same numbers (queries take `max by (light)`);
// counts older than five intervals (no worker has counted: Redis or Postgres away) are not reported.
import type { Pool } from '../lib/infra/postgres.js';
import { redisKeys, type Redis } from '../lib/infra/redis.js';
import { LIGHTS } from '../lib/infra/metrics.js';
import { countStoredLights } from '../lib/store/instances.js';

export type LightCounts = Record<(typeof LIGHTS)[number], number>;

export class LightCensus {
  private readonly key: string;

  constructor(
    private readonly pool: Pool,
    private readonly redis: Redis,
    redisPrefix: string,
    private readonly intervalMs: number,
  ) {
    this.key = redisKeys(redisPrefix, redis).lightCensus;
  }

  /** Counts (one query) and stores the counts with their time. */
  async run(): Promise<LightCounts> {
    const rows = await countStoredLights(this.pool);
    const counts = Object.fromEntries(LIGHTS.map((l) => [l, 0])) as LightCounts;
    for (const row of rows) if (row.light in counts) counts[row.light as keyof LightCounts] = Number(row.n);
    await this.redis.hset(this.key, { ...counts, at: Date.now() });
    return counts;
  }

  /** The last counts any worker stored, or null when there are none recent enough. */
  async read(now = Date.now()): Promise<LightCounts | null> {
    const h = await this.redis.hgetall(this.key);
    if (!h.at || now - Number(h.at) > 5 * this.intervalMs) return null;
    return Object.fromEntries(LIGHTS.map((l) => [l, Number(h[l] ?? 0)])) as LightCounts;
  }
}
