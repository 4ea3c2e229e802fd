// Whitelist matching at the limits, end to end: one customer with WHITELIST_MAX_RULES (1,000)
// adversarial rules (the issue's `?*` + a…a + b, 14 floating texts a, aa, …, a^8, b, …, b^6 that
// must be found in order, anchored pieces between `?`s), the last created through the api, which compiles the
// whole set to check the limits, and one more refused. A worker started after them (it loads the
// rules before it consumes) classifies a diagnostics report of messages up to 8,192 characters;
// every item is stored, with the rule the first-match semantics picks (worked out by hand below).
import t from 'tap';
import { testStack, eventually, chRows } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { messagePatternProblem, RuleSet, SUFFIX_CHAIN_MAX } from '../../lib/domain/whitelist.js';

const s = await testStack(t, 'wllimits', { worker: false });
const admin = await s.newUser('admin');
const a = (k: number) => 'a'.repeat(k);

// Rule i (creation order): three adversarial shapes, each with its own tail `#i`, within the limits.
const patterns = Array.from({ length: 999 }, (_, i) =>
  i % 3 === 0
    ? `?*${a(500)}b#${i}` // the issue's shape
    : i % 3 === 1
      ? `*${[...Array.from({ length: 8 }, (_, k) => a(k + 1)), ...Array.from({ length: 6 }, (_, k) => 'b'.repeat(k + 1))].join('*')}*#${i}#*` // 14 texts in order, chain of 8
      : `${Array.from({ length: 8 }, () => a(31)).join('?')}?*#${i}`, // 8 anchored pieces
);

t.test('1,000 adversarial rules: stored, the 1,001st refused, a report classified correctly', async (t) => {
  t.same(patterns.filter((p) => messagePatternProblem(p) !== null), [], 'every pattern within the per-pattern limits');
  await s.pool.query(
    `INSERT INTO whitelist_rules (customer_id, code_from, code_to, message_pattern, created_at)
     SELECT $1, -2147483648, 2147483647, p, timestamptz '2020-01-01 00:00:00Z' + make_interval(secs => i)
       FROM unnest($2::text[]) WITH ORDINALITY AS x(p, i)`,
    [s.customer.id, patterns],
  );
  // The 1,000th through the api: the whole set is compiled for the suffix-chain check.
  const last = await request('POST', `${s.apiUrl}/api/whitelist`, admin.jwt, { code_from: -2147483648, code_to: 2147483647, message: '*aaaa*' });
  t.equal(last.status, 201, 'the 1,000th rule accepted');
  const full = await request('POST', `${s.apiUrl}/api/whitelist`, admin.jwt, { code: 1, message: 'x*' });
  t.equal(full.status, 409, 'the 1,001st refused (WHITELIST_MAX_RULES)');
  t.match(full.body.detail, /quota of whitelist rules \(whitelist_rules = 1000\)/);
  const listed = (await request('GET', `${s.apiUrl}/api/whitelist`, admin.jwt)).body.items as { id: string; message: string }[];
  t.equal(listed.length, 1000);
  const id = (i: number) => listed[i]!.id;
  t.equal(listed[999]!.message, '*aaaa*', 'the api-created rule is tried last');
  t.equal(listed[7]!.message, patterns[7], 'creation order');
  t.ok(new RuleSet(listed.map((r, i) => ({ id: r.id, customer_id: 'c', machine_pattern: null, software_pattern: null, code_from: 0, code_to: 0, message_pattern: r.message, enabled: true, created_at: new Date(i) }))).suffixChainDepth <= SUFFIX_CHAIN_MAX);

  // The worker loads every rule before it consumes.
  await s.startWorker();
  const items: [string, string | null][] = [
    [a(8000).toUpperCase() + 'B#3', id(3)], // the issue's shape, upper case: lower-cased before matching
    [a(4000) + 'B'.repeat(100) + '#7#' + a(4000), id(7)], // 14 texts in order, then #7#
    [Array.from({ length: 8 }, () => a(31) + 'Q').join('') + 'xyz#8', id(8)], // 8 anchored pieces, `?` = Q
    [a(8192), id(999)], // only the last rule, `*aaaa*`
    ['b'.repeat(8192), null],
    ['😀'.repeat(3000) + '#7#', null], // astral; the texts a…a^8, b…b^6 are missing
    [a(200) + 'b'.repeat(30) + '#1#' + a(10), id(1)], // 36 a's and 21 b's suffice for a, …, a^8, b, …, b^6
    [a(100) + 'b'.repeat(20) + '#1#', id(999)], // 20 b's do not: fails late, the last rule matches
    ['', null],
  ];
  const r = await s.report('pc-1', 'diagnostics', { items: items.map(([message], i) => ({ code: i === 4 ? 2147483647 : 1, message, severity: 2 })) });
  t.ok(r.status === 200 || r.status === 202, `report accepted (${r.status})`);
  const rows = await eventually(async () => {
    const x = await chRows<{ item: number; message: string; suppressed: number; rule_id: string }>(s.ch, `SELECT item, message, suppressed, rule_id FROM diagnostics FINAL ORDER BY item`);
    return x.length === items.length ? x : null;
  }, 30_000, 'every item stored');
  for (const [i, [message, want]] of items.entries()) {
    const row = rows[i]!;
    t.equal(row.message.length, message.length, `item ${i} stored whole`);
    t.equal(row.rule_id, want ?? '', `item ${i} (${message.slice(0, 12)}… ${message.length} chars): ${want ? `rule ${listed.findIndex((l) => l.id === want)}` : 'no rule'}`);
    t.equal(Number(row.suppressed), want ? 1 : 0);
  }
});
