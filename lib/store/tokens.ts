// API tokens (Postgres `api_tokens`) as the api reads them: a customer's tokens with who created
// them (Settings -> Tokens), a token by its hash (the read API's bearer), and which of the tokens of
// open live streams still hold; and as the gateway's in-memory copy reads them (`tokenCopy`, for
// gateway/token-cache.ts). Creating and revoking: lib/store/customers.ts (the CLI uses them too).
import type { Pool } from '../infra/postgres.js';
import type { SyncedSource } from '../infra/synced-map.js';
import { databaseNow } from './clock.js';
import type { Scope } from './customers.js';

/** A token as the customer's list shows it (never its hash). */
export interface CustomerTokenRow {
  id: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  machine: string | null;
  created_at: Date;
  created_by_id: string | null;
  created_by_email: string | null;
  expires_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

const SELECT = `SELECT t.id, t.name, t.prefix, t.scopes, t.machine, t.created_at, t.created_by AS created_by_id, u.email AS created_by_email,
                       t.expires_at, t.last_used_at, t.revoked_at
                  FROM api_tokens t LEFT JOIN users u ON u.id = t.created_by`;

/** The customer's tokens, newest first. */
export async function listCustomerTokens(pool: Pool, customerId: string): Promise<CustomerTokenRow[]> {
  return (await pool.query<CustomerTokenRow>(`${SELECT} WHERE t.customer_id = $1 ORDER BY t.created_at DESC, t.id`, [customerId])).rows;
}

/** One of the customer's tokens; null when it has none of that id. */
export async function getCustomerToken(pool: Pool, customerId: string, id: string): Promise<CustomerTokenRow | null> {
  return (await pool.query<CustomerTokenRow>(`${SELECT} WHERE t.customer_id = $1 AND t.id = $2`, [customerId, id])).rows[0] ?? null;
}

/** A token found by its hash, with its customer's slug, whatever its state (the caller judges it). */
export interface TokenByHash {
  id: string;
  customer_id: string;
  customer: string;
  scopes: string[];
  revoked_at: Date | null;
  expires_at: Date | null;
}

export async function findTokenByHash(pool: Pool, tokenHash: string): Promise<TokenByHash | null> {
  const r = await pool.query<TokenByHash>(
    `SELECT t.id, t.customer_id, c.slug AS customer, t.scopes, t.revoked_at, t.expires_at
       FROM api_tokens t JOIN customers c ON c.id = t.customer_id WHERE t.token_hash = $1`,
    [tokenHash],
  );
  return r.rows[0] ?? null;
}

/** Of these token ids, those neither revoked nor expired. */
export async function activeTokenIds(pool: Pool, ids: string[]): Promise<string[]> {
  const r = await pool.query<{ id: string }>(`SELECT id::text FROM api_tokens WHERE id = ANY($1::uuid[]) AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, [ids]);
  return r.rows.map((row) => row.id);
}

// ---- the gateway's copy of every token (gateway/token-cache.ts) -------------------------------

/** A token as the gateway's in-memory copy holds it: with its hash and its customer's slug. */
export interface TokenCopyRow {
  id: string;
  customer_id: string;
  customer: string;
  token_hash: string;
  scopes: string[];
  revoked_at: Date | null;
  expires_at: Date | null;
  machine: string | null;
  /** The later of the token's and its customer's: a renamed customer counts as a changed token. */
  updated_at: Date;
}

const COPY = `SELECT t.id, t.customer_id, c.slug AS customer, t.token_hash, t.scopes, t.revoked_at, t.expires_at, t.machine,
                       GREATEST(t.updated_at, c.updated_at) AS updated_at
                  FROM api_tokens t JOIN customers c ON c.id = t.customer_id`;

/** Every token (revoked and expired ones too: the gateway tells why it refuses). */
export async function allTokenCopyRows(pool: Pool): Promise<TokenCopyRow[]> {
  return (await pool.query<TokenCopyRow>(COPY)).rows;
}

/** The tokens changed after `since`, or whose customer changed. */
export async function tokenCopyRowsChangedSince(pool: Pool, since: Date): Promise<TokenCopyRow[]> {
  return (await pool.query<TokenCopyRow>(`${COPY} WHERE t.updated_at > $1 OR c.updated_at > $1`, [since])).rows;
}

/** One token by its hash, for a bearer the copy does not know yet; null when there is none. */
export async function tokenCopyRowByHash(pool: Pool, tokenHash: string): Promise<TokenCopyRow | null> {
  return (await pool.query<TokenCopyRow>(`${COPY} WHERE t.token_hash = $1`, [tokenHash])).rows[0] ?? null;
}

/** What the gateway's SyncedMap of tokens reads. */
export const tokenCopy: SyncedSource<TokenCopyRow> = { now: databaseNow, all: allTokenCopyRows, changedSince: tokenCopyRowsChangedSince };
