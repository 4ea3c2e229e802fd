// Licence status and key, licence changes (system administrators), onboarding progress and support
// contacts, all for the active customer (a system administrator may read or change any licence).
import type { ApiDeps, HandlersOf, RequestOf, ApiRoutes } from '../types.js';
import { principal } from '../auth.js';
import { badRequest, notFound } from '../../lib/contract/errors.js';
import { withTx, type Pool } from '../../lib/infra/postgres.js';
import { getLicence, deviceCount, licenceView, setLicence, type LicenceChange, type LicenceRow } from '../../lib/store/licences.js';
import { listFlaggedMachines } from '../../lib/store/machines.js';
import { customerExists } from '../../lib/store/customers.js';
import { helpTextsUploaded, onboardingFacts } from '../../lib/store/onboarding.js';
import { isoTime as iso } from '../../lib/infra/postgres.js';


async function licenceKey(pool: Pool, l: LicenceRow) {
  const [count, flagged] = await Promise.all([
    deviceCount(pool, l.customer_id),
    listFlaggedMachines(pool, l.customer_id),
  ]);
  return {
    license_key: l.licence_key,
    ...licenceView(l, count),
    flagged_machines: flagged.map((m) => ({
      machine: m.slug,
      first_seen_at: m.first_seen_at.toISOString(),
      last_seen_at: m.last_seen_at.toISOString(),
      flagged_at: m.over_limit_at.toISOString(),
    })),
    created_at: l.created_at.toISOString(),
    updated_at: l.updated_at.toISOString(),
  };
}

/** The onboarding steps, in order. */
const STEPS = [
  { key: 'token_created', title: 'Create an API token', hint: 'Settings -> Tokens: create a token with the ingest scope for your agents.' },
  { key: 'first_heartbeat', title: 'Send the first heartbeat', hint: 'POST /api/ingest/{customer}/{machine}/{software}/heartbeat with the token.' },
  { key: 'first_diagnostics', title: 'Send the first diagnostics', hint: 'POST …/diagnostics with {items:[{code, message, severity}]}.' },
  { key: 'first_status', title: 'Send the first status', hint: 'POST …/status with {status, message?, snapshot?}.' },
  { key: 'help_texts', title: 'Upload help texts', hint: 'POST …/help with DE and EN texts for your diagnostic codes.' },
  { key: 'teammate_invited', title: 'Invite a teammate', hint: 'Settings -> Members: invite a colleague by e-mail.' },
] as const;

export function licenceHandlers(d: ApiDeps): HandlersOf<'license_key' | 'license_status' | 'onboarding_status' | 'set_license' | 'support_info'> {
  const { pool } = d;

  /** The licence of customer `id` for this caller: the active customer, or any for a system admin. */
  async function visibleLicence(req: RequestOf<ApiRoutes['license_key']>): Promise<LicenceRow> {
    const p = principal(req);
    const { id } = req.params;
    if (id !== p.customerId && !p.isSystemAdmin) throw notFound('no such customer');
    const l = await getLicence(pool, id);
    if (!l) throw notFound('no such customer');
    return l;
  }

  return {
    async license_status(req) {
      const p = principal(req);
      const l = await getLicence(pool, p.customerId);
      if (!l) throw notFound('no such customer');
      return licenceView(l, await deviceCount(pool, p.customerId));
    },

    async license_key(req) {
      return licenceKey(pool, await visibleLicence(req));
    },

    async set_license(req) {
      const { id } = req.params;
      const body: LicenceChange = req.body;
      if (!(await customerExists(pool, id))) throw notFound('no such customer');
      let l: LicenceRow;
      try {
        l = await withTx(pool, (c) => setLicence(c, id, body));
      } catch (e) {
        if (e instanceof Error && /must be|unknown tier/.test(e.message)) throw badRequest(e.message);
        throw e;
      }
      req.log.info({ customer: l.customer, change: body, by: req.principal?.email }, 'licence changed');
      return licenceKey(pool, l);
    },

    async onboarding_status(req) {
      const p = principal(req);
      const f = await onboardingFacts(pool, p.customerId);
      const milestone = f.milestones;
      const help = await helpTextsUploaded(pool, p.customerId, milestone.get('help') ?? null);
      const at: Record<(typeof STEPS)[number]['key'], { done: boolean; at: Date | null }> = {
        token_created: { done: f.firstTokenAt !== null, at: f.firstTokenAt },
        first_heartbeat: { done: milestone.has('heartbeat'), at: milestone.get('heartbeat') ?? null },
        first_diagnostics: { done: milestone.has('diagnostics'), at: milestone.get('diagnostics') ?? null },
        first_status: { done: milestone.has('status'), at: milestone.get('status') ?? null },
        help_texts: help,
        teammate_invited: { done: f.teammate, at: f.teammateAt },
      };
      const steps = STEPS.map((s) => ({ ...s, done: at[s.key].done, done_at: iso(at[s.key].at) }));
      const done = steps.filter((s) => s.done).length;
      return { steps, done, total: steps.length, progress: done / steps.length, percent: Math.round((done / steps.length) * 100), complete: done === steps.length };
    },

    async support_info(req) {
      const p = principal(req);
      const l = await getLicence(pool, p.customerId);
      const tier = l?.tier ?? 'free';
      const s = d.cfg.support;
      const channels: { kind: 'community' | 'email' | 'phone'; label: string; value: string; hours?: string }[] = [
        { kind: 'community', label: 'Community forum', value: s.communityUrl },
        { kind: 'email', label: 'E-mail support', value: s.email },
      ];
      if (tier === 'free') return { tier, channels, contact: null };
      channels.push({ kind: 'phone', label: 'Phone support', value: s.phone, hours: s.phoneHours });
      return { tier, channels, contact: { name: s.contactName, email: s.contactEmail, phone: s.contactPhone || s.phone } };
    },
  };
}
