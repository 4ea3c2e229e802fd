// Diagnostics whitelist rules of the active customer (docs/decisions.md "Diagnostics whitelist").
// Viewers list and read; admins create, replace and delete. A deletion is soft (deleted_at) so that
// the workers' polled copies (workers/whitelist-cache.ts) learn of it in their next delta.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import type { WhitelistRuleInput } from '../../lib/contract/schemas/whitelist.js';
import { apiRow } from '../../lib/infra/postgres.js';
import { describeQuota, loadQuotas } from '../../lib/store/quotas.js';
import { SUFFIX_CHAIN_MAX, messagePatternProblem, type RuleRow } from '../../lib/domain/whitelist.js';
import {
  createWhitelistRule,
  deleteWhitelistRule,
  enabledMessageRules,
  getWhitelistRule,
  listWhitelistRules,
  updateWhitelistRule,
  type WhitelistRuleFields,
  type WhitelistRuleRow,
} from '../../lib/store/whitelist.js';

type Row = WhitelistRuleRow;

// The rule as the api answers it: the store's SELECT names the fields, apiRow turns the times to ISO strings.
const toRule = (r: Row) => apiRow(r);

/** The rule's fields from a request body, or 400 (also for a message pattern over a per-pattern limit). */
function columns(b: WhitelistRuleInput): WhitelistRuleFields {
  const single = b.code !== undefined;
  const range = b.code_from !== undefined || b.code_to !== undefined;
  if (single && range) throw badRequest('give either code, or code_from and code_to, not both');
  if (!single && !range) throw badRequest('a rule needs a code, or a code range (code_from and code_to)');
  if (range && (b.code_from === undefined || b.code_to === undefined)) throw badRequest('a code range needs both code_from and code_to');
  const from = single ? b.code! : b.code_from!;
  const to = single ? b.code! : b.code_to!;
  if (from > to) throw badRequest(`code_from (${from}) is greater than code_to (${to})`);
  // Limits that keep matching linear (lib/domain/whitelist.ts, docs/api.md "Diagnostics whitelist").
  const problem = b.message ? messagePatternProblem(b.message) : null;
  if (problem) throw badRequest(problem);
  return { machine: b.machine ?? null, software: b.software ?? null, codeFrom: from, codeTo: to, message: b.message ?? null, note: b.note ?? '', enabled: b.enabled ?? true };
}

export function whitelistHandlers(d: ApiDeps): HandlersOf<'create_whitelist_rule' | 'delete_whitelist_rule' | 'get_whitelist_rule' | 'list_whitelist_rules' | 'update_whitelist_rule'> {
  const quotaRefusals = d.metrics.counter('fleet_quota_refusals_total');

  /**
   * The customer's enabled message patterns must keep their floating texts' suffix chains within
   * SUFFIX_CHAIN_MAX (409 otherwise): the rule set is compiled as the workers compile it. A write
   * that does not lengthen the longest chain passes (a set stored before the limit stays editable).
   * Two concurrent writes may pass together; the limit bounds matching work and the workers match
   * any set exactly.
   */
  async function checkSet(customerId: string, id: string | null, cols: WhitelistRuleFields): Promise<void> {
    const { message, enabled } = cols;
    if (!message || !enabled) return;
    const rows = await enabledMessageRules(d.pool, customerId);
    const rule: RuleRow = { id: id ?? '', customer_id: customerId, machine_pattern: null, software_pattern: null, code_from: 0, code_to: 0, message_pattern: message, enabled, created_at: new Date() };
    // Compiled off the event loop (api/whitelist-check.ts): a large set costs a fraction of a second.
    const after = await d.whitelistChecks.check(customerId, rows, rule, id);
    if (after.after <= SUFFIX_CHAIN_MAX || after.after <= after.before) return;
    const { chain } = after;
    const shown = chain.slice(0, 6).map((x) => JSON.stringify(x.length > 40 ? `${x.slice(0, 40)}…` : x));
    throw new HttpError(
      409,
      `the customer's message patterns would have ${after.after} texts between two \`*\` that end in one another (${shown.join(', ')}${chain.length > 6 ? ', …' : ''}); ` +
        `at most ${SUFFIX_CHAIN_MAX} (SUFFIX_CHAIN_MAX). Change this pattern, or change or delete one of those rules first`,
    );
  }

  async function one(customerId: string, id: string): Promise<Row> {
    const row = await getWhitelistRule(d.pool, customerId, id);
    if (!row) throw notFound('no such whitelist rule');
    return row;
  }

  return {
    async list_whitelist_rules(req) {
      const p = principal(req);
      return { items: (await listWhitelistRules(d.pool, p.customerId)).map(toRule) };
    },

    async create_whitelist_rule(req, reply) {
      const p = principal(req);
      const cols = columns(req.body);
      const max = (await loadQuotas(d.pool, d.cfg, p.customerId)).whitelist_rules;
      await checkSet(p.customerId, null, cols);
      // The count and the insert in one statement: concurrent creates cannot pass the limit by much.
      const row = await createWhitelistRule(d.pool, p.customerId, cols, p.userId ?? null, max);
      if (!row) {
        quotaRefusals.labels('whitelist_rules').inc();
        throw new HttpError(409, `${p.customer} has reached its quota of whitelist rules (${describeQuota('whitelist_rules', max)}); delete one first, or ask the operator to raise the quota`);
      }
      return reply.code(201).send(toRule(row));
    },

    async get_whitelist_rule(req) {
      const p = principal(req);
      return toRule(await one(p.customerId, req.params.id));
    },

    async update_whitelist_rule(req) {
      const p = principal(req);
      const cols = columns(req.body);
      await checkSet(p.customerId, req.params.id, cols);
      const row = await updateWhitelistRule(d.pool, p.customerId, req.params.id, cols);
      if (!row) throw notFound('no such whitelist rule');
      return toRule(row);
    },

    async delete_whitelist_rule(req, reply) {
      const p = principal(req);
      if (!(await deleteWhitelistRule(d.pool, p.customerId, req.params.id))) throw notFound('no such whitelist rule');
      return reply.code(204).send();
    },
  };
}
