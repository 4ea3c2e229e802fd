// Whitelist matching (lib/domain/whitelist.ts, lib/domain/whitelist-automaton.ts), pure CPU in this process: the
// time per diagnostic item of `RuleSet.match` (lower-casing included) against rule sets at the
// api's limits (1,000 rules, 512-character message patterns, WILDCARD_GROUPS_MAX runs of wildcards,
// SUFFIX_CHAIN_MAX floating texts ending in one another) and messages of 8,192 characters, built
// to keep as many rules alive for as long as possible; a typical set for comparison; the issue's
// report; and the cost of one rule stored before the limits (the bit-parallel fallback).
//
// Each scenario: compile time of the set (the worker compiles a customer's set once per change),
// then every message matched WARMUP times (JIT), then REPEAT times timed one by one
// (performance.now around each call): min, p50 and max of the wall time over those calls, the CPU time
// of this process over all of them per call (process.cpuUsage: what the worker pays, without the
// waits of a shared machine; it includes V8's GC threads), and the work units per item (the counter
// the unit test bounds). `npm run bench -- --only whitelist` runs it alone.
import { cpus, loadavg } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { RuleSet, SUFFIX_CHAIN_MAX, WILDCARD_GROUPS_MAX, messagePatternProblem, type RuleRow } from '../lib/domain/whitelist.js';

// A full collection before each timed loop, so that the garbage of compiling (three sets) is not
// collected inside it.
setFlagsFromString('--expose_gc');
const gc = runInNewContext('gc') as () => void;

const a = (k: number) => 'a'.repeat(k);
// Deterministic random letters (a small LCG), so that every run builds the same sets.
let lcg = 12345;
const letters = (k: number) =>
  Array.from({ length: k }, () => {
    lcg = (Math.imul(lcg, 1103515245) + 12345) >>> 0;
    return String.fromCharCode(97 + ((lcg >>> 16) % 26));
  }).join('');
const RULES = 1000;
const MSG = 8192;

let seq = 0;
function rows(patterns: (string | null)[], o: Partial<RuleRow>[] = []): RuleRow[] {
  return patterns.map((p, i) => ({
    id: `00000000-0000-4000-8000-${String(seq++).padStart(12, '0')}`,
    customer_id: 'bench',
    machine_pattern: null,
    software_pattern: null,
    code_from: -2147483648,
    code_to: 2147483647,
    message_pattern: p,
    enabled: true,
    created_at: new Date(1_700_000_000_000 + i),
    ...(o[i] ?? {}),
  }));
}

interface Scenario {
  name: string;
  what: string;
  rules: RuleRow[];
  messages: string[];
  code?: number;
  machine?: string;
  software?: string;
  /** Rules over the limits on purpose (stored before them). */
  legacy?: boolean;
}

/** Up to k floating texts from "b", "ab", …: chain depth 1 per text (each ends in b, none in another). */
const ab = Array.from({ length: MSG }, (_, i) => (i % 97 === 96 ? 'b' : 'a')).join('');

