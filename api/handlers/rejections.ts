// The ingest rejection log (ClickHouse ingest_rejections, written by the workers from the
// gateways' rate-limited records). A customer sees the rows attributed to it (its tokens, or its
// dead-lettered reports); rows with no known customer (missing or unknown token, unknown path)
// only a system admin sees, at /api/admin/ingest-rejections.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { badRequest } from '../../lib/contract/errors.js';
import { listRejections } from '../../lib/store/rejections.js';

interface Query {
  from?: string;
  to?: string;
  status?: number;
  limit?: number;
  customer?: string;
}

export function rejectionHandlers(d: ApiDeps): HandlersOf<'list_ingest_rejections' | 'list_unattributed_ingest_rejections'> {
  async function list(customerId: string, q: Query) {
    const from = q.from ? Date.parse(q.from) : null;
    const to = q.to ? Date.parse(q.to) : null;
    if (from !== null && to !== null && from > to) throw badRequest('from is after to');
    const rows = await listRejections(d.ch, customerId, { fromMs: from, toMs: to, status: q.status, customer: q.customer, limit: q.limit ?? 500 });
    return {
      items: rows.map((r) => ({
        id: String(r.id),
        received_at: new Date(Number(r.received_ms)).toISOString(),
        customer: String(r.customer),
        token_id: r.token_id ? String(r.token_id) : null,
        method: String(r.method),
        path: String(r.path),
        status: Number(r.status),
        detail: String(r.detail),
        body_size: Number(r.body_size),
        remote: String(r.remote),
        dropped: Number(r.dropped),
      })),
    };
  }

  return {
    async list_ingest_rejections(req) {
      const p = principal(req);
      return list(p.customerId, req.query);
    },
    async list_unattributed_ingest_rejections(req) {
      return list('', req.query);
    },
  };
}
