// Timeout rules of the caller's customer (docs/api.md "Timeout rules"): list (viewer), create,
// change, delete (admin). The model and the recompute of the instances a rule touches:
// lib/store/timeout-rules.ts.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import { apiRow } from '../../lib/infra/postgres.js';
import { describeQuota, loadQuotas } from '../../lib/store/quotas.js';
import { createTimeoutRule, deleteTimeoutRule, listTimeoutRules, updateTimeoutRule, type TimeoutRuleRow } from '../../lib/store/timeout-rules.js';
import { lightDefaults } from '../../lib/store/instances.js';

export function timeoutRuleHandlers(d: ApiDeps): HandlersOf<'list_timeout_rules' | 'create_timeout_rule' | 'update_timeout_rule' | 'delete_timeout_rule'> {
  const quotaRefusals = d.metrics.counter('fleet_quota_refusals_total');
  const minS = d.cfg.timeoutRuleMinS;
  const rule = (r: TimeoutRuleRow) => apiRow(r);
  // One change of a customer's rules at a time on this replica: a change rewrites every instance
  // it may touch (all of the customer's, for a customer-wide rule), so a customer looping over
  // concurrent changes would spend Postgres' writes that every other customer needs. Another change
  // of the same customer meanwhile: 429 at once, holding nothing (docs/api.md "Timeout rules").
  const applying = new Set<string>();
  async function oneAtATime<T>(customerId: string, f: () => Promise<T>): Promise<T> {
    if (applying.has(customerId)) {
      throw new HttpError(429, "another change of this customer's timeout rules is being applied to its instances; retry when it has finished", { retryAfterS: 1 });
    }
    applying.add(customerId);
    try {
      return await f();
    } finally {
      applying.delete(customerId);
    }
  }
  const checkTimeout = (t: number | null | undefined) => {
    if (t != null && t < minS) throw badRequest(`timeout_s: at least ${minS} s (TIMEOUT_RULE_MIN_S): a shorter timeout makes the workers judge its instances' silences more often`);
  };

  return {
    async list_timeout_rules(req) {
      const p = principal(req);
      const [items, defaults] = await Promise.all([listTimeoutRules(d.pool, p.customerId), lightDefaults(d.pool)]);
      return { items: items.map(rule), defaults, min_timeout_s: minS };
    },

    async create_timeout_rule(req, reply) {
      const p = principal(req);
      const b = req.body;
      if (b.scope === 'software' && b.software_pattern === undefined) throw badRequest('software_pattern: required with scope software');
      if (b.scope !== 'software' && b.software_pattern !== undefined) throw badRequest(`software_pattern: only with scope software, not ${b.scope}`);
      if (b.scope === 'instance' && b.instance_id === undefined) throw badRequest('instance_id: required with scope instance');
      if (b.scope !== 'instance' && b.instance_id !== undefined) throw badRequest(`instance_id: only with scope instance, not ${b.scope}`);
      if (b.timeout_s === undefined && b.late_percent === undefined) throw badRequest('a rule sets timeout_s, late_percent or both');
      checkTimeout(b.timeout_s);
      const max = (await loadQuotas(d.pool, d.cfg, p.customerId)).timeout_rules;
      const made = await oneAtATime(p.customerId, () => createTimeoutRule(
        d.pool,
        p.customerId,
        {
          scope: b.scope,
          softwarePattern: b.software_pattern ?? null,
          instanceId: b.instance_id ?? null,
          timeoutS: b.timeout_s ?? null,
          latePercent: b.late_percent ?? null,
          description: b.description ?? '',
          createdBy: p.userId ?? null,
        },
        max,
      ));
      if ('noInstance' in made) throw notFound('no such instance');
      if ('exists' in made) throw new HttpError(409, `a rule for this target exists already (${made.exists}): change it with PUT /api/timeout-rules/${made.exists}`);
      if ('full' in made) {
        quotaRefusals.labels('timeout_rules').inc();
        throw new HttpError(
          409,
          `${p.customer} has ${made.full.count} timeout rules, its quota (${describeQuota('timeout_rules', made.full.max)}); delete one first, or ask the operator to raise the quota`,
        );
      }
      d.ruleHints?.publish(p.customerId);
      return reply.code(201).send({ rule: rule(made.created), instances_changed: made.recomputed });
    },

    async update_timeout_rule(req) {
      const p = principal(req);
      const b = req.body;
      checkTimeout(b.timeout_s);
      const out = await oneAtATime(p.customerId, () => updateTimeoutRule(d.pool, p.customerId, req.params.id, {
        ...(b.timeout_s !== undefined ? { timeoutS: b.timeout_s } : {}),
        ...(b.late_percent !== undefined ? { latePercent: b.late_percent } : {}),
        ...(b.description !== undefined ? { description: b.description } : {}),
      }));
      if (!out) throw notFound('no such rule');
      if ('empty' in out) throw badRequest('a rule keeps timeout_s, late_percent or both: delete it instead');
      d.ruleHints?.publish(p.customerId);
      return { rule: rule(out.updated), instances_changed: out.recomputed };
    },

    async delete_timeout_rule(req, reply) {
      const p = principal(req);
      if (!(await oneAtATime(p.customerId, () => deleteTimeoutRule(d.pool, p.customerId, req.params.id)))) throw notFound('no such rule');
      d.ruleHints?.publish(p.customerId);
      return reply.code(204).send();
    },
  };
}
