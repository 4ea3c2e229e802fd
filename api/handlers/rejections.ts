// The ingest rejection log (ClickHouse ingest_rejections, written by the workers from the
// gateways' rate-limited records). A customer sees the rows attributed to it (its tokens, or its
// dead-lettered reports); rows with no known customer (missing or unknown token, unknown path)
// only a system admin sees, at /api/admin/ingest-rejections.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { badRequest } from '../../lib/contract/errors.js';
import { queryRows } from '../../lib/infra/clickhouse.js';
import { chStr, chInt } from '../../lib/infra/clickhouse-sql.js';

interface Query {
  from?: string;
  to?: string;
  status?: number;
  limit?: number;
  customer?: string;
}

export function rejectionHandlers(d: ApiDeps): HandlersOf<'list_ingest_rejections' | 'list_unattributed_ingest_rejections'> {
  async function list(customerId: string, q: Query) {
    const cond = [`customer_id = ${chStr(customerId)}`];
    const from = q.from ? Date.parse(q.from) : null;
    const to = q.to ? Date.parse(q.to) : null;
    if (from !== null && to !== null && from > to) throw badRequest('from is after to');
    if (from !== null) cond.push(`received_ms >= ${chInt(Math.max(0, from))}`);
    if (to !== null) cond.push(`received_ms <= ${chInt(Math.max(0, to))}`);
    if (q.status !== undefined) cond.push(`status = ${chInt(q.status)}`);
    if (q.customer) cond.push(`customer = ${chStr(q.customer)}`);
    const rows = await queryRows<Record<string, string | number>>(
      d.ch,
      `SELECT id, received_ms, customer, token_id, method, path, status, detail, body_size, remote, dropped
         FROM ingest_rejections FINAL WHERE ${cond.join(' AND ')}
        ORDER BY received_ms DESC, id LIMIT ${chInt(q.limit ?? 500)}`,
    );
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
      return list(p.customerId, req.query as Query);
    },
    async list_unattributed_ingest_rejections(req) {
      return list('', req.query as Query);
    },
  };
}
