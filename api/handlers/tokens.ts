// API tokens of the active customer (Settings -> Tokens): list, create (shown once; only its SHA-256
// is stored), revoke (every gateway refuses it within CACHE_REFRESH_MS; the read API at once).
import type { ApiDeps, HandlersOf } from '../types.js';
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

export function tokenHandlers(d: ApiDeps): HandlersOf<'create_token' | 'list_tokens' | 'revoke_token'> {
  async function one(customerId: string, id: string): Promise<Row> {
    const r = await d.pool.query<Row>(`${SELECT} WHERE customer_id = $1 AND id = $2`, [customerId, id]);
    if (!r.rows[0]) throw notFound('no such token');
    return r.rows[0];
  }

  return {
    async list_tokens(req) {
      const p = principal(req);
      const r = await d.pool.query<Row>(`${SELECT} WHERE customer_id = $1 ORDER BY created_at DESC, id`, [p.customerId]);
      return { items: r.rows.map(view) };
    },

    async create_token(req, reply) {
      const p = principal(req);
      const b = req.body;
      const t = await createToken(d.pool, p.customerId, (b.name ?? '').trim(), b.scopes ?? ['ingest']);
      reply.code(201);
      return { ...view(await one(p.customerId, t.id)), token: t.token };
    },

    async revoke_token(req) {
      const p = principal(req);
      const { id } = req.params;
      await revokeToken(d.pool, id, p.customerId);
      return view(await one(p.customerId, id));
    },
  };
}
