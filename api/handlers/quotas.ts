// The quotas of the caller's customer (GET /api/quotas): each quota's value, the default it
// overrides or not, and what is used of it now. Read from Postgres and Redis at the request: the
// api shows an override at once; the gateways apply it within CACHE_REFRESH_MS (lib/store/quotas.ts).
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError } from '../../lib/contract/errors.js';
import { loadArtifactStored, loadOverrides, quotaDefaults, quotaView, countQuotaUse } from '../../lib/store/quotas.js';
import { ArtifactUsage } from '../../lib/store/artifact-usage.js';

export function quotaHandlers(d: ApiDeps): HandlersOf<'list_quotas'> {
  const defaults = quotaDefaults(d.cfg);
  const usage = new ArtifactUsage(d.redis, d.cfg.redisPrefix);
  return {
    async list_quotas(req) {
      const p = principal(req);
      const id = p.customerId;
      const [overrides, stored, counts] = await Promise.all([
        loadOverrides(d.pool, id),
        loadArtifactStored(d.pool, id),
        countQuotaUse(d.pool, id),
      ]);
      const reserved = await usage.reserved(id, stored.seq).catch((e: unknown) => {
        req.log.warn({ err: e }, 'reading artifact reservations failed');
        throw new HttpError(503, 'the reservations of uploads in progress (Redis) could not be read; retry', { retryAfterS: 2 });
      });
      const q = quotaView(defaults, overrides);
      const scoped = <K extends keyof typeof q>(k: K, scope: string) => ({ ...q[k], scope });
      return {
        customer: p.customer,
        quotas: {
          artifact_bytes: {
            ...scoped('artifact_bytes', 'customer'),
            used: stored.bytes + reserved.bytes,
            stored: stored.bytes,
            artifacts: stored.artifacts,
            reserved: reserved.bytes,
            uploads_in_progress: reserved.uploads,
          },
          artifact_max_bytes: scoped('artifact_max_bytes', 'artifact'),
          stream_connections: { ...scoped('stream_connections', 'api_replica'), used: d.lights.countOf(id) },
          webhooks: { ...scoped('webhooks', 'customer'), used: counts.webhooks },
          whitelist_rules: { ...scoped('whitelist_rules', 'customer'), used: counts.rules },
          timeout_rules: { ...scoped('timeout_rules', 'customer'), used: counts.timeoutRules },
          ingest_requests_per_s: scoped('ingest_requests_per_s', 'customer'),
          ingest_bytes_per_s: scoped('ingest_bytes_per_s', 'customer'),
          maintenance_windows: { ...scoped('maintenance_windows', 'customer'), used: counts.maintenance_windows },
        },
        refresh_ms: d.cfg.cacheRefreshMs,
      };
    },
  };
}
