// The diagnostics whitelist (lib/whitelist.ts): `*`/`?` patterns, rules and their order.
import t from 'tap';
import { compilePattern, compileRule, matchRule, ruleOrder, type RuleRow } from '../../lib/whitelist.js';

t.test('wildcard patterns: * and ? only, whole value, everything else literal', async (t) => {
  const cases: [string, string, boolean][] = [
    ['web-1', 'web-1', true],
    ['web-1', 'web-10', false],
    ['web-*', 'web-', true],
    ['web-*', 'web-42', true],
    ['web-*', 'xweb-42', false],
    ['*-db', 'main-db', true],
    ['*-db', 'main-db2', false],
    ['*disk*', 'a disk b', true],
    ['line-?-pc', 'line-1-pc', true],
    ['line-?-pc', 'line-12-pc', false],
    ['line-?-pc*', 'line-3-pc-9', true],
    ['a*b*c', 'aXXbYYc', true],
    ['a*b*c', 'aXXbYY', false],
    ['*', '', true],
    ['?', '', false],
    ['??', 'é€', true],
    ['?', '😀', true],
    ['a.c', 'abc', false],
    ['a.c', 'a.c', true],
    ['(a|b)+', 'a', false],
    ['[ab]', 'a', false],
    ['[ab]', '[ab]', true],
    ['a\\*', 'a\\xyz', true],
  ];
  for (const [p, v, want] of cases) t.equal(compilePattern(p)(v), want, `${p} ~ ${v}`);
  t.equal(compilePattern('*DISK*full', true)('the disk is full'), true, 'folded case');
  // A pattern that would backtrack exponentially as a regex stays fast here.
  const evil = compilePattern('*a*a*a*a*a*a*a*a*a*a*b');
  const started = Date.now();
  t.equal(evil('a'.repeat(8192)), false);
  t.ok(Date.now() - started < 1000, `no catastrophic backtracking (${Date.now() - started} ms)`);
});

t.test('rules: code ranges, optional patterns, oldest rule wins', async (t) => {
  const row = (id: string, at: number, o: Partial<RuleRow>): RuleRow => ({
    id,
    customer_id: 'c',
    machine_pattern: null,
    software_pattern: null,
    code_from: 0,
    code_to: 0,
    message_pattern: null,
    enabled: true,
    created_at: new Date(at),
    ...o,
  });
  const rules = [
    row('b', 2, { code_from: 100, code_to: 199 }),
    row('a', 1, { code_from: 150, code_to: 150, software_pattern: 'scan*' }),
    row('c', 3, { code_from: 500, code_to: 500, machine_pattern: 'pc-?', message_pattern: '*timeout*' }),
  ]
    .map(compileRule)
    .sort(ruleOrder);
  t.equal(matchRule(rules, 'm', 'scanner', 150, ''), 'a', 'the older of two matching rules');
  t.equal(matchRule(rules, 'm', 'agent', 150, ''), 'b');
  t.equal(matchRule(rules, 'm', 'agent', 199, ''), 'b', 'range end inclusive');
  t.equal(matchRule(rules, 'm', 'agent', 200, ''), null);
  t.equal(matchRule(rules, 'pc-1', 'agent', 500, 'Read TIMEOUT on eth0'), 'c');
  t.equal(matchRule(rules, 'pc-10', 'agent', 500, 'timeout'), null);
  t.equal(matchRule(rules, 'pc-1', 'agent', 500, 'ok'), null);
});
