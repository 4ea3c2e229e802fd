// Diagnostics whitelist rules (docs/decisions.md "Diagnostics whitelist"): which diagnostics a customer
// has declared harmless. A rule has optional machine, software and message patterns and a code range;
// a diagnostic matching a rule is stored with suppressed = 1 and the rule's id (never dropped) and
// does not colour the traffic light.
//
// Patterns know two wildcards only: `*` (any run of characters, also none) and `?` (exactly one
// character, that is one code point, also outside the BMP). Everything else is literal; there is no
// escape and no user regex. A pattern matches the whole value. Machine and software patterns match
// slugs as they are; the message pattern ignores case (message and pattern are both lower-cased
// with toLowerCase, then compared by code point).
//
// Cost (docs/operations.md "Whitelist matching"): a customer's rules are compiled once into a
// RuleSet. Slug patterns are matched bit-parallel (`Glob`: O(pattern × ⌈slug/32⌉) word operations)
// once per machine and per software name, cached. Message patterns are matched all at once by one
// automaton (lib/domain/whitelist-automaton.ts) in time linear in the message and the number of rules,
// given the limits below, which the api enforces when a rule is written. Rules stored before those
// limits are still applied exactly: a message pattern with a `?` inside a floating segment goes
// to the bit-parallel `Glob` (O(pattern × message / 32) per item and rule), everything else stays
// in the automaton, at more work per item.
import { MessageAutomaton, parseMessagePattern, type ParsedMessage } from './whitelist-automaton.js';

export { parseMessagePattern };

export interface RuleRow {
  id: string;
  customer_id: string;
  machine_pattern: string | null;
  software_pattern: string | null;
  code_from: number;
  code_to: number;
  message_pattern: string | null;
  enabled: boolean;
  created_at: Date;
}

export type Matcher = (value: string) => boolean;

export const MESSAGE_PATTERN_MAX = 512;
/** Runs of `*`/`?` in one message pattern (`a*b?c*` has three). */
export const WILDCARD_GROUPS_MAX = 16;
/** A customer's floating message texts (between two `*`) that end in one another: "a", "aa", "aaa" is 3. */
export const SUFFIX_CHAIN_MAX = 8;
/** Machine (or software) names whose slug-pattern results a RuleSet keeps. */
const SLUG_CACHE_MAX = 10_000;

// ---------------------------------------------------------------------------------------------
// Bit-parallel glob: the set of text positions reachable after each pattern character, one bit per
// position (0..n), in 32-bit words. Exact by code point; O(pattern × ⌈(n + 1)/32⌉).

/** A value prepared for `Glob.test`: one bit mask of its positions per code point it holds. */
export class GlobText {
  readonly n: number;
  readonly words: number;
  readonly masks = new Map<number, Uint32Array>();
  /** Positions 0..n-1 (where one more character can be read). */
  readonly any: Uint32Array;
  constructor(value: string) {
    const cps: number[] = [];
    for (const ch of value) cps.push(ch.codePointAt(0)!);
    const n = cps.length;
    this.n = n;
    this.words = (n >>> 5) + 1;
    this.any = new Uint32Array(this.words);
    for (let i = 0; i < n; i++) {
      let m = this.masks.get(cps[i]!);
      if (!m) this.masks.set(cps[i]!, (m = new Uint32Array(this.words)));
      m[i >>> 5]! |= 1 << (i & 31);
      this.any[i >>> 5]! |= 1 << (i & 31);
    }
  }
}

const OP_ANY = -1;
const OP_STAR = -2;
let globBuf = new Uint32Array(8);

/** A `*`/`?` pattern for the bit-parallel matcher. */
export class Glob {
  private readonly ops: Int32Array;
  private readonly literal: string | null;
  constructor(pattern: string) {
    const ops: number[] = [];
    for (const ch of pattern) {
      if (ch === '*') {
        if (ops[ops.length - 1] !== OP_STAR) ops.push(OP_STAR);
      } else ops.push(ch === '?' ? OP_ANY : ch.codePointAt(0)!);
    }
    this.ops = Int32Array.from(ops);
    this.literal = /[*?]/.test(pattern) ? null : pattern;
  }