function scenarios(): Scenario[] {
  const G = WILDCARD_GROUPS_MAX;
  const D = SUFFIX_CHAIN_MAX;
  return [
    {
      name: 'issue_rules',
      what: "the issue's pattern `?*` + 509 × a + b on 1,000 rules; messages of a's (the suffix check waits for the end) and one that matches",
      rules: rows(Array.from({ length: RULES }, (_, i) => '?*' + a(509 - (i % 7)) + 'b' + a(i % 7))),
      messages: [a(MSG), a(MSG - 1) + 'b', ab],
    },
    {
      name: 'suffix_chain',
      what: `floating texts a, aa, …, a^${D} (a chain of ${D} at every position) on 1,000 rules waiting for a text that never comes; messages of a's`,
      rules: rows(Array.from({ length: RULES }, (_, i) => `*${a(1 + (i % D))}*` + Array.from({ length: G - 3 }, (_, k) => a(1 + ((i + k) % D))).join('*') + `*c${i % 10}*`)),
      messages: [a(MSG), a(MSG / 2) + 'c' + a(MSG / 2 - 1)],
    },
    {
      name: 'suffix_chain_16',
      what: 'the same with a chain of 16 (a set stored before SUFFIX_CHAIN_MAX = 8; what the limit saves)',
      rules: rows(Array.from({ length: RULES }, (_, i) => `*${a(1 + (i % 16))}*` + Array.from({ length: G - 3 }, (_, k) => a(1 + ((i + k) % 16))).join('*') + `*c${i % 10}*`)),
      messages: [a(MSG), a(MSG / 2) + 'c' + a(MSG / 2 - 1)],
      legacy: true,
    },
    {
      name: 'late_failure',
      what: `\`*x*y*…\`: ${G - 1} floating texts found in order across the message, the last one missing; 1,000 rules`,
      rules: rows(Array.from({ length: RULES }, (_, i) => '*' + Array.from({ length: G - 2 }, (_, k) => a(1 + ((i + k) % 8)) + 'b').join('*') + `*zz${i % 100}*`)),
      messages: [ab, ab.slice(0, MSG - 4) + 'zz99'],
    },
    {
      name: 'anchored_pieces',
      what: `512-character patterns of ${G} \`?\`/\`*\` runs, prefix and suffix pieces that all pass but the last; 1,000 rules`,
      rules: rows(Array.from({ length: RULES }, (_, i) => Array.from({ length: 8 }, () => a(31)).join('?') + `?${a(i % 40)}*` + Array.from({ length: 7 }, () => a(30)).join('?') + a(20) + 'c')),
      messages: [a(MSG), a(MSG - 1) + 'c'],
    },
    {
      name: 'mixed_astral',
      what: 'all of the above mixed, astral characters in patterns and messages (code-point maps); 1,000 rules',
      rules: rows(
        Array.from({ length: RULES }, (_, i) =>
          [
            `*${a(1 + (i % D))}*😀*b?*x${i}`,
            '?*' + a(200 + (i % 50)) + '😀',
            `${a(i % 300)}*${a(i % 200)}?`,
            `*${'😀'.repeat(1 + (i % 5))}*${a(1 + (i % (D - 1)))}b*q`,
          ][i % 4]!,
        ),
      ),
      messages: ['😀'.repeat(MSG / 2), a(3000) + '😀'.repeat(2000) + 'b' + a(1191), ab],
    },
    {
      name: 'distinct_texts',
      what: 'the largest automaton: 1,000 patterns `*` + 510 random letters + `*` (510,000 trie nodes); random messages',
      rules: rows(Array.from({ length: RULES }, () => `*${letters(510)}*`)),
      messages: [letters(MSG), letters(MSG)],
    },
    {
      name: 'typical_50',
      what: 'typical: 50 rules of the usual shapes (`*disk*full*`, `timeout after ? s`, `error ?? on *`, machine and software patterns), messages of 40-200 characters',
      ...typical(50),
    },
    {
      name: 'typical_1000',
      what: 'typical shapes, 1,000 rules',
      ...typical(1000),
    },
    {
      name: 'legacy_fallback',
      what: 'one rule stored before the limits (`?` inside a floating segment: bit-parallel fallback), 512 characters, messages of 8,192',
      rules: rows(['*' + Array.from({ length: 8 }, () => a(62) + '?').join('') + 'b*']),
      messages: [a(MSG), ab],
      legacy: true,
    },
  ];
}

