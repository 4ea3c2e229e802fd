// Offboarding a customer (docs/operations.md "Offboarding a customer"): a system administrator marks
// it for deletion; from that moment it is gone for every reader (tokens revoked, members removed, its
// reports dropped by the workers), and the worker's offboarding job removes its data from every store
// OFFBOARD_GRACE_S later (lib/store/offboarding.ts). 202: the deletion is under way, not done.
import type { ApiDeps, HandlersOf } from '../types.js';
import { anyPrincipal } from '../auth.js';
import { notFound } from '../../lib/contract/errors.js';
import { markCustomerDeleting } from '../../lib/store/offboarding.js';

export function offboardingHandlers(d: ApiDeps): HandlersOf<'admin_delete_customer'> {
  return {
    async admin_delete_customer(req, reply) {
      const p = anyPrincipal(req);
      const c = await markCustomerDeleting(d.pool, req.params.id);
      if (!c) throw notFound('no such customer');
      req.log.warn({ customer: c.slug, customerId: c.id, by: p.kind === 'user' ? p.userId : null }, 'customer marked for deletion (offboarding)');
      return reply.code(202).send({
        id: c.id,
        slug: c.slug,
        state: 'deleting' as const,
        deleting_since: c.deleting_at.toISOString(),
        purge_after: new Date(c.deleting_at.getTime() + d.cfg.offboarding.graceS * 1000).toISOString(),
      });
    },
  };
}
