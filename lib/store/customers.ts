// Control data written by the CLI, the stack's first start, tests and (later) the read API:
// customers and API tokens.
import { hashToken, isSlug, newApiToken } from '../contract/ids.js';
import type { Pool } from '../infra/postgres.js';
import { SLUG_PATTERN_RE } from '../contract/schemas/common.js';

export type Scope = 'ingest' | 'read';
export const ALL_SCOPES: Scope[] = ['ingest', 'read'];

export interface Customer {
  id: string;
  slug: string;
  name: string;
}

export async function createCustomer(pool: Pool, slug: string, name = ''): Promise<Customer> {
  if (!isSlug(slug)) throw new Error(`invalid customer slug ${JSON.stringify(slug)}: use ^[a-z0-9][a-z0-9-]*$, at most 64 characters`);
  const r = await pool.query<Customer>(
    `INSERT INTO customers (slug, name) VALUES ($1, $2) ON CONFLICT (slug) DO NOTHING RETURNING id, slug, name`,
    [slug, name || slug],
  );
  if (r.rows[0]) return r.rows[0];
  throw new Error(`customer ${slug} already exists`);
}

export async function findCustomer(pool: Pool, slug: string): Promise<Customer | null> {
  const r = await pool.query<Customer>('SELECT id, slug, name FROM customers WHERE slug = $1', [slug]);
  return r.rows[0] ?? null;
}

export interface TokenRow {
  id: string;
  customer_id: string;
  customer: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  machine: string | null;
  created_at: Date;
  expires_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

/** What a token may be limited to, at creation. */
export interface TokenLimits {
  /** One machine slug, or a machine-name pattern with `*` and `?` (lib/domain/whitelist.ts); such a token has the ingest scope only. */
  machine?: string | null;
  /** Refused after this time (403 at the gateway and the api). */
  expiresAt?: Date | null;
  /** The dashboard user who created it (null: the CLI). */
  createdBy?: string | null;
}

/** A token that cannot be made as asked (the api answers 400, the CLI prints it). */
export class TokenError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenError';
  }
}

/** Why these limits are refused, or null. `now`: the time the expiry must lie after. */
export function tokenLimitsRefusal(scopes: Scope[], l: TokenLimits, now = Date.now()): string | null {
  for (const s of scopes) if (!ALL_SCOPES.includes(s)) return `unknown scope ${s}: use ${ALL_SCOPES.join(', ')}`;
  if (scopes.length === 0) return 'a token needs at least one scope';
  if (l.machine != null) {
    if (!SLUG_PATTERN_RE.test(l.machine)) return `machine ${JSON.stringify(l.machine.slice(0, 140))}: a machine slug or a pattern of a-z, 0-9, -, * (any run) and ? (one character), 1 to 128 characters`;
    if (scopes.length !== 1 || scopes[0] !== 'ingest') return 'a machine-bound token has the ingest scope only: its machine posts with it, and reading the fleet is not for one machine';
  }
  if (l.expiresAt != null) {
    if (!Number.isFinite(l.expiresAt.getTime())) return 'expires_at is not a valid time';
    if (l.expiresAt.getTime() <= now) return `expires_at ${l.expiresAt.toISOString()} must lie in the future`;
  }
  return null;
}

/** Creates a token and returns it in clear: the only time it is ever visible. */
export async function createToken(
  pool: Pool,
  customerId: string,
  name = '',
  scopes: Scope[] = ALL_SCOPES,
  limits: TokenLimits = {},
): Promise<{ id: string; token: string; prefix: string }> {
  const refused = tokenLimitsRefusal(scopes, limits);
  if (refused) throw new TokenError(refused);
  const token = newApiToken();
  const prefix = token.slice(0, 10);
  const r = await pool.query<{ id: string }>(
    `INSERT INTO api_tokens (customer_id, name, token_hash, prefix, scopes, machine, expires_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
    [customerId, name, hashToken(token), prefix, scopes, limits.machine ?? null, limits.expiresAt ?? null, limits.createdBy ?? null],
  );
  return { id: r.rows[0]!.id, token, prefix };
}

const DURATION = /^(\d+(?:\.\d+)?)\s*(m|min|h|d|w|y)$/i;
const UNIT_MS: Record<string, number> = { m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000, y: 365 * 86_400_000 };

/** `--expires`: an ISO 8601 time, or a duration from `now` (`30m`, `12h`, `90d`, `2w`, `1y`); `never`: null. */
export function parseExpiry(text: string, now = Date.now()): Date | null {
  const s = text.trim();
  if (/^never$/i.test(s)) return null;
  const d = DURATION.exec(s);
  if (d) return new Date(now + Number(d[1]) * UNIT_MS[d[2]!.toLowerCase()]!);
  const t = /^\d{4}-\d{2}-\d{2}/.test(s) ? Date.parse(s) : NaN;
  if (!Number.isFinite(t)) throw new TokenError(`expiry ${JSON.stringify(text.slice(0, 64))} is neither an ISO 8601 time (2027-01-31T00:00:00Z) nor a duration (30m, 12h, 90d, 2w, 1y) nor never`);
  return new Date(t);
}

export async function listTokens(pool: Pool, customerSlug?: string): Promise<TokenRow[]> {
  const r = await pool.query<TokenRow>(
    `SELECT t.id, t.customer_id, c.slug AS customer, t.name, t.prefix, t.scopes, t.machine, t.created_at, t.expires_at, t.last_used_at, t.revoked_at
       FROM api_tokens t JOIN customers c ON c.id = t.customer_id
      WHERE ($1::text IS NULL OR c.slug = $1)
      ORDER BY c.slug, t.created_at`,
    [customerSlug ?? null],
  );
  return r.rows;
}

/** Revokes a token; true when it existed and was active. */
export async function revokeToken(pool: Pool, tokenId: string, customerId?: string): Promise<boolean> {
  const r = await pool.query(
    `UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL AND ($2::uuid IS NULL OR customer_id = $2)`,
    [tokenId, customerId ?? null],
  );
  return (r.rowCount ?? 0) > 0;
}

/** Whether a customer of this id exists. */
export async function customerExists(pool: Pool, customerId: string): Promise<boolean> {
  const r = await pool.query('SELECT 1 FROM customers WHERE id = $1 AND deleting_at IS NULL', [customerId]);
  return !!r.rowCount;
}

/**
 * Of these customer ids (UUIDs), those being deleted or deleted (offboarding, lib/store/offboarding.ts):
 * the workers drop their reports. An id that never was a customer is not among them.
 */
export async function goneCustomerIds(pool: Pool, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const r = await pool.query<{ id: string }>(
    `SELECT id FROM customers WHERE id = ANY($1::uuid[]) AND deleting_at IS NOT NULL
     UNION SELECT id FROM deleted_customers WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  return new Set(r.rows.map((x) => x.id));
}
