// The diagnostics whitelist (lib/domain/whitelist.ts, lib/domain/whitelist-automaton.ts): `*`/`?` patterns, rules
// and their order; the automaton against a textbook matcher (fast-check); the write-time limits;
// and a deterministic proof that the work per diagnostic is linear at those limits.
import t from 'tap';
import fc from 'fast-check';
import {
  compilePattern,
  messagePatternProblem,
  RuleSet,
  ruleOrder,
  SUFFIX_CHAIN_MAX,
  WILDCARD_GROUPS_MAX,
  MESSAGE_PATTERN_MAX,
  type RuleRow,
} from '../../lib/domain/whitelist.js';
import { INT32_MAX, INT32_MIN } from '../../lib/contract/schemas/common.js';

// ---- the reference: the textbook dynamic-programming glob matcher, by code point ----------------

function globRef(pattern: string, value: string): boolean {
  const p = Array.from(pattern);
  const v = Array.from(value);
  // ok[j]: p[0..i) matches v[0..j)
  let ok = new Array<boolean>(v.length + 1).fill(false);
  ok[0] = true;
  for (let i = 0; i < p.length; i++) {
    const next = new Array<boolean>(v.length + 1).fill(false);
    for (let j = 0; j <= v.length; j++) {
      if (p[i] === '*') next[j] = ok[j]! || (j > 0 && next[j - 1]!);
      else if (j > 0 && ok[j - 1] && (p[i] === '?' || p[i] === v[j - 1])) next[j] = true;
    }
    ok = next;
  }
  return ok[v.length]!;
}

function firstRuleRef(rows: RuleRow[], machine: string, software: string, code: number, message: string): string | null {
  for (const r of [...rows].sort(ruleOrder)) {
    if (code < r.code_from || code > r.code_to) continue;
    if (r.machine_pattern && !globRef(r.machine_pattern, machine)) continue;
    if (r.software_pattern && !globRef(r.software_pattern, software)) continue;
    if (r.message_pattern && !globRef(r.message_pattern.toLowerCase(), message.toLowerCase())) continue;
    return r.id;
  }
  return null;
}

let seq = 0;
const row = (o: Partial<RuleRow>): RuleRow => ({
  id: `r${String(seq++).padStart(6, '0')}`,
  customer_id: 'c',
  machine_pattern: null,
  software_pattern: null,
  code_from: INT32_MIN,
  code_to: INT32_MAX,
  message_pattern: null,
  enabled: true,
  created_at: new Date(1000 + seq),
  ...o,
});

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
    ['x'.repeat(40) + '?', 'x'.repeat(41), true],
    ['*' + 'x'.repeat(40), 'y'.repeat(70) + 'x'.repeat(40), true],
  ];
  for (const [p, v, want] of cases) {
    t.equal(compilePattern(p)(v), want, `${p} ~ ${v}`);
    const set = new RuleSet([row({ message_pattern: p })]);
    t.equal(set.matchOne('m', 's', 0, v) !== null, want, `as a message pattern: ${p} ~ ${v}`);
  }
  t.equal(compilePattern('*DISK*full', true)('the disk is full'), true, 'folded case');
});

t.test('rules: code ranges, optional patterns, oldest rule wins', async (t) => {
  const rules = new RuleSet([
    row({ id: 'b', created_at: new Date(2), code_from: 100, code_to: 199 }),
    row({ id: 'a', created_at: new Date(1), code_from: 150, code_to: 150, software_pattern: 'scan*' }),
    row({ id: 'c', created_at: new Date(3), code_from: 500, code_to: 500, machine_pattern: 'pc-?', message_pattern: '*timeout*' }),
  ]);
  t.equal(rules.matchOne('m', 'scanner', 150, ''), 'a', 'the older of two matching rules');
  t.equal(rules.matchOne('m', 'agent', 150, ''), 'b');
  t.equal(rules.matchOne('m', 'agent', 199, ''), 'b', 'range end inclusive');
  t.equal(rules.matchOne('m', 'agent', 200, ''), null);
  t.equal(rules.matchOne('pc-1', 'agent', 500, 'Read TIMEOUT on eth0'), 'c');
  t.equal(rules.matchOne('pc-10', 'agent', 500, 'timeout'), null);
  t.equal(rules.matchOne('pc-1', 'agent', 500, 'ok'), null);
  // Same creation time: the id decides.
  const tie = new RuleSet([row({ id: 'y', created_at: new Date(5) }), row({ id: 'x', created_at: new Date(5) })]);
  t.equal(tie.matchOne('m', 's', 0, ''), 'x');
});

// ---- the property: the automaton picks exactly the rule the reference picks ---------------------

