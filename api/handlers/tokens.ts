// API tokens of the active customer (Settings -> Tokens): list, create (shown once; only its SHA-256
// is stored), revoke (every gateway refuses it within CACHE_REFRESH_MS; the read API at once). A
// token may expire (403 after it, at the gateway and here) and may be bound to one machine or a
// machine-name pattern (lib/store/customers.ts); the list shows who created it and when it was last used
// (written in the background, to about a minute: lib/store/token-usage.ts).
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { badRequest, notFound } from '../../lib/contract/errors.js';
import { createToken, revokeToken, TokenError } from '../../lib/store/customers.js';
import { getCustomerToken, listCustomerTokens, type CustomerTokenRow } from '../../lib/store/tokens.js';

type Row = CustomerTokenRow;

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const view = ({ created_by_id, created_by_email, ...r }: Row) => ({
  id: r.id,
  name: r.name,
  prefix: r.prefix,
  scopes: r.scopes,
  machine: r.machine,
  created_at: r.created_at.toISOString(),
  created_by: created_by_id && created_by_email !== null ? { id: created_by_id, email: created_by_email } : null,
  expires_at: iso(r.expires_at),
  last_used_at: iso(r.last_used_at),
  revoked_at: iso(r.revoked_at),
});

export function tokenHandlers(d: ApiDeps): HandlersOf<'create_token' | 'list_tokens' | 'revoke_token'> {
  async function one(customerId: string, id: string): Promise<Row> {
    const row = await getCustomerToken(d.pool, customerId, id);
    if (!row) throw notFound('no such token');
    return row;
  }

  return {
    async list_tokens(req) {
      const p = principal(req);
      return { items: (await listCustomerTokens(d.pool, p.customerId)).map(view) };
    },

    async create_token(req, reply) {
      const p = principal(req);
      const b = req.body;
      let t;
      try {
        t = await createToken(d.pool, p.customerId, (b.name ?? '').trim(), b.scopes ?? ['ingest'], {
          machine: b.machine ?? null,
          expiresAt: b.expires_at ? new Date(b.expires_at) : null,
          createdBy: p.kind === 'user' ? (p.userId ?? null) : null,
        });
      } catch (e) {
        if (e instanceof TokenError) throw badRequest(e.message);
        throw e;
      }
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
