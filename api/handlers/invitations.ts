// Invitations: how a person joins a customer. An owner invites an address with a role; the
// service e-mails the invitee a single-use link (valid INVITATION_TTL_S, 7 days by default; only
// the SHA-256 of its token is stored) and shows the owner only that an invitation is pending.
//
// Whether the address already has an account is never part of the owner's answer (the same
// status and body either way, no user id), and inviting creates no account: a new person chooses
// their own password through the link; a person with an account logs in with it and accepts. So an
// owner never holds a password of someone else's account (the cross-customer takeover of
// test/stack/account-lifecycle.test.ts).
//
// POST /api/members is the older name of POST /api/invitations and does the same.
import type { FastifyRequest } from 'fastify';
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal, resolvePrincipal, type Principal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import { hashToken } from '../../lib/contract/ids.js';
import { hashPassword, normaliseEmail, EMAIL_RE, DUMMY_HASH, verifyPassword, type Role } from '../../lib/store/accounts.js';
import { passwordProblem } from '../../lib/domain/passwords.js';
import { langOf, messages, type Lang, type Mailer } from '../mail.js';
import { withTx, isoTime as iso } from '../../lib/infra/postgres.js';
import { newLinkToken, openSession, reissueSession, sendLater, wellFormedLinkToken } from './sessions.js';

/** Open invitations a customer may have at once (409 above). */
export const MAX_OPEN_INVITATIONS = 200;

interface Row {
  id: string;
  email: string;
  role: Role;
  lang: Lang;
  created_at: Date;
  expires_at: Date;
  sent_at: Date | null;
  send_count: number;
  mail_status: string;
  invited_by_email: string | null;
}

const COLUMNS = `i.id, i.email, i.role, i.lang, i.created_at, i.expires_at, i.sent_at, i.send_count, i.mail_status,
                 (SELECT email FROM users WHERE id = i.invited_by) AS invited_by_email`;

const view = (r: Row) => ({
  id: r.id,
  email: r.email,
  role: r.role,
  lang: r.lang,
  status: r.expires_at.getTime() <= Date.now() ? ('expired' as const) : ('pending' as const),
  created_at: iso(r.created_at),
  expires_at: iso(r.expires_at),
  sent_at: r.sent_at ? iso(r.sent_at) : null,
  send_count: r.send_count,
  mail_status: r.mail_status as 'pending' | 'sent' | 'logged' | 'failed',
  invited_by: r.invited_by_email,
});