// Short alphabets (so that texts repeat and overlap), case-changing characters (İ lower-cases to two
// code points, Σ depends on its neighbours, 𐐀 is astral with an astral lower case), astral and lone
// surrogates, the wildcards.
const LETTERS = ['a', 'b', 'A', 'B', 'İ', 'i', '\u0307', 'Σ', 'σ', 'ς', 'ß', '😀', '𐐀', '𐐨', '\uD83D', '\uDE00', ' '];
const letter = fc.oneof({ weight: 6, arbitrary: fc.constantFrom('a', 'b', 'A') }, { weight: 4, arbitrary: fc.constantFrom(...LETTERS) });
const patternToken = fc.oneof({ weight: 5, arbitrary: letter }, { weight: 2, arbitrary: fc.constantFrom('*', '?', '**', '??', '*?', '?*') });
const messagePattern = fc.array(patternToken, { maxLength: 12 }).map((a) => a.join(''));
const EDGES = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, 2, INT32_MAX - 1, INT32_MAX];
const code = fc.oneof(fc.constantFrom(...EDGES), fc.integer({ min: -3, max: 3 }));
const slugPattern = fc.array(fc.constantFrom('a', 'b', '-', '*', '*', '?'), { minLength: 1, maxLength: 6 }).map((a) => a.join(''));
const slug = fc.array(fc.constantFrom('a', 'b', '-'), { minLength: 1, maxLength: 5 }).map((a) => a.join(''));

const ruleArb = fc.record({
  machine: fc.option(slugPattern, { freq: 2 }),
  software: fc.option(slugPattern, { freq: 2 }),
  range: fc.oneof(fc.constant([INT32_MIN, INT32_MAX]), fc.tuple(code, code).map(([a, b]) => (a <= b ? [a, b] : [b, a]))),
  message: fc.option(messagePattern, { freq: 5 }),
  at: fc.integer({ min: 0, max: 3 }),
});

/** A message made from a pattern: each `*` becomes 0-3 letters, each `?` one (so matches happen). */
function instantiate(pattern: string, fills: string[]): string {
  let k = 0;
  return Array.from(pattern)
    .map((c) => (c === '*' ? fills[k++ % fills.length]!.slice(0, k % 4) : c === '?' ? (fills[k++ % fills.length]![0] ?? 'a') : c))
    .join('');
}

t.test('property: the first matching rule is exactly the reference matcher’s', async (t) => {
  let matched = 0;
  let total = 0;
  fc.assert(
    fc.property(
      fc.array(ruleArb, { minLength: 1, maxLength: 8 }),
      fc.array(
        fc.record({
          machine: slug,
          software: slug,
          code,
          from: fc.nat(),
          fills: fc.array(fc.array(letter, { maxLength: 4 }).map((a) => a.join('')), { minLength: 1, maxLength: 4 }),
          random: fc.array(letter, { maxLength: 16 }).map((a) => a.join('')),
          kind: fc.constantFrom('random', 'instance', 'instance', 'empty', 'instance-upper'),
        }),
        { minLength: 1, maxLength: 6 },
      ),
      (specs, items) => {
        const rows = specs.map((s, i) =>
          row({
            id: `r${i}`,
            machine_pattern: s.machine,
            software_pattern: s.software,
            code_from: s.range[0]!,
            code_to: s.range[1]!,
            message_pattern: s.message,
            created_at: new Date(s.at),
          }),
        );
        const set = new RuleSet(rows);
        for (const it of items) {
          const src = rows[it.from % rows.length]!.message_pattern ?? '';
          let message = it.kind === 'random' ? it.random : it.kind === 'empty' ? '' : instantiate(src, it.fills);
          if (it.kind === 'instance-upper') message = message.toUpperCase();
          const want = firstRuleRef(rows, it.machine, it.software, it.code, message);
          const got = set.matchOne(it.machine, it.software, it.code, message);
          total++;
          if (want) matched++;
          if (got !== want) throw new Error(`rule ${got} instead of ${want} for ${JSON.stringify({ message, code: it.code, machine: it.machine, software: it.software, rows })}`);
        }
      },
    ),
    { numRuns: 3000 },
  );
  // The property means something only if both answers occur often.
  t.ok(matched > total / 20 && matched < total * 0.95, `items matched by some rule: ${matched} of ${total}`);
});

