// Who is calling the read API. For now an API token with the `read` scope, for its own customer
// (scripts, Grafana); dashboard users with JWTs come with the accounts issue.
import type { FastifyRequest } from 'fastify';
import type { Pool } from '../lib/db/postgres.js';
import { forbidden } from '../lib/errors.js';
import { hashToken } from '../lib/ids.js';

export interface Principal {
  customerId: string;
  customer: string;
  tokenId: string;
  scopes: string[];
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

export async function authenticate(req: FastifyRequest, pool: Pool): Promise<Principal> {
  const h = req.headers.authorization ?? '';
  if (!/^bearer /i.test(h)) throw forbidden('missing bearer token: send Authorization: Bearer <API token>');
  const token = h.slice(7).trim();
  const r = await pool.query<{ id: string; customer_id: string; customer: string; scopes: string[]; revoked_at: Date | null }>(
    `SELECT t.id, t.customer_id, c.slug AS customer, t.scopes, t.revoked_at
       FROM api_tokens t JOIN customers c ON c.id = t.customer_id WHERE t.token_hash = $1`,
    [hashToken(token)],
  );
  const row = r.rows[0];
  if (!row) throw forbidden('invalid token');
  if (row.revoked_at) throw forbidden('token revoked');
  if (!row.scopes.includes('read')) throw forbidden('token lacks the read scope');
  return { customerId: row.customer_id, customer: row.customer, tokenId: row.id, scopes: row.scopes };
}

export function principal(req: FastifyRequest): Principal {
  if (!req.principal) throw forbidden('not authenticated');
  return req.principal;
}
