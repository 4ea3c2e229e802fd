// API tokens of the active customer (Settings -> Tokens): list, create (shown once; only its SHA-256
// is stored), revoke (every gateway refuses it within CACHE_REFRESH_MS; the read API at once).
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ApiDeps } from '../server.js';
import { principal } from '../auth.js';
import { notFound } from '../../lib/errors.js';
import { createToken, revokeToken, type Scope } from '../../lib/admin.js';

interface Row {
  id: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  created_at: Date;
  revoked_at: Date | null;
}

const SELECT = 'SELECT id, name, prefix, scopes, created_at, revoked_at FROM api_tokens';
const view = (r: Row) => ({ ...r, created_at: r.created_at.toISOString(), revoked_at: r.revoked_at ? r.revoked_at.toISOString() : null });

export function tokenHandlers(d: ApiDeps) {
  async function one(customerId: string, id: string): Promise<Row> {
    const r = await d.pool.query<Row>(`${SELECT} WHERE customer_id = $1 AND id = $2`, [customerId, id]);
    if (!r.rows[0]) throw notFound('no such token');
    return r.rows[0];
  }

  return {
    async list_tokens(req: FastifyRequest) {
      const p = principal(req);
      const r = await d.pool.query<Row>(`${SELECT} WHERE customer_id = $1 ORDER BY created_at DESC, id`, [p.customerId]);
      return { items: r.rows.map(view) };
    },

    async create_token(req: FastifyRequest, reply: FastifyReply) {
      const p = principal(req);
      const b = req.body as { name?: string; scopes?: Scope[] };
      const t = await createToken(d.pool, p.customerId, (b.name ?? '').trim(), b.scopes ?? ['ingest']);
      reply.code(201);
      return { ...view(await one(p.customerId, t.id)), token: t.token };
    },

    async revoke_token(req: FastifyRequest) {
      const p = principal(req);
      const { id } = req.params as { id: string };
      await revokeToken(d.pool, id, p.customerId);
      return view(await one(p.customerId, id));
    },
  };
}
