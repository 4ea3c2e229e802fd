// The logged-in user (/auth/me, conversions), their customers (list, switch) and the members of the
// active customer (owners manage them).
import { createHash } from 'node:crypto';
import type { ApiDeps, HandlersOf } from '../types.js';
import { anyPrincipal, principal, type Principal } from '../auth.js';
import { HttpError, badRequest, forbidden, notFound } from '../../lib/contract/errors.js';
import { normaliseEmail, setMembership, MembershipError, getUser, customersOfUser, customerWithRole, listMembers, getMember, type CustomerOfUser, type Role } from '../../lib/store/accounts.js';
import { ackConversions, pendingConversions } from '../../lib/store/conversions.js';
import { revokeUserSessions } from '../session.js';
import { reissueSession } from './sessions.js';
import { isoTime as iso } from '../../lib/infra/postgres.js';

const conflict = (detail: string) => new HttpError(409, detail);

export const emailSha256 = (email: string) => createHash('sha256').update(normaliseEmail(email)).digest('hex');

type CustomerRef = CustomerOfUser;

export function accountHandlers(d: ApiDeps): HandlersOf<'auth_conversions_ack' | 'auth_me' | 'list_members' | 'my_customers' | 'remove_member' | 'switch_customer' | 'update_member'> {
  const { pool } = d;

  async function user(id: string) {
    const u = await getUser(pool, id);
    if (!u) throw new HttpError(401, 'the account of this session no longer exists');
    return u;
  }

  /** Memberships; for a system administrator also every other customer (owner rights, member false). */
  async function customersOf(userId: string, isSystemAdmin: boolean): Promise<CustomerRef[]> {
    return customersOfUser(pool, userId, isSystemAdmin);
  }

  function activeOf(p: Principal, list: CustomerRef[]): CustomerRef | null {
    if (!p.customerId || !p.role) return null;
    return list.find((c) => c.id === p.customerId) ?? null;
  }

  return {
    async auth_me(req) {
      const p = anyPrincipal(req);
      const u = await user(p.userId!);
      const customers = await customersOf(u.id, u.is_system_admin);
      const conv = await pendingConversions(pool, u.id);
      return {
        user: u,
        email_sha256: emailSha256(u.email),
        is_system_admin: u.is_system_admin,
        customers: customers.filter((c) => c.member),
        active_customer: activeOf(p, customers),
        pending_conversions: conv.map((r) => ({ ...r, created_at: r.created_at.toISOString() })),
      };
    },

    async auth_conversions_ack(req) {
      const p = anyPrincipal(req);
      const { ids } = req.body;
      // Only the user's own events and those of their customers; others (and repeats) are ignored.
      return { ok: true, acked: await ackConversions(pool, p.userId, ids) };
    },

    async my_customers(req) {
      const p = anyPrincipal(req);
      const items = await customersOf(p.userId!, p.isSystemAdmin);
      return { items, active_customer_id: activeOf(p, items)?.id ?? null };
    },

    async switch_customer(req, reply) {
      const p = anyPrincipal(req);
      const b = req.body;
      if (!b.customer_id && !b.customer) throw badRequest('send customer_id or customer (slug)');
      const u = await user(p.userId!);
      const c = await customerWithRole(pool, u.id, b.customer_id ? { id: b.customer_id } : { slug: (b.customer_id ?? b.customer)! });
      const refused = forbidden('you are not a member of that customer');
      if (!c) throw u.is_system_admin ? notFound('no such customer') : refused;
      const role: Role | null = c.role ?? (u.is_system_admin ? 'owner' : null);
      if (!role) throw refused;
      const { token, expiresAt } = await reissueSession(d, reply, u, c.id, p.sessionId!);
      return { token, token_type: 'Bearer', expires_at: expiresAt.toISOString(), user: u, customer: { id: c.id, slug: c.slug, role } };
    },

    async list_members(req) {
      const p = principal(req);
      const members = await listMembers(pool, p.customerId);
      return { items: members.map((m) => ({ ...m, created_at: iso(m.created_at) })) };
    },

    async update_member(req) {
      const p = principal(req);
      const { user_id } = req.params;
      await membership(() => setMembership(pool, user_id, p.customerId, req.body.role, { mustExist: true }));
      return member(p.customerId, user_id);
    },

    // The removed member's sessions end at once (every one: a session may switch customers), and
    // with them their live streams (api/light-stream.ts re-checks them).
    async remove_member(req) {
      const p = principal(req);
      await membership(() => setMembership(pool, req.params.user_id, p.customerId, null));
      const n = await revokeUserSessions(pool, req.params.user_id, 'membership_removed');
      d.log.info({ userId: req.params.user_id, customerId: p.customerId, by: p.userId, sessions: n }, 'member removed; their sessions ended');
      return { ok: true };
    },
  };

  /** The rules of lib/store/accounts.ts in HTTP: 404 for a stranger, 409 for the last owner. */
  async function membership(change: () => Promise<void>): Promise<void> {
    try {
      await change();
    } catch (e) {
      if (e instanceof MembershipError) throw e.status === 404 ? notFound(e.message) : conflict(e.message);
      throw e;
    }
  }

  async function member(customerId: string, userId: string) {
    const m = await getMember(pool, customerId, userId);
    if (!m) throw notFound('no such member');
    return { ...m, created_at: iso(m.created_at) };
  }
}
