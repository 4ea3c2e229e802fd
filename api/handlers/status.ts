// Latest status (Postgres instances.snapshot) and status history (ClickHouse status_history) of
// one instance, with typed snapshot leaves (5.10.0) resolved (lib/domain/snapshot.ts). The raw tree as the
// agent sent it stays available at GET /api/instances/{id}.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { badRequest } from '../../lib/contract/errors.js';
import { resolveSnapshot } from '../../lib/domain/snapshot.js';
import { ownedInstance, ownedInstanceStatus } from '../../lib/store/instances.js';
import { listStatusHistory } from '../../lib/store/history.js';

function parseSnapshot(s: string): unknown {
  if (!s) return null;
  try {
    return JSON.parse(s);
  } catch {
    return null;
  }
}

export function statusHandlers(d: ApiDeps): HandlersOf<'get_instance_status' | 'list_instance_status_history'> {
  return {
    async get_instance_status(req) {
      const p = principal(req);
      const { id } = req.params;
      const row = await ownedInstanceStatus(d.pool, p.customerId, id);
      return {
        instance_id: id,
        status: row.status,
        message: row.status_message,
        status_at: row.status_at ? row.status_at.toISOString() : null,
        snapshot: row.snapshot === null || row.snapshot === undefined ? null : resolveSnapshot(row.snapshot),
      };
    },

    async list_instance_status_history(req) {
      const p = principal(req);
      const q = req.query;
      await ownedInstance(d.pool, p.customerId, req.params.id);
      const from = q.from ? Date.parse(q.from) : null;
      const to = q.to ? Date.parse(q.to) : null;
      if (from !== null && to !== null && from > to) throw badRequest('from is after to');
      const withSnapshot = q.snapshot !== false;
      const rows = await listStatusHistory(d.ch, p.customerId, req.params.id, { fromMs: from, toMs: to, withSnapshot, limit: q.limit ?? 100 });
      return {
        items: rows.map((r) => {
          const snap = withSnapshot ? parseSnapshot(String(r.snapshot ?? '')) : null;
          return {
            report_id: String(r.report_id),
            received_at: new Date(Number(r.received_ms)).toISOString(),
            status: String(r.status),
            message: String(r.message),
            snapshot: snap === null ? null : resolveSnapshot(snap),
          };
        }),
      };
    },
  };
}
