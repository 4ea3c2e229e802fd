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
import { hashPassword, normaliseEmail, EMAIL_RE, DUMMY_HASH, verifyPassword, isMemberEmail, emailHasAccount, userByEmail, memberRole, type Role } from '../../lib/store/accounts.js';
import {
  acceptInvitation,
  createInvitation,
  findOpenInvitation,
  listOpenInvitations,
  recordInvitationMail,
  renewInvitationLink,
  revokeInvitation,
  InvitationGoneError,
  TooManyInvitationsError,
  type InvitationRow,
} from '../../lib/store/invitations.js';
import { passwordProblem } from '../../lib/domain/passwords.js';
import { langOf, messages, type Lang, type Mailer } from '../mail.js';
import { isoTime as iso } from '../../lib/infra/postgres.js';
import { newLinkToken, openSession, reissueSession, sendLater, wellFormedLinkToken } from './sessions.js';

/** Open invitations a customer may have at once (409 above). */
export const MAX_OPEN_INVITATIONS = 200;

type Row = InvitationRow;

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
    const row = await renewInvitationLink(pool, customerId, invitationId, hashToken(token), cfg.invitationTtlS);
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
    sendLater(mailer, d, msg, `invitation ${invitationId}`, (outcome) => recordInvitationMail(pool, invitationId, outcome, hashToken(token)));
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
    if (await isMemberEmail(pool, p.customerId, normaliseEmail(email))) throw new HttpError(409, `${email} is already a member of ${p.customer}; change the role with PUT /api/members/{user_id}`);
    let id: string;
    try {
      id = await createInvitation(pool, p.customerId, { email, role: b.role, lang, invitedBy: p.userId ?? null, ttlS: cfg.invitationTtlS }, MAX_OPEN_INVITATIONS);
    } catch (e) {
      if (e instanceof TooManyInvitationsError) throw new HttpError(409, `${p.customer} has ${MAX_OPEN_INVITATIONS} open invitations, the most it may have; revoke some first`);
      throw e;
    }
    const row = await send(id, p.customerId, p);
    d.log.info({ invitationId: id, customerId: p.customerId, by: p.userId, role: b.role }, 'invitation created');
    return { invitation: view(row) };
  }

  /** The open invitation a link's token names, or null. */
  async function byToken(token: string) {
    if (!wellFormedLinkToken(token, 'inv')) return null;
    return findOpenInvitation(pool, hashToken(token));
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
      return { items: (await listOpenInvitations(pool, p.customerId)).map(view) };
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
      if (!(await revokeInvitation(pool, p.customerId, req.params.id))) throw notFound('no such pending invitation');
      d.log.info({ invitationId: req.params.id, by: p.userId }, 'invitation revoked');
      return { ok: true as const };
    },

    // For the holder of the link only: what it invites to, and whether the address has an account
    // (which form the page shows: choose a password, or log in and accept).
    async invitation_info(req) {
      const inv = await byToken(req.body.token);
      if (!inv) throw invalidLink();
      const hasAccount = await emailHasAccount(pool, normaliseEmail(inv.email));
      return {
        customer: { slug: inv.slug, name: inv.name },
        email: inv.email,
        role: inv.role,
        expires_at: iso(inv.expires_at),
        has_account: hasAccount,
      };
    },

    async accept_invitation(req, reply) {
      const b = req.body;
      const inv = await byToken(b.token);
      if (!inv) {
        if (b.password !== undefined) await verifyPassword(b.password, DUMMY_HASH);
        throw invalidLink();
      }
      const existing = await userByEmail(pool, normaliseEmail(inv.email));
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
        user = await acceptInvitation(pool, inv, existing, hash);
      } catch (e) {
        if (e instanceof InvitationGoneError) throw invalidLink();
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
      const role = await memberRole(pool, u.id, inv.customer_id);
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
