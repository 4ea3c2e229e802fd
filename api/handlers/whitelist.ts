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

interface Row {
  id: string;
  machine: string | null;
  software: string | null;
  code_from: number;
  code_to: number;
  message: string | null;
  note: string;
  enabled: boolean;
  created_at: Date;
  updated_at: Date;
}

// The rule as the api answers it: the SELECT names the fields, apiRow turns the times to ISO strings.
const COLS = `id, machine_pattern AS machine, software_pattern AS software, code_from, code_to, message_pattern AS message, note, enabled,
              created_at, updated_at`;
const toRule = (r: Row) => apiRow(r);

/** The rule's columns from a request body, or 400 (also for a message pattern over a per-pattern limit). */
function columns(b: WhitelistRuleInput): unknown[] {
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
  return [b.machine ?? null, b.software ?? null, from, to, b.message ?? null, b.note ?? '', b.enabled ?? true];
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
  async function checkSet(customerId: string, id: string | null, cols: unknown[]): Promise<void> {
    const message = cols[4] as string | null;
    const enabled = cols[6] as boolean;
    if (!message || !enabled) return;
    const r = await d.pool.query<RuleRow>(
      `SELECT id, customer_id, machine_pattern, software_pattern, code_from, code_to, message_pattern, enabled, created_at
         FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL AND enabled AND message_pattern IS NOT NULL`,
      [customerId],
    );
    const rule: RuleRow = { id: id ?? '', customer_id: customerId, machine_pattern: null, software_pattern: null, code_from: 0, code_to: 0, message_pattern: message, enabled, created_at: new Date() };
    // Compiled off the event loop (api/whitelist-check.ts): a large set costs a fraction of a second.
    const after = await d.whitelistChecks.check(customerId, r.rows, rule, id);
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
    const r = await d.pool.query<Row>(`SELECT ${COLS} FROM whitelist_rules WHERE customer_id = $1 AND id = $2 AND deleted_at IS NULL`, [customerId, id]);
    if (!r.rows[0]) throw notFound('no such whitelist rule');
    return r.rows[0];
  }

  return {
    async list_whitelist_rules(req) {
      const p = principal(req);
      const r = await d.pool.query<Row>(`SELECT ${COLS} FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`, [p.customerId]);
      return { items: r.rows.map(toRule) };
    },

    async create_whitelist_rule(req, reply) {
      const p = principal(req);
      const cols = columns(req.body as WhitelistRuleInput);
      const max = (await loadQuotas(d.pool, d.cfg, p.customerId)).whitelist_rules;
      await checkSet(p.customerId, null, cols);
      // The count and the insert in one statement: concurrent creates cannot pass the limit by much
      // (the limit bounds matching work, it is not a billing quota).
      const r = await d.pool.query<Row>(
        `INSERT INTO whitelist_rules (customer_id, machine_pattern, software_pattern, code_from, code_to, message_pattern, note, enabled, created_by)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
          WHERE (SELECT count(*) FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL) < $10
         RETURNING ${COLS}`,
        [p.customerId, ...cols, p.userId ?? null, max],
      );
      if (!r.rows[0]) {
        quotaRefusals.labels('whitelist_rules').inc();
        throw new HttpError(409, `${p.customer} has reached its quota of whitelist rules (${describeQuota('whitelist_rules', max)}); delete one first, or ask the operator to raise the quota`);
      }
      return reply.code(201).send(toRule(r.rows[0]));
    },

    async get_whitelist_rule(req) {
      const p = principal(req);
      return toRule(await one(p.customerId, req.params.id));
    },

    async update_whitelist_rule(req) {
      const p = principal(req);
      const cols = columns(req.body as WhitelistRuleInput);
      await checkSet(p.customerId, req.params.id, cols);
      const r = await d.pool.query<Row>(
        `UPDATE whitelist_rules
            SET machine_pattern = $3, software_pattern = $4, code_from = $5, code_to = $6, message_pattern = $7, note = $8, enabled = $9
          WHERE customer_id = $1 AND id = $2 AND deleted_at IS NULL
         RETURNING ${COLS}`,
        [p.customerId, req.params.id, ...cols],
      );
      if (!r.rows[0]) throw notFound('no such whitelist rule');
      return toRule(r.rows[0]);
    },

    async delete_whitelist_rule(req, reply) {
      const p = principal(req);
      const r = await d.pool.query(`UPDATE whitelist_rules SET deleted_at = now() WHERE customer_id = $1 AND id = $2 AND deleted_at IS NULL`, [
        p.customerId,
        req.params.id,
      ]);
      if (!r.rowCount) throw notFound('no such whitelist rule');
      return reply.code(204).send();
    },
  };
}