t.test('property: longer texts over "ab" with many rules (segments that overlap and repeat)', async (t) => {
  const ab = fc.array(fc.constantFrom('a', 'b'), { maxLength: 40 }).map((a) => a.join(''));
  const pat = fc.array(fc.oneof({ weight: 6, arbitrary: fc.constantFrom('a', 'b') }, { weight: 2, arbitrary: fc.constantFrom('*', '?') }), { maxLength: 14 }).map((a) => a.join(''));
  fc.assert(
    fc.property(fc.array(pat, { minLength: 1, maxLength: 30 }), fc.array(ab, { minLength: 1, maxLength: 10 }), (patterns, messages) => {
      const rows = patterns.map((p, i) => row({ id: `r${String(i).padStart(3, '0')}`, message_pattern: p || null, created_at: new Date(0) }));
      const set = new RuleSet(rows);
      for (const m of messages) {
        const want = firstRuleRef(rows, 'm', 's', 0, m);
        const got = set.matchOne('m', 's', 0, m);
        if (got !== want) throw new Error(`${got} instead of ${want} for ${JSON.stringify(m)} and ${JSON.stringify(patterns)}`);
      }
    }),
    { numRuns: 2000 },
  );
  t.pass('agrees');
});

t.test('the single-pattern matcher agrees with the reference', async (t) => {
  fc.assert(
    fc.property(messagePattern, fc.array(letter, { maxLength: 12 }).map((a) => a.join('')), (p, v) => compilePattern(p)(v) === globRef(p, v)),
    { numRuns: 3000 },
  );
  t.pass('agrees');
});

// ---- write-time limits -------------------------------------------------------------------------

t.test('limits: `?` inside a floating segment and too many wildcard runs are refused', async (t) => {
  t.match(messagePatternProblem('*d?sk*'), /between two `\*`/);
  t.match(messagePatternProblem('*a*b?c*d'), /between two `\*`/);
  for (const ok of ['*?disk*', '*disk?*', '*??disk??*', 'd?sk*', '*d?sk', 'a?b', '*?*', '?*' + 'a'.repeat(509) + 'b', '*disk*full*']) {
    t.equal(messagePatternProblem(ok), null, `${ok} is fine`);
  }
  const groups = (k: number) => Array.from({ length: k }, (_, i) => `x${i}`).join('*');
  t.equal(messagePatternProblem(groups(WILDCARD_GROUPS_MAX + 1)), null, `${WILDCARD_GROUPS_MAX} runs`);
  t.match(messagePatternProblem(groups(WILDCARD_GROUPS_MAX + 2)), /at most 16 runs/);
  t.match(messagePatternProblem('a?'.repeat(WILDCARD_GROUPS_MAX + 1)), /at most 16 runs/, '`?` runs count too');
  // The suffix chain is a property of the customer's whole set.
  const chain = (k: number) => new RuleSet(Array.from({ length: k }, (_, i) => row({ message_pattern: `*${'a'.repeat(i + 1)}*` }))).suffixChainDepth;
  t.equal(chain(3), 3);
  t.same(new RuleSet([row({ message_pattern: '*aa*b*' }), row({ message_pattern: 'x*a*' }), row({ message_pattern: '*ba*aaa*' })]).automaton.longestChain(), ['aaa', 'aa', 'a'], 'the chain, longest first');
  t.equal(chain(SUFFIX_CHAIN_MAX + 1), SUFFIX_CHAIN_MAX + 1);
  t.equal(new RuleSet([row({ message_pattern: '*ab*' }), row({ message_pattern: '*b*' }), row({ message_pattern: 'aaa*' })]).suffixChainDepth, 2, 'anchored texts do not count');
});

t.test('rules stored before the limits are still applied exactly', async (t) => {
  const old = new RuleSet([
    row({ id: 'inner', message_pattern: '*d?sk*full*' }),
    row({ id: 'many', message_pattern: 'a?'.repeat(30) + '*' }),
  ]);
  t.same(old.overLimits.map((o) => o.id), ['inner', 'many']);
  t.equal(old.matchOne('m', 's', 0, 'the DESK is full'), 'inner');
  t.equal(old.matchOne('m', 's', 0, 'the desk is empty'), null);
  t.equal(old.matchOne('m', 's', 0, 'ab'.repeat(30) + 'zz'), 'many');
  t.equal(old.matchOne('m', 's', 0, 'ab'.repeat(29)), null);
});

// ---- linear work at the limits -----------------------------------------------------------------

// Work units (lib/domain/whitelist-automaton.ts): automaton steps (≤ 2n), output-link visits (≤ D·n),
// the code-point map (n, with surrogates), and per rule: the candidate check, its set-up, one event
// per anchored piece, two per floating text (start waiting, advance), its deadline, its drop. Per
// diagnostic of n code units against R rules within the limits (D = SUFFIX_CHAIN_MAX, G =
// WILDCARD_GROUPS_MAX; literal runs ≤ G + 1):
//   work ≤ (3 + D)·n + (2G + 6)·R ≤ C·(n + R), C = max(3 + D, 2G + 6) = 38 (D = 8, G = 16)
const PER_UNIT = 3 + SUFFIX_CHAIN_MAX;
const PER_RULE = 2 * WILDCARD_GROUPS_MAX + 6;
const C = Math.max(PER_UNIT, PER_RULE);

