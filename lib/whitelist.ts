// Diagnostics whitelist rules (docs/decisions.md "Diagnostics whitelist"): which diagnostics a customer
// has declared harmless. A rule has optional machine, software and message patterns and a code range;
// a diagnostic matching a rule is stored with suppressed = 1 and the rule's id (never dropped) and
// does not colour the traffic light.
//
// Patterns know two wildcards only: `*` (any run of characters, also none) and `?` (exactly one
// character). Everything else is literal; there is no escape and no user regex, so no pattern can
// be made to backtrack exponentially (ReDoS): the matcher below is the classic two-pointer wildcard
// walk, O(pattern × text) in the worst case and linear for the common shapes (`abc`, `abc*`, `*abc`,
// `*abc*`). A pattern matches the whole value. Machine and software patterns match slugs as they are;
// the message pattern ignores case.

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

/** Machine and software patterns: slug characters plus the two wildcards. */
export const SLUG_PATTERN_RE = /^[a-z0-9*?-]{1,128}$/;
export const MESSAGE_PATTERN_MAX = 512;

/** A matcher for a `*`/`?` pattern. `foldCase`: compare case-insensitively (pass lower-cased values). */
export function compilePattern(pattern: string, foldCase = false): Matcher {
  const p = foldCase ? pattern.toLowerCase() : pattern;
  if (!p.includes('?')) {
    if (!p.includes('*')) return (v) => v === p;
    if (/^\*+$/.test(p)) return () => true;
    const inner = p.replace(/^\*+|\*+$/g, '');
    if (!inner.includes('*')) {
      const lead = p.startsWith('*');
      const trail = p.endsWith('*');
      if (lead && trail) return (v) => v.includes(inner);
      if (lead) return (v) => v.endsWith(inner);
      if (trail) return (v) => v.startsWith(inner);
    }
  }
  // General case, by code point (so `?` is one character, also outside the BMP).
  const pc = Array.from(p);
  const ascii = /^[\x00-\x7f]*$/.test(p);
  return (v) => wildcard(pc, ascii && /^[\x00-\x7f]*$/.test(v) ? v : Array.from(v));
}

function wildcard(p: string[], t: string | string[]): boolean {
  let pi = 0;
  let ti = 0;
  let star = -1;
  let mark = 0;
  while (ti < t.length) {
    if (pi < p.length && (p[pi] === '?' || p[pi] === t[ti])) {
      pi++;
      ti++;
    } else if (pi < p.length && p[pi] === '*') {
      star = pi++;
      mark = ti;
    } else if (star !== -1) {
      pi = star + 1;
      ti = ++mark;
    } else return false;
  }
  while (pi < p.length && p[pi] === '*') pi++;
  return pi === p.length;
}

export interface CompiledRule {
  id: string;
  customerId: string;
  createdAt: number;
  from: number;
  to: number;
  machine: Matcher | null;
  software: Matcher | null;
  message: Matcher | null;
}

export function compileRule(r: RuleRow): CompiledRule {
  return {
    id: r.id,
    customerId: r.customer_id,
    createdAt: r.created_at.getTime(),
    from: r.code_from,
    to: r.code_to,
    machine: r.machine_pattern ? compilePattern(r.machine_pattern) : null,
    software: r.software_pattern ? compilePattern(r.software_pattern) : null,
    message: r.message_pattern ? compilePattern(r.message_pattern, true) : null,
  };
}

/** Rules in the order they are tried: oldest first (then by id), so the answer is stable. */
export function ruleOrder(a: CompiledRule, b: CompiledRule): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * The id of the first rule (in `ruleOrder`) that suppresses this diagnostic, or null. `rules` are
 * one customer's enabled rules, sorted. The message is lower-cased once, and only when a rule that
 * matches everything else has a message pattern.
 */
export function matchRule(rules: CompiledRule[], machine: string, software: string, code: number, message: string): string | null {
  let lower: string | null = null;
  for (const r of rules) {
    if (code < r.from || code > r.to) continue;
    if (r.machine && !r.machine(machine)) continue;
    if (r.software && !r.software(software)) continue;
    if (r.message) {
      if (lower === null) lower = message.toLowerCase();
      if (!r.message(lower)) continue;
    }
    return r.id;
  }
  return null;
}
