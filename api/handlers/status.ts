// Latest status (Postgres instances.snapshot) and status history (ClickHouse status_history) of
// one instance, with typed snapshot leaves (5.10.0) resolved (lib/domain/snapshot.ts). The raw tree as the
// agent sent it stays available at GET /api/instances/{id}.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { badRequest } from '../../lib/contract/errors.js';
import { resolveSnapshot } from '../../lib/domain/snapshot.js';
import { queryRows } from '../../lib/infra/clickhouse.js';
import { chInt } from '../../lib/infra/clickhouse-sql.js';
import { ownedInstance, ownedInstanceRows } from '../ownership.js';

function parseSnapshot(s: string): unknown {
  if (!s) return null;
  try {
    return JSON.parse(s);
  } catch {
    return null;
  }
}

export function statusHandlers(d: ApiDeps): HandlersOf<'get_instance_status' | 'list_instance_status_history'> {
  const exists = (customerId: string, id: string) =>
    ownedInstance<{ status: string | null; status_message: string | null; status_at: Date | null; snapshot: unknown }>(d.pool, customerId, id, 'status, status_message, status_at, snapshot');

  return {
    async get_instance_status(req) {
      const p = principal(req);
      const { id } = req.params;
      const row = await exists(p.customerId, id);
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
      const cond = await ownedInstanceRows(d.pool, p.customerId, req.params.id);
      const from = q.from ? Date.parse(q.from) : null;
      const to = q.to ? Date.parse(q.to) : null;
      if (from !== null && to !== null && from > to) throw badRequest('from is after to');
      if (from !== null) cond.push(`received_ms >= ${chInt(Math.max(0, from))}`);
      if (to !== null) cond.push(`received_ms <= ${chInt(Math.max(0, to))}`);
      const withSnapshot = q.snapshot !== false;
      const rows = await queryRows<Record<string, string | number>>(
        d.ch,
        `SELECT report_id, received_ms, status, message${withSnapshot ? ', snapshot' : ''}
           FROM status_history FINAL WHERE ${cond.join(' AND ')}
          ORDER BY received_ms DESC, report_id LIMIT ${chInt(q.limit ?? 100)}`,
      );
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