function typical(k: number): Pick<Scenario, 'rules' | 'messages' | 'machine' | 'software'> {
  const shapes = [
    () => [`*disk*full*`, null, `agent`],
    () => [`timeout after ? s`, `line-?-pc*`, null],
    () => [`error ?? on *`, null, `scanner`],
    (i: number) => [`*connection refused*port ${i}*`, null, null],
    (i: number) => [`sensor ${i % 40} out of range*`, `web-*`, null],
    (i: number) => [`*retry ${i}*`, null, `ag?nt`],
    (i: number) => [null, null, `updater-${i}`],
  ];
  const made = Array.from({ length: k }, (_, i) => shapes[i % shapes.length]!(i));
  const rs = rows(
    made.map((m) => m[0] ?? null),
    made.map((m, i) => ({ machine_pattern: m[1] ?? null, software_pattern: m[2] ?? null, code_from: 100 + (i % 50), code_to: 400 + (i % 50) })),
  );
  const messages = [
    'Disk C: is 97% full, free space below threshold',
    'Timeout after 5 s while waiting for the PLC handshake on line 3',
    'error 42 on conveyor belt 7: motor current exceeds the configured limit of 12 A',
    'connection refused by 10.0.4.17 port 502 (Modbus TCP); retrying in 30 seconds, attempt 4 of 10, last error ECONNREFUSED',
    'sensor 12 out of range: 451.2 °C',
    'Everything is fine, nothing matches here at all; this message has about two hundred characters so that the scan runs through all of it without any rule deciding early, as most of them do',
  ];
  return { rules: rs, messages, machine: 'line-4-pc2', software: 'agent' };
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

export function whitelistBench(quick: boolean, log: (m: string) => void = () => {}) {
  const WARMUP = quick ? 5 : 30;
  const REPEAT = quick ? 10 : 60;
  const out: Record<string, unknown> = {};
  for (const s of scenarios()) {
    if (!s.legacy) {
      for (const r of s.rules) {
        const problem = r.message_pattern ? messagePatternProblem(r.message_pattern) : null;
        if (problem) throw new Error(`${s.name}: a rule over the limits: ${r.message_pattern}: ${problem}`);
      }
    }
    const compileMs: number[] = [];
    const compileCpuMs: number[] = [];
    let set: RuleSet | null = null;
    for (let k = 0; k < 3; k++) {
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      set = new RuleSet(s.rules);
      compileMs.push(performance.now() - t0);
      const c = process.cpuUsage(c0);
      compileCpuMs.push((c.user + c.system) / 1000);
    }
    const rules = set!;
    if (!s.legacy && rules.suffixChainDepth > SUFFIX_CHAIN_MAX) throw new Error(`${s.name}: suffix chain ${rules.suffixChainDepth}`);
    const cands = rules.forInstance(s.machine ?? 'm', s.software ?? 's');
    const code = s.code ?? 200;
    const times: number[] = [];
    const works: number[] = [];
    const matched = new Set<string>();
    for (let k = 0; k < WARMUP; k++) for (const m of s.messages) rules.match(cands, code, m);
    gc();
    const cpu0 = process.cpuUsage();
    for (let k = 0; k < REPEAT; k++) {
      for (const m of s.messages) {
        const w0 = rules.work;
        const t0 = performance.now();
        const id = rules.match(cands, code, m);
        times.push(performance.now() - t0);
        works.push(rules.work - w0);
        if (id) matched.add(m);
      }
    }
    const cpu = process.cpuUsage(cpu0);
    times.sort((x, y) => x - y);
    const units = s.messages.reduce((acc, m) => acc + m.length, 0) / s.messages.length + s.rules.length;
    const r = {
      what: s.what,
      rules: s.rules.length,
      message_chars: Math.round(s.messages.reduce((acc, m) => acc + m.length, 0) / s.messages.length),
      messages_matched: `${matched.size} of ${s.messages.length}`,
      suffix_chain: rules.suffixChainDepth,
      automaton_nodes: rules.automaton.nodes,
      compile_ms: round(Math.min(...compileMs)),
      compile_cpu_ms: round(Math.min(...compileCpuMs)),
      us_per_item_min: round(times[0]! * 1000),
      us_per_item_p50: round(quantile(times, 0.5) * 1000),
      cpu_us_per_item: round((cpu.user + cpu.system) / times.length),
      us_per_item_max: round(times[times.length - 1]! * 1000),
      work_per_item_max: Math.max(...works),
      work_per_unit_max: round(Math.max(...works) / units, 2),
    };
    log(`whitelist ${s.name}: min ${r.us_per_item_min} µs, p50 ${r.us_per_item_p50} µs, CPU ${r.cpu_us_per_item} µs, max ${r.us_per_item_max} µs per item, work ${r.work_per_item_max}, compile ${r.compile_ms} ms (CPU ${r.compile_cpu_ms} ms)`);
    out[s.name] = r;
  }
  // The issue's report: 10 of its rules, one diagnostics report of 120 items of 8,192 characters.
  const issue = new RuleSet(rows(Array.from({ length: 10 }, () => '?*' + a(509) + 'b')));
  const items = Array.from({ length: 120 }, (_, i) => (i % 2 ? a(MSG) : a(MSG - 1) + 'b'));
  const reportMs: number[] = [];
  gc();
  const cpuR = process.cpuUsage();
  for (let k = 0; k < (quick ? 3 : 10); k++) {
    const t0 = performance.now();
    const c = issue.forInstance('m', 's');
    for (const m of items) issue.match(c, 1, m);
    reportMs.push(performance.now() - t0);
  }
  const cpuReport = process.cpuUsage(cpuR);
  out.issue_report = {
    what: "the issue's report: 10 rules `?*` + 509 × a + b, 120 items of 8,192 characters (before: 10.3 s)",
    ms_p50: round(quantile([...reportMs].sort((x, y) => x - y), 0.5), 2),
    ms_max: round(Math.max(...reportMs), 2),
    cpu_ms: round((cpuReport.user + cpuReport.system) / 1000 / reportMs.length, 2),
  };
  log(`whitelist issue report: ${JSON.stringify(out.issue_report)}`);
  return { target_us_per_item: 1000, warmup: WARMUP, repeat: REPEAT, load_avg_1m: round(loadavg()[0]!, 1), cores: cpus().length, scenarios: out };
}
