// Traffic light: counts per colour, an instance's changes of colour, the live stream. Every query
// is scoped to the caller's customer.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError } from '../../lib/contract/errors.js';
import { lightCounts } from '../light-counts.js';
import { ownedInstance } from '../../lib/store/instances.js';
import { listLightEvents } from '../../lib/store/history.js';
import { describeQuota, loadQuotas } from '../../lib/store/quotas.js';

const iso = (ms: number | string) => new Date(Number(ms)).toISOString();

/** A customer at its stream quota retries after this (the dashboard retries a refused stream every 30 s anyway). */
const STREAM_RETRY_AFTER_S = 30;

export function trafficLightHandlers(d: ApiDeps): HandlersOf<'fleet_light_stream' | 'fleet_summary' | 'list_instance_light_events'> {
  const quotaRefusals = d.metrics.counter('fleet_quota_refusals_total');
  return {
    async fleet_summary(req) {
      const p = principal(req);
      // The stored colours, like the instance list (the workers keep them exact, events or not:
      // lib/domain/traffic-light.ts); cached per customer for up to API_COUNT_CACHE_MS (api/light-counts.ts).
      const q = req.query;
      const lights = await lightCounts(d).get(p.customerId, { machine: q.machine, software: q.software, group: q.group, location: q.location, q: q.q });
      return { total: Object.values(lights).reduce((a, n) => a + n, 0), lights: { ...lights } };
    },

    async list_instance_light_events(req) {
      const p = principal(req);
      const q = req.query;
      await ownedInstance(d.pool, p.customerId, req.params.id);
      const rows = await listLightEvents(d.ch, p.customerId, req.params.id, {
        fromMs: q.from ? Date.parse(q.from) : undefined,
        toMs: q.to ? Date.parse(q.to) : undefined,
        limit: q.limit ?? 500,
      });
      return {
        items: rows.map((r) => ({
          id: `${r.instance_id}.${r.seq}`,
          instance_id: String(r.instance_id),
          machine_id: String(r.machine_id),
          machine: String(r.machine),
          software: String(r.software),
          seq: Number(r.seq),
          from: String(r.from_light),
          to: String(r.to_light),
          reason: String(r.reason),
          cause: String(r.cause),
          at: iso(r.at_ms),
          recorded_at: iso(r.recorded_ms),
        })),
      };
    },

    async fleet_light_stream(req, reply) {
      const p = principal(req);
      // The customer's quota, read now: an override is in force at the next stream.
      const cap = (await loadQuotas(d.pool, d.cfg, p.customerId)).stream_connections;
      // Both checks after the last await, right before open(): exact on this replica.
      if (d.lights.count >= d.lights.maxClients) {
        throw new HttpError(503, `too many live streams on this api replica (${d.lights.maxClients}); retry later`, { retryAfterS: 5 });
      }
      const open = d.lights.countOf(p.customerId);
      if (open >= cap) {
        quotaRefusals.labels('stream_connections').inc();
        throw new HttpError(
          429,
          `${p.customer} has ${open} live streams open on this api replica, its quota (${describeQuota('stream_connections', cap)} per api replica); close one, or retry later`,
          { retryAfterS: STREAM_RETRY_AFTER_S },
        );
      }
      reply.hijack();
      // The stream writes a keep-alive comment every SSE_KEEPALIVE_S; the idle timeout
      // (API_IDLE_TIMEOUT_MS) must not cut a quiet stream, only one whose writes have stalled (a
      // client that stopped reading). Node's request timeout does not apply: the request is complete.
      const idle = d.cfg.api.idleTimeoutMs;
      req.raw.socket.setTimeout(idle > 0 ? Math.max(idle, d.cfg.api.sseKeepaliveS * 2000 + 5000) : 0);
      // Re-checked every SESSION_STREAM_RECHECK_MS: a revoked session or token closes the stream.
      d.lights.open(p.customerId, reply.raw, p.kind === 'user' ? { kind: 'user', sessionId: p.sessionId!, customerId: p.customerId } : { kind: 'token', tokenId: p.tokenId! });
    },
  };
}
