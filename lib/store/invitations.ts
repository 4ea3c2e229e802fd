// Invitations (Postgres `invitations`): how a person joins a customer. Only the SHA-256 of a link's
// token is stored; a new link replaces the old one. Creating one and accepting one are each one
// transaction (docs/api.md "Invitations"; the api's side: api/handlers/invitations.ts).
import { withTx, type Pool } from '../infra/postgres.js';
import { normaliseEmail, type Role, type User } from './accounts.js';

/** An invitation as its customer's owners see it. */
export interface InvitationRow {
  id: string;
  email: string;
  role: Role;
  lang: 'de' | 'en';
  created_at: Date;
  expires_at: Date;
  sent_at: Date | null;
  send_count: number;
  mail_status: string;
  invited_by_email: string | null;
}

const COLUMNS = `i.id, i.email, i.role, i.lang, i.created_at, i.expires_at, i.sent_at, i.send_count, i.mail_status,
                 (SELECT email FROM users WHERE id = i.invited_by) AS invited_by_email`;

/** The customer has as many open invitations as it may (nothing was changed). */
export class TooManyInvitationsError extends Error {
  constructor(readonly max: number) {
    super(`${max} open invitations`);
    this.name = 'TooManyInvitationsError';
  }
}

/** The invitation was accepted, revoked or expired meanwhile (nothing was changed). */
export class InvitationGoneError extends Error {
  constructor() {
    super('invitation no longer open');
    this.name = 'InvitationGoneError';
  }
}

/** A new link for an open invitation (new token hash, new expiry, mail pending), with its customer's name; null when there is no such open invitation. */
export async function renewInvitationLink(
  pool: Pool,
  customerId: string,
  id: string,
  tokenHash: string,
  ttlS: number,
): Promise<(InvitationRow & { customer_name: string }) | null> {
  const r = await pool.query<InvitationRow & { customer_name: string }>(
    `UPDATE invitations i SET token_hash = $3, expires_at = now() + make_interval(secs => $4), mail_status = 'pending'
        WHERE i.id = $1 AND i.customer_id = $2 AND i.accepted_at IS NULL AND i.revoked_at IS NULL
        RETURNING ${COLUMNS}, (SELECT name FROM customers WHERE id = i.customer_id) AS customer_name`,
    [id, customerId, tokenHash, ttlS],
  );
  return r.rows[0] ?? null;
}

/** What became of the e-mail of a link (only while that link is the invitation's current one). */
export async function recordInvitationMail(pool: Pool, id: string, outcome: 'sent' | 'logged' | 'failed', tokenHash: string): Promise<void> {
  await pool.query(
    `UPDATE invitations SET mail_status = $2, sent_at = CASE WHEN $2 = 'failed' THEN sent_at ELSE now() END, send_count = send_count + CASE WHEN $2 = 'failed' THEN 0 ELSE 1 END
          WHERE id = $1 AND token_hash = $3`,
    [id, outcome, tokenHash],
  );
}

/**
 * A new invitation (its link still to be made: renewInvitationLink). In one transaction, one per
 * customer at a time (an advisory lock): an open invitation of the same address is replaced, and
 * beyond `maxOpen` open invitations TooManyInvitationsError (the replacement undone).
 */
export async function createInvitation(
  pool: Pool,
  customerId: string,
  inv: { email: string; role: Role; lang: string; invitedBy: string | null; ttlS: number },
  maxOpen: number,
): Promise<string> {
  return withTx(pool, async (c) => {
    await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`invitations:${customerId}`]);
    // Inviting an address again replaces its open invitation (the old link stops working).
    await c.query(`UPDATE invitations SET revoked_at = now() WHERE customer_id = $1 AND lower(email) = $2 AND accepted_at IS NULL AND revoked_at IS NULL`, [
      customerId,
      normaliseEmail(inv.email),
    ]);
    const open = await c.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM invitations WHERE customer_id = $1 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()',
      [customerId],
    );
    if (open.rows[0]!.n >= maxOpen) throw new TooManyInvitationsError(maxOpen);
    // A placeholder hash until the link is made (unique, never a valid token's hash).
    const r = await c.query<{ id: string }>(
      `INSERT INTO invitations (customer_id, email, role, lang, token_hash, invited_by, expires_at)
         VALUES ($1, $2, $3, $4, 'unsent:' || gen_random_uuid(), $5, now() + make_interval(secs => $6)) RETURNING id`,
      [customerId, inv.email, inv.role, inv.lang, inv.invitedBy, inv.ttlS],
    );
    return r.rows[0]!.id;
  });
}

/** The customer's invitations not accepted nor revoked (expired ones included), oldest first. */
export async function listOpenInvitations(pool: Pool, customerId: string): Promise<InvitationRow[]> {
  const r = await pool.query<InvitationRow>(
    `SELECT ${COLUMNS} FROM invitations i WHERE i.customer_id = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL ORDER BY i.created_at, i.email`,
    [customerId],
  );
  return r.rows;
}

/** Revokes one of the customer's open invitations; false when it has no such open invitation. */
export async function revokeInvitation(pool: Pool, customerId: string, id: string): Promise<boolean> {
  const r = await pool.query(`UPDATE invitations SET revoked_at = now() WHERE id = $1 AND customer_id = $2 AND accepted_at IS NULL AND revoked_at IS NULL`, [id, customerId]);
  return !!r.rowCount;
}

/** An open invitation as its link's holder sees it. */
export interface LinkedInvitation {
  id: string;
  customer_id: string;
  slug: string;
  name: string;
  email: string;
  role: Role;
  expires_at: Date;
}

/** The open (unaccepted, unrevoked, unexpired) invitation of this token hash; null otherwise. */
export async function findOpenInvitation(pool: Pool, tokenHash: string): Promise<LinkedInvitation | null> {
  const r = await pool.query<LinkedInvitation>(
    `SELECT i.id, i.customer_id, c.slug, c.name, i.email, i.role, i.expires_at
         FROM invitations i JOIN customers c ON c.id = i.customer_id
        WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()`,
    [tokenHash],
  );
  return r.rows[0] ?? null;
}

/**
 * Accepts the invitation in one transaction: marks it accepted (InvitationGoneError when it is no
 * longer open), creates the account when there is none (`existing` null; `passwordHash` its
 * password), records who accepted, and makes them a member with the invitation's role (a member
 * already keeps their role). A unique violation (23505) means an account with the address was
 * made meanwhile.
 */
export async function acceptInvitation(pool: Pool, inv: { id: string; customer_id: string; email: string; role: Role }, existing: User | null, passwordHash: string | null): Promise<User> {
  return withTx(pool, async (c) => {
    const taken = await c.query(`UPDATE invitations SET accepted_at = now() WHERE id = $1 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()`, [inv.id]);
    if (!taken.rowCount) throw new InvitationGoneError();
    let u = existing;
    if (!u) {
      const r = await c.query<User>(`INSERT INTO users (email, password_hash, password_changed_at) VALUES ($1, $2, now()) RETURNING id, email, username, is_system_admin`, [
        inv.email,
        passwordHash,
      ]);
      u = r.rows[0]!;
    }
    await c.query(`UPDATE invitations SET accepted_by = $2 WHERE id = $1`, [inv.id, u.id]);
    // Already a member (another invitation, the CLI): the role stays as it is.
    await c.query(`INSERT INTO memberships (user_id, customer_id, role) VALUES ($1, $2, $3) ON CONFLICT (user_id, customer_id) DO NOTHING`, [u.id, inv.customer_id, inv.role]);
    return u;
  });
}