  /** Whether the whole of `t` matches; `work` (if given) counts word operations. */
  test(t: GlobText, work?: { n: number }): boolean {
    if (this.literal !== null) {
      // No wildcard: code points equal exactly when the strings are.
      if (work) work.n += this.ops.length;
      if (this.ops.length !== t.n) return false;
    }
    const W = t.words;
    if (globBuf.length < W) globBuf = new Uint32Array(Math.max(W, globBuf.length * 2));
    const R = globBuf;
    R.fill(0, 0, W);
    R[0] = 1;
    let lo = 0;
    let ops = 0;
    const n = t.n;
    const lastWord = n >>> 5;
    const lastMask = (n & 31) === 31 ? 0xffffffff : ((1 << ((n & 31) + 1)) - 1) >>> 0;
    for (const op of this.ops) {
      ops += W - lo;
      if (op === OP_STAR) {
        // Every position from the first reachable one on.
        const b = 31 - Math.clz32(R[lo]! & -R[lo]!);
        R[lo] = (0xffffffff << b) >>> 0;
        for (let w = lo + 1; w < W; w++) R[w] = 0xffffffff;
        R[lastWord] = R[lastWord]! & lastMask;
        continue;
      }
      const M = op === OP_ANY ? t.any : t.masks.get(op);
      if (!M) {
        if (work) work.n += ops;
        return false;
      }
      let carry = 0;
      let any = 0;
      for (let w = lo; w < W; w++) {
        const v = R[w]! & M[w]!;
        const next = ((v << 1) | carry) >>> 0;
        carry = v >>> 31;
        R[w] = next;
        any |= next;
      }
      if (any === 0) {
        if (work) work.n += ops;
        return false;
      }
      while (R[lo] === 0) lo++;
    }
    if (work) work.n += ops;
    return (R[lastWord]! & (1 << (n & 31))) !== 0;
  }
}

/** A matcher for one `*`/`?` pattern. `foldCase`: compare case-insensitively (pass lower-cased values). */
export function compilePattern(pattern: string, foldCase = false): Matcher {
  const g = new Glob(foldCase ? pattern.toLowerCase() : pattern);
  return (v) => g.test(new GlobText(v));
}

// ---------------------------------------------------------------------------------------------
// Limits (the api refuses rules over them; docs/api.md "Diagnostics whitelist").

/** Why a message pattern is over a per-pattern limit, or null. */
export function messagePatternProblem(pattern: string): string | null {
  const m = parseMessagePattern(pattern);
  if (m.innerQuestion) {
    return 'message pattern: between two `*`, a `?` may only stand next to a `*` (`*?disk*`, `*disk?*`), not between two other characters (`*d?sk*`); put such text before the first or after the last `*`, or split it with a `*`';
  }
  if (m.groups > WILDCARD_GROUPS_MAX) {
    return `message pattern: at most ${WILDCARD_GROUPS_MAX} runs of wildcards (\`*\`, \`?\`) per pattern (WILDCARD_GROUPS_MAX); this one has ${m.groups}`;
  }
  return null;
}

