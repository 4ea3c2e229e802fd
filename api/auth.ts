// Who is calling the read API, and may they. Two kinds of caller:
//   - a dashboard user: JWT in `Authorization: Bearer` or the session cookie; their role in the
//     active customer and whether their session still holds come from Postgres, through a copy in
//     memory that every change to them empties (api/principal-cache.ts: a removed membership or a
//     revoked session takes effect at once on this replica, on the others when Postgres's notice
//     arrives, milliseconds later); a system admin acts as owner in any customer;
//   - an API token with the `read` scope (scripts, Grafana): viewer rights in its own customer
//     (its row through the same copy).
// Routes declare the level they need in lib/contract/routes.ts; api/server.ts enforces it before the handler.
// Not authenticated: 401. Authenticated but not allowed: 403.
import type { FastifyRequest } from 'fastify';
import type { Pool } from '../lib/infra/postgres.js';
import { HttpError, forbidden } from '../lib/contract/errors.js';
import { hashToken } from '../lib/contract/ids.js';
import { ROLE_RANK, type Role } from '../lib/store/accounts.js';
import { sessionPrincipal } from '../lib/store/sessions.js';
import { findTokenByHash } from '../lib/store/tokens.js';
import type { Auth } from '../lib/contract/routes.js';
import { SESSION_COOKIE, type Sessions } from './session.js';
import type { PrincipalCache } from './principal-cache.js';

export interface Principal {
  kind: 'user' | 'token';
  /** Active customer; null for a user who belongs to none yet. */
  customerId: string | null;
  customer: string | null;
  role: Role | null;
  isSystemAdmin: boolean;
  userId?: string;
  email?: string;
  tokenId?: string;
  /** A dashboard user's session row (api/session.ts). */
  sessionId?: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

export const unauthenticated = (detail: string) => new HttpError(401, detail);

export function credentials(req: FastifyRequest): { bearer: string | null; cookie: string | null } {
  const h = req.headers.authorization ?? '';
  const bearer = /^bearer /i.test(h) ? h.slice(7).trim() : null;
  const cookie = (req.cookies as Record<string, string | undefined> | undefined)?.[SESSION_COOKIE] ?? null;
  return { bearer, cookie };
}

/** `cache` absent: read from Postgres (a path that must see the row as it is in its own transaction). */
export async function resolvePrincipal(req: FastifyRequest, pool: Pool, sessions: Sessions, cache: PrincipalCache | null = null): Promise<Principal> {
  const { bearer, cookie } = credentials(req);
  if (bearer !== null && bearer.startsWith('fk_')) return tokenPrincipal(pool, bearer, cache);
  const jwt = bearer ?? cookie;
  if (!jwt) throw unauthenticated('not authenticated: log in, or send Authorization: Bearer <API token or session token>');
  const claims = await sessions.verify(jwt);
  if (!claims) throw unauthenticated('session invalid or expired: log in again');
  // One query: the user, their role in the active customer, and whether the session row still
  // holds (a primary-key lookup in the same round trip: revocation costs requests nothing extra).
  const load = () => sessionPrincipal(pool, claims.sub, claims.cid, claims.sid);
  const u = cache ? await cache.get(`s ${claims.sub} ${claims.cid ?? ''} ${claims.sid}`, load, (r) => r !== null) : await load();
  if (!u) throw unauthenticated('the account of this session no longer exists');
  if (!u.open || !u.expires_at || u.expires_at.getTime() <= Date.now()) throw unauthenticated('session ended (logged out, password changed, or signed out): log in again');
  let role = u.role;
  if (u.cust && !role && u.is_system_admin) role = 'owner';
  const member = u.cust !== null && role !== null;
  return {
    kind: 'user',
    userId: claims.sub,
    sessionId: claims.sid,
    email: u.email,
    isSystemAdmin: u.is_system_admin,
    customerId: member ? u.cust : null,
    customer: member ? u.slug : null,
    role: member ? role : null,
  };
}

async function tokenPrincipal(pool: Pool, token: string, cache: PrincipalCache | null): Promise<Principal> {
  const hash = hashToken(token);
  const load = () => findTokenByHash(pool, hash);
  const row = cache ? await cache.get(`t ${hash}`, load, (r) => r !== null) : await load();
  if (!row) throw unauthenticated('invalid token');
  if (row.revoked_at) throw unauthenticated('token revoked');
  if (row.expires_at && row.expires_at.getTime() <= Date.now()) throw forbidden(`token expired at ${row.expires_at.toISOString()}`);
  if (!row.scopes.includes('read')) throw forbidden('token lacks the read scope');
  return { kind: 'token', tokenId: row.id, customerId: row.customer_id, customer: row.customer, role: 'viewer', isSystemAdmin: false };
}

/** Checks a principal against a route's level (lib/contract/routes.ts). */
export function authorise(p: Principal, level: Auth): void {
  if (level === 'none' || level === 'ingest-token') return;
  if (level === 'user') {
    if (p.kind !== 'user') throw forbidden('this endpoint is for dashboard users, not API tokens');
    return;
  }
  if (level === 'system-admin') {
    if (!p.isSystemAdmin) throw forbidden('system administrators only');
    return;
  }
  if (!p.customerId || !p.role) throw forbidden('no active customer: you are not a member of any customer');
  if (ROLE_RANK[p.role] < ROLE_RANK[level]) throw forbidden(`needs the ${level} role in ${p.customer} (you are ${p.role})`);
}

export function principal(req: FastifyRequest): Principal & { customerId: string; customer: string } {
  const p = req.principal;
  if (!p) throw unauthenticated('not authenticated');
  if (!p.customerId || !p.customer) throw forbidden('no active customer');
  return p as Principal & { customerId: string; customer: string };
}

export function anyPrincipal(req: FastifyRequest): Principal {
  if (!req.principal) throw unauthenticated('not authenticated');
  return req.principal;
}