export function invitationHandlers(
  d: ApiDeps,
  mailer: Mailer,
): HandlersOf<'add_member' | 'create_invitation' | 'list_invitations' | 'resend_invitation' | 'revoke_invitation' | 'invitation_info' | 'accept_invitation'> {
  const { pool } = d;
  const cfg = d.cfg.api;

  /** A fresh link for an open invitation (new token, new expiry), and the e-mail with it. */
  async function send(invitationId: string, customerId: string, inviter: Principal): Promise<Row> {
    const token = newLinkToken('inv');
    const r = await pool.query<Row & { customer_name: string }>(
      `UPDATE invitations i SET token_hash = $3, expires_at = now() + make_interval(secs => $4), mail_status = 'pending'
        WHERE i.id = $1 AND i.customer_id = $2 AND i.accepted_at IS NULL AND i.revoked_at IS NULL
        RETURNING ${COLUMNS}, (SELECT name FROM customers WHERE id = i.customer_id) AS customer_name`,
      [invitationId, customerId, hashToken(token), cfg.invitationTtlS],
    );
    const row = r.rows[0];
    if (!row) throw notFound('no such pending invitation');
    const link = `${cfg.publicDashboardUrl}/invitation#token=${token}`;
    const msg = messages.invitation(row.lang, {
      to: row.email,
      customer: row.customer_name,
      inviter: inviter.email ?? 'A system administrator',
      role: row.role,
      link,
      expiresAt: row.expires_at,
    });
    sendLater(mailer, d, msg, `invitation ${invitationId}`, (outcome) =>
      pool.query(
        `UPDATE invitations SET mail_status = $2, sent_at = CASE WHEN $2 = 'failed' THEN sent_at ELSE now() END, send_count = send_count + CASE WHEN $2 = 'failed' THEN 0 ELSE 1 END
          WHERE id = $1 AND token_hash = $3`,
        [invitationId, outcome, hashToken(token)],
      ),
    );
    return row;
  }

  async function invite(req: FastifyRequest & { body: { email: string; role: Role; lang?: Lang } }) {
    const p = principal(req);
    const b = req.body;
    const email = b.email.trim();
    if (!EMAIL_RE.test(email)) throw badRequest(`invalid e-mail address ${JSON.stringify(email.slice(0, 100))}`);
    const lang = b.lang ?? langOf(req.headers['accept-language']);
    // The only account fact used: whether the address is already a member of this very customer,
    // which its owner sees in the member list anyway.
    const member = await pool.query('SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.customer_id = $1 AND lower(u.email) = $2', [
      p.customerId,
      normaliseEmail(email),
    ]);
    if (member.rowCount) throw new HttpError(409, `${email} is already a member of ${p.customer}; change the role with PUT /api/members/{user_id}`);
    const id = await withTx(pool, async (c) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`invitations:${p.customerId}`]);
      // Inviting an address again replaces its open invitation (the old link stops working).
      await c.query(`UPDATE invitations SET revoked_at = now() WHERE customer_id = $1 AND lower(email) = $2 AND accepted_at IS NULL AND revoked_at IS NULL`, [
        p.customerId,
        normaliseEmail(email),
      ]);
      const open = await c.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM invitations WHERE customer_id = $1 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()',
        [p.customerId],
      );
      if (open.rows[0]!.n >= MAX_OPEN_INVITATIONS) {
        throw new HttpError(409, `${p.customer} has ${MAX_OPEN_INVITATIONS} open invitations, the most it may have; revoke some first`);
      }
      // A placeholder hash until send() sets the real token (unique, never a valid token's hash).
      const r = await c.query<{ id: string }>(
        `INSERT INTO invitations (customer_id, email, role, lang, token_hash, invited_by, expires_at)
         VALUES ($1, $2, $3, $4, 'unsent:' || gen_random_uuid(), $5, now() + make_interval(secs => $6)) RETURNING id`,
        [p.customerId, email, b.role, lang, p.userId ?? null, cfg.invitationTtlS],
      );
      return r.rows[0]!.id;
    });
    const row = await send(id, p.customerId, p);
    d.log.info({ invitationId: id, customerId: p.customerId, by: p.userId, role: b.role }, 'invitation created');
    return { invitation: view(row) };
  }

  /** The open invitation a link's token names, or null. */
  async function byToken(token: string) {
    if (!wellFormedLinkToken(token, 'inv')) return null;
    const r = await pool.query<{ id: string; customer_id: string; slug: string; name: string; email: string; role: Role; expires_at: Date }>(
      `SELECT i.id, i.customer_id, c.slug, c.name, i.email, i.role, i.expires_at
         FROM invitations i JOIN customers c ON c.id = i.customer_id
        WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()`,
      [hashToken(token)],
    );
    return r.rows[0] ?? null;
  }

  const invalidLink = () => badRequest('this invitation link is invalid, already used, revoked or expired: ask for a new invitation');

  return {
    async add_member(req, reply) {
      reply.code(202);
      return invite(req);
    },

    async create_invitation(req, reply) {
      reply.code(202);
      return invite(req);
    },

    async list_invitations(req) {
      const p = principal(req);
      const r = await pool.query<Row>(
        `SELECT ${COLUMNS} FROM invitations i WHERE i.customer_id = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL ORDER BY i.created_at, i.email`,
        [p.customerId],
      );
      return { items: r.rows.map(view) };
    },

    async resend_invitation(req, reply) {
      const p = principal(req);
      const row = await send(req.params.id, p.customerId, p);
      d.log.info({ invitationId: row.id, by: p.userId }, 'invitation sent again (new link)');
      reply.code(202);
      return { invitation: view(row) };
    },

    async revoke_invitation(req) {
      const p = principal(req);
      const r = await pool.query(`UPDATE invitations SET revoked_at = now() WHERE id = $1 AND customer_id = $2 AND accepted_at IS NULL AND revoked_at IS NULL`, [
        req.params.id,
        p.customerId,
      ]);
      if (!r.rowCount) throw notFound('no such pending invitation');
      d.log.info({ invitationId: req.params.id, by: p.userId }, 'invitation revoked');
      return { ok: true as const };
    },

    // For the holder of the link only: what it invites to, and whether the address has an account
    // (which form the page shows: choose a password, or log in and accept).
    async invitation_info(req) {
      const inv = await byToken(req.body.token);
      if (!inv) throw invalidLink();
      const u = await pool.query('SELECT 1 FROM users WHERE lower(email) = $1', [normaliseEmail(inv.email)]);
      return {
        customer: { slug: inv.slug, name: inv.name },
        email: inv.email,
        role: inv.role,
        expires_at: iso(inv.expires_at),
        has_account: (u.rowCount ?? 0) > 0,
      };
    },

    async accept_invitation(req, reply) {
      const b = req.body;
      const inv = await byToken(b.token);
      if (!inv) {
        if (b.password !== undefined) await verifyPassword(b.password, DUMMY_HASH);
        throw invalidLink();
      }
      const existing = (
        await pool.query<{ id: string; email: string; username: string | null; is_system_admin: boolean }>(
          'SELECT id, email, username, is_system_admin FROM users WHERE lower(email) = $1',
          [normaliseEmail(inv.email)],
        )
      ).rows[0];
      let user = existing;
      let sessionId: string | null = null;
      if (existing) {
        // The account exists: its holder logs in first, with that account.
        let p: Principal | null = null;
        try {
          p = await resolvePrincipal(req, pool, d.sessions);
        } catch {
          p = null;
        }
        if (!p || p.kind !== 'user') throw new HttpError(401, `log in as ${inv.email} to accept this invitation`);
        if (p.userId !== existing.id) throw new HttpError(403, `this invitation is for ${inv.email}: log out, and log in with that address to accept it`);
        sessionId = p.sessionId ?? null;
      } else {
        if (b.password === undefined) throw badRequest('choose a password (password) to create your account');
        const problem = passwordProblem(b.password, { minLength: cfg.passwordMinLength, email: inv.email });
        if (problem) throw badRequest(problem);
      }
      const hash = existing ? null : await hashPassword(b.password!);
      try {
        user = await withTx(pool, async (c) => {
          const taken = await c.query(`UPDATE invitations SET accepted_at = now() WHERE id = $1 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()`, [inv.id]);
          if (!taken.rowCount) throw invalidLink();
          let u = existing;
          if (!u) {
            const r = await c.query<{ id: string; email: string; username: string | null; is_system_admin: boolean }>(
              `INSERT INTO users (email, password_hash, password_changed_at) VALUES ($1, $2, now()) RETURNING id, email, username, is_system_admin`,
              [inv.email, hash],
            );
            u = r.rows[0]!;
          }
          await c.query(`UPDATE invitations SET accepted_by = $2 WHERE id = $1`, [inv.id, u.id]);
          // Already a member (another invitation, the CLI): the role stays as it is.
          await c.query(`INSERT INTO memberships (user_id, customer_id, role) VALUES ($1, $2, $3) ON CONFLICT (user_id, customer_id) DO NOTHING`, [u.id, inv.customer_id, inv.role]);
          return u;
        });
      } catch (e) {
        // Someone made an account with this address in the meantime: they log in and accept.
        if ((e as { code?: string }).code === '23505') throw new HttpError(409, `an account with ${inv.email} exists now: log in with it and open the link again`);
        throw e;
      }
      const u = user!;
      d.log.info({ invitationId: inv.id, userId: u.id, customerId: inv.customer_id, newAccount: !existing }, 'invitation accepted');
      // The session (a new one for a new account, the same one for a logged-in user) moves to the customer joined.
      let token: string;
      let expiresAt: Date;
      if (sessionId) ({ token, expiresAt } = await reissueSession(d, reply, u, inv.customer_id, sessionId));
      else ({ token, expiresAt } = await openSession(d, req, reply, u, inv.customer_id));
      const role = (await pool.query<{ role: Role }>('SELECT role FROM memberships WHERE user_id = $1 AND customer_id = $2', [u.id, inv.customer_id])).rows[0]!.role;
      return {
        token,
        token_type: 'Bearer' as const,
        expires_at: expiresAt.toISOString(),
        user: { id: u.id, email: u.email, username: u.username, is_system_admin: u.is_system_admin },
        customer: { id: inv.customer_id, slug: inv.slug, role },
        created_account: !existing,
      };
    },
  };
}
