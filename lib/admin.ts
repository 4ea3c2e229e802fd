// Control data written by the CLI, the stack's first start, tests and (later) the read API:
// customers and API tokens.
import { hashToken, isSlug, newApiToken } from './ids.js';
import type { Pool } from './db/postgres.js';

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
  created_at: Date;
  revoked_at: Date | null;
}

/** Creates a token and returns it in clear: the only time it is ever visible. */
export async function createToken(
  pool: Pool,
  customerId: string,
  name = '',
  scopes: Scope[] = ALL_SCOPES,
): Promise<{ id: string; token: string; prefix: string }> {
  for (const s of scopes) if (!ALL_SCOPES.includes(s)) throw new Error(`unknown scope ${s}: use ${ALL_SCOPES.join(', ')}`);
  const token = newApiToken();
  const prefix = token.slice(0, 10);
  const r = await pool.query<{ id: string }>(
    `INSERT INTO api_tokens (customer_id, name, token_hash, prefix, scopes) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
    [customerId, name, hashToken(token), prefix, scopes],
  );
  return { id: r.rows[0]!.id, token, prefix };
}

export async function listTokens(pool: Pool, customerSlug?: string): Promise<TokenRow[]> {
  const r = await pool.query<TokenRow>(
    `SELECT t.id, t.customer_id, c.slug AS customer, t.name, t.prefix, t.scopes, t.created_at, t.revoked_at
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