/** Rules in the order they are tried: oldest first (then by id), so the answer is stable. */
export function ruleOrder(a: Pick<RuleRow, 'id' | 'created_at'>, b: Pick<RuleRow, 'id' | 'created_at'>): number {
  return a.created_at.getTime() - b.created_at.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

const MSG_NONE = 0; // no message pattern (or only `*`): matches any message
const MSG_AUTOMATON = 1;
const MSG_GLOB = 2; // stored before the limits: `?` inside a floating segment

/** A rule stored before the limits, and how it is matched now. */
export interface OverLimit {
  id: string;
  reason: string;
}

/**
 * One customer's enabled rules, compiled: `forInstance` once per report (machine and software),
 * then `match` per diagnostic. The api builds one too, to check the limits of a rule set.
 */
export class RuleSet {
  readonly ids: string[];
  readonly size: number;
  /** The customer's longest chain of floating texts ending in one another (SUFFIX_CHAIN_MAX). */
  readonly suffixChainDepth: number;
  /** Rules over the matching limits (stored before them), with how they are matched. */
  readonly overLimits: OverLimit[] = [];
  readonly automaton: MessageAutomaton;

  private readonly from: Float64Array;
  private readonly to: Float64Array;
  private readonly msgKind: Uint8Array;
  private readonly globs = new Map<number, Glob>();
  private readonly machineIdx: Int32Array;
  private readonly softwareIdx: Int32Array;
  private readonly machineGlobs: Glob[] = [];
  private readonly softwareGlobs: Glob[] = [];
  private readonly machineCache = new Map<string, Uint8Array>();
  private readonly softwareCache = new Map<string, Uint8Array>();
  private readonly list: Int32Array;
  private readonly globList: Int32Array;
  private readonly globWork = { n: 0 };
  private ownWork = 0;

  constructor(rows: readonly RuleRow[]) {
    const sorted = [...rows].sort(ruleOrder);
    const R = sorted.length;
    this.size = R;
    this.ids = sorted.map((r) => r.id);
    this.from = Float64Array.from(sorted, (r) => r.code_from);
    this.to = Float64Array.from(sorted, (r) => r.code_to);
    this.msgKind = new Uint8Array(R);
    const parsed: (ParsedMessage | null)[] = new Array(R).fill(null);
    const slug = (pattern: string | null, globs: Glob[], seen: Map<string, number>) => {
      if (!pattern || /^\*+$/.test(pattern)) return -1;
      let i = seen.get(pattern);
      if (i === undefined) {
        i = globs.length;
        globs.push(new Glob(pattern));
        seen.set(pattern, i);
      }
      return i;
    };
    const seenM = new Map<string, number>();
    const seenS = new Map<string, number>();
    this.machineIdx = Int32Array.from(sorted, (r) => slug(r.machine_pattern, this.machineGlobs, seenM));
    this.softwareIdx = Int32Array.from(sorted, (r) => slug(r.software_pattern, this.softwareGlobs, seenS));
    for (let i = 0; i < R; i++) {
      const p = sorted[i]!.message_pattern;
      if (!p) continue;
      const m = parseMessagePattern(p);
      if (m.matchAll) continue;
      if (m.innerQuestion) {
        this.msgKind[i] = MSG_GLOB;
        this.globs.set(i, new Glob(p.toLowerCase()));
        this.overLimits.push({ id: sorted[i]!.id, reason: 'a `?` inside a floating segment: matched on its own (bit-parallel, O(pattern × message / 32) per diagnostic)' });
        continue;
      }
      this.msgKind[i] = MSG_AUTOMATON;
      parsed[i] = m;
      if (m.groups > WILDCARD_GROUPS_MAX) this.overLimits.push({ id: sorted[i]!.id, reason: `${m.groups} wildcard runs (over ${WILDCARD_GROUPS_MAX}): more work per diagnostic` });
    }
    this.automaton = new MessageAutomaton(parsed);
    this.suffixChainDepth = this.automaton.suffixChainDepth;
    if (this.suffixChainDepth > SUFFIX_CHAIN_MAX) this.overLimits.push({ id: '(rule set)', reason: `floating texts ending in one another: ${this.suffixChainDepth} (over ${SUFFIX_CHAIN_MAX}): more work per diagnostic` });
    this.list = new Int32Array(R);
    this.globList = new Int32Array(R);
  }

  /** Work units done so far (automaton, rule events, glob word operations); a counter. */
  get work(): number {
    return this.ownWork + this.automaton.work + this.globWork.n;
  }

  private slugResults(value: string, globs: Glob[], cache: Map<string, Uint8Array>): Uint8Array {
    let res = cache.get(value);
    if (res) return res;
    const t = new GlobText(value);
    res = Uint8Array.from(globs, (g) => (g.test(t, this.globWork) ? 1 : 0));
    if (cache.size >= SLUG_CACHE_MAX) cache.delete(cache.keys().next().value!);
    cache.set(value, res);
    return res;
  }

  /** The rules whose machine and software patterns accept this instance, in rule order. */
  forInstance(machine: string, software: string): Int32Array {
    const m = this.machineGlobs.length ? this.slugResults(machine, this.machineGlobs, this.machineCache) : null;
    const s = this.softwareGlobs.length ? this.slugResults(software, this.softwareGlobs, this.softwareCache) : null;
    const out = new Int32Array(this.size);
    let k = 0;
    for (let i = 0; i < this.size; i++) {
      const mi = this.machineIdx[i]!;
      const si = this.softwareIdx[i]!;
      if ((mi < 0 || m![mi] === 1) && (si < 0 || s![si] === 1)) out[k++] = i;
    }
    this.ownWork += this.size;
    return out.subarray(0, k);
  }

  /** The id of the first rule (in `ruleOrder`) among `candidates` that suppresses this diagnostic, or null. */
  match(candidates: Int32Array, code: number, message: string): string | null {
    let best = this.size;
    let auto = 0;
    let glob = 0;
    const { from, to, msgKind, list, globList } = this;
    for (let j = 0; j < candidates.length; j++) {
      const i = candidates[j]!;
      if (code < from[i]! || code > to[i]!) continue;
      const kind = msgKind[i];
      if (kind === MSG_NONE) {
        best = i;
        break;
      }
      if (kind === MSG_AUTOMATON) list[auto++] = i;
      else globList[glob++] = i;
    }
    this.ownWork += candidates.length;
    if (auto + glob > 0) {
      const lower = message.toLowerCase();
      if (auto > 0) best = this.automaton.match(lower, list, auto, best);
      if (glob > 0 && globList[0]! < best) {
        const t = new GlobText(lower);
        for (let j = 0; j < glob && globList[j]! < best; j++) {
          if (this.globs.get(globList[j]!)!.test(t, this.globWork)) {
            best = globList[j]!;
            break;
          }
        }
      }
    }
    return best < this.size ? this.ids[best]! : null;
  }

  /** `forInstance` and `match` in one call (tests, one-off checks). */
  matchOne(machine: string, software: string, code: number, message: string): string | null {
    return this.match(this.forInstance(machine, software), code, message);
  }
}