function workPerItem(patterns: string[], messages: string[]) {
  for (const p of patterns) {
    if (messagePatternProblem(p)) throw new Error(`over a limit: ${p}: ${messagePatternProblem(p)}`);
    if (Array.from(p).length > MESSAGE_PATTERN_MAX) throw new Error(`too long: ${p.length}`);
  }
  const set = new RuleSet(patterns.map((p) => row({ message_pattern: p })));
  if (set.suffixChainDepth > SUFFIX_CHAIN_MAX) throw new Error(`suffix chain ${set.suffixChainDepth}`);
  const cands = set.forInstance('m', 's');
  return messages.map((m) => {
    const before = set.work;
    const id = set.match(cands, 1, m);
    return { n: m.length, rules: patterns.length, work: set.work - before, id };
  });
}

t.test(`work per diagnostic ≤ ${C}·(n + rules) for adversarial rules at the limits`, async (t) => {
  const a = (k: number) => 'a'.repeat(k);
  const R = 1000;
  const long = a(8192);
  const ab = Array.from({ length: 8192 }, (_, i) => (i % 97 === 96 ? 'b' : 'a')).join('');
  const scenarios: [string, string[], string[]][] = [
    // The issue: `?*` + 509 × a + b, full code range; messages of a's (and ending in b: a match).
    ['issue: ?*a…ab', Array.from({ length: R }, () => '?*' + a(509) + 'b'), [long, a(8191) + 'b', ab]],
    // Floating texts a, aa, …, a^D: the whole chain is walked at every position while 1,000 rules
    // of 16 wildcard runs wait for a text that never comes.
    [
      `suffix chain a…a^${SUFFIX_CHAIN_MAX}`,
      Array.from({ length: R }, (_, i) => `*${a(1 + (i % SUFFIX_CHAIN_MAX))}*` + Array.from({ length: 13 }, (_, k) => a(1 + ((i + k) % SUFFIX_CHAIN_MAX))).join('*') + `*c${i % 10}*`),
      [long, a(4096) + 'c' + a(4095)],
    ],
    // `*x*y*…`: 15 floating segments found in order, the last text missing: fails at the very end.
    [
      '*x*y* orderings that fail late',
      Array.from({ length: R }, (_, i) => '*' + Array.from({ length: 14 }, (_, k) => a(1 + ((i + k) % 8)) + 'b').join('*') + '*zz*'),
      [ab, long, ab.slice(0, 4000) + 'zz'],
    ],
    // Anchored pieces: 16 `?` runs in a 512-character prefix, passing until the last piece.
    ['anchored prefix and suffix pieces', Array.from({ length: R }, (_, i) => Array.from({ length: 8 }, () => a(31)).join('?') + `?${a(i % 50)}*` + Array.from({ length: 7 }, () => a(20)).join('?') + 'c'), [long, ab]],
    // Every kind at once, astral text included.
    [
      'mixed, astral text',
      Array.from({ length: R }, (_, i) => [`*${a(1 + (i % SUFFIX_CHAIN_MAX))}*😀*b?*`, `?*${a(200)}😀`, `${a(i % 300)}*`, `*${'😀'.repeat(1 + (i % 5))}*x`][i % 4]!),
      ['😀'.repeat(4096), a(4000) + '😀'.repeat(2000) + 'b', ab],
    ],
  ];
  let worst = 0;
  for (const [name, patterns, messages] of scenarios) {
    for (const r of workPerItem(patterns, messages)) {
      const bound = PER_UNIT * r.n + PER_RULE * r.rules;
      t.ok(r.work <= bound, `${name}: n=${r.n}, rules=${r.rules}: work ${r.work} ≤ ${PER_UNIT}·n + ${PER_RULE}·rules = ${bound} ≤ ${C}·(n + rules) (rule ${r.id ?? 'none'})`);
      worst = Math.max(worst, r.work / bound);
    }
  }
  // The bound is close to what the worst of these inputs costs (the suffix chain: every output link
  // visited at every position), so the counter counts what it says.
  t.ok(worst > 0.8, `the worst scenario uses ${(worst * 100).toFixed(0)} % of the bound`);
  const [issue] = workPerItem(['?*' + a(509) + 'b'], [a(8191) + 'b']);
  t.ok(issue!.work >= 8192, `one pass over the message is counted (${issue!.work})`);
  t.equal(issue!.id !== null, true, 'and the issue rule matches its message');
});
