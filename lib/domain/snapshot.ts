// Typed snapshot leaves (spec 2.4, release 5.10.0; docs/decisions.md "Typed snapshot leaves").
//
// A status snapshot is a free tree. Since 5.10.0 a leaf may describe itself: an object (not an
// array) with a `value` key and a string `type` key is a typed leaf; `unit`, `label` and `hint` are
// optional strings. The tree is stored exactly as sent (instances.snapshot, status_history); this
// module does the two things around it:
//
//   checkSnapshot    (gateway, before accepting) a typed leaf of a KNOWN type whose value does not
//                    fit that type, or whose unit/label/hint is not a string, is a schema violation:
//                    422 with the JSON Pointer of the leaf. Unknown types and untyped leaves are never
//                    checked, so older agents (no typed leaves) and newer ones (new types) keep working.
//   resolveSnapshot  (read API) every typed leaf of a known type becomes
//                    {value, type, unit, label, hint, display}: unit defaulted by type (percent "%",
//                    bytes "B", duration_s "s"), label and hint null when absent, `display` a
//                    human-readable rendering. Unknown-type leaves and untyped values come back as sent.
//
// Known types and what their value must be:
//   string      string
//   number      finite number
//   integer     integer (safe range)
//   boolean     true or false
//   percent     finite number (no range: a multi-core CPU reads 250 %)
//   bytes       non-negative integer
//   duration_s  non-negative finite number of seconds
//   timestamp   ISO 8601 date-time with a time zone; display: UTC ISO 8601
//   enum        string or integer; when the leaf lists `options` (array of strings/integers), one of them

import type { FieldError } from '../contract/errors.js';

export const KNOWN_TYPES = ['string', 'number', 'integer', 'boolean', 'percent', 'bytes', 'duration_s', 'timestamp', 'enum'] as const;
export type KnownType = (typeof KNOWN_TYPES)[number];
const KNOWN = new Set<string>(KNOWN_TYPES);

const DEFAULT_UNIT: Partial<Record<KnownType, string>> = { percent: '%', bytes: 'B', duration_s: 's' };
const TEXT_MAX = 1024;

const ISO_RE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})$/;

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

export function isTypedLeaf(v: unknown): v is Obj & { type: string; value: unknown } {
  return isObj(v) && typeof v.type === 'string' && Object.prototype.hasOwnProperty.call(v, 'value');
}

export const isKnownType = (t: string): t is KnownType => KNOWN.has(t);

/** Why `value` does not fit `type`, or null when it does. */
function valueError(type: KnownType, leaf: Obj): string | null {
  const v = leaf.value;
  switch (type) {
    case 'string':
      return typeof v === 'string' ? null : 'must be a string';
    case 'number':
    case 'percent':
      return typeof v === 'number' && Number.isFinite(v) ? null : 'must be a number';
    case 'integer':
      return Number.isSafeInteger(v) ? null : 'must be an integer';
    case 'boolean':
      return typeof v === 'boolean' ? null : 'must be true or false';
    case 'bytes':
      return Number.isSafeInteger(v) && (v as number) >= 0 ? null : 'must be a non-negative integer (bytes)';
    case 'duration_s':
      return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? null : 'must be a non-negative number of seconds';
    case 'timestamp':
      return typeof v === 'string' && ISO_RE.test(v) && Number.isFinite(Date.parse(v)) ? null : 'must be an ISO 8601 date-time with a time zone';
    case 'enum': {
      if (typeof v !== 'string' && !Number.isSafeInteger(v)) return 'must be a string or an integer';
      const opts = leaf.options;
      if (opts === undefined) return null;
      if (!Array.isArray(opts) || !opts.every((o) => typeof o === 'string' || Number.isSafeInteger(o))) return null; // options themselves are checked below
      return opts.includes(v) ? null : `must be one of ${JSON.stringify(opts).slice(0, 200)}`;
    }
  }
}

function leafErrors(leaf: Obj & { type: string }, path: string, out: FieldError[]): void {
  if (!isKnownType(leaf.type)) return;
  const e = valueError(leaf.type, leaf);
  if (e) out.push({ path: `${path}/value`, message: `${e} (type ${leaf.type})` });
  for (const k of ['unit', 'label', 'hint'] as const) {
    const x = leaf[k];
    if (x === undefined || x === null) continue;
    if (typeof x !== 'string') out.push({ path: `${path}/${k}`, message: 'must be a string' });
    else if (x.length > TEXT_MAX) out.push({ path: `${path}/${k}`, message: `must be at most ${TEXT_MAX} characters` });
  }
  if (leaf.type === 'enum' && leaf.options !== undefined) {
    const o = leaf.options;
    if (!Array.isArray(o) || !o.every((x) => typeof x === 'string' || Number.isSafeInteger(x))) {
      out.push({ path: `${path}/options`, message: 'must be an array of strings or integers' });
    }
  }
}

const ptr = (k: string) => k.replace(/~/g, '~0').replace(/\//g, '~1');

/** Schema violations of the typed leaves in a snapshot (at most `max`), with JSON Pointers from `base`. */
export function checkSnapshot(snapshot: unknown, base = '/snapshot', max = 20): FieldError[] {
  const out: FieldError[] = [];
  const stack: [unknown, string][] = [[snapshot, base]];
  while (stack.length && out.length < max) {
    const [node, path] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (Array.isArray(node)) {
      for (let i = node.length - 1; i >= 0; i--) stack.push([node[i], `${path}/${i}`]);
      continue;
    }
    if (isTypedLeaf(node)) {
      leafErrors(node, path, out);
      continue;
    }
    const keys = Object.keys(node);
    for (let i = keys.length - 1; i >= 0; i--) stack.push([(node as Obj)[keys[i]!], `${path}/${ptr(keys[i]!)}`]);
  }
  return out.slice(0, max);
}

export interface ResolvedLeaf {
  value: unknown;
  type: KnownType;
  unit: string | null;
  label: string | null;
  hint: string | null;
  display: string;
  options?: unknown[];
}

/** The snapshot with every known-type leaf resolved; everything else as it was. Never throws. */
export function resolveSnapshot(snapshot: unknown): unknown {
  if (snapshot === null || typeof snapshot !== 'object') return snapshot;
  if (Array.isArray(snapshot)) return snapshot.map(resolveSnapshot);
  if (isTypedLeaf(snapshot)) return isKnownType(snapshot.type) ? resolveLeaf(snapshot as Obj & { type: KnownType }) : snapshot;
  const out: Obj = {};
  for (const [k, v] of Object.entries(snapshot)) out[k] = resolveSnapshot(v);
  return out;
}

const str = (v: unknown) => (typeof v === 'string' ? v : null);

function resolveLeaf(leaf: Obj & { type: KnownType }): ResolvedLeaf {
  const unit = str(leaf.unit) ?? DEFAULT_UNIT[leaf.type] ?? null;
  const r: ResolvedLeaf = { value: leaf.value, type: leaf.type, unit, label: str(leaf.label), hint: str(leaf.hint), display: display(leaf.type, leaf.value, unit) };
  if (leaf.type === 'enum' && Array.isArray(leaf.options)) r.options = leaf.options;
  // Stored before this check existed (or by hand): keep the value, say it does not fit.
  if (valueError(leaf.type, leaf)) r.display = String(JSON.stringify(leaf.value) ?? '');
  return r;
}

function num(n: number, digits = 2): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toFixed(digits)));
}

const IEC = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];

export function formatBytes(n: number): string {
  let i = 0;
  let x = n;
  while (x >= 1024 && i < IEC.length - 1) {
    x /= 1024;
    i++;
  }
  return `${i === 0 ? String(x) : num(x, 1)} ${IEC[i]}`;
}

export function formatDuration(s: number): string {
  if (s < 60) return `${num(s)} s`;
  const parts: string[] = [];
  let rest = Math.floor(s);
  for (const [unit, len] of [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]] as const) {
    const q = Math.floor(rest / len);
    rest -= q * len;
    if (q > 0) parts.push(`${q} ${unit}`);
    if (parts.length === 2) break;
  }
  return parts.join(' ');
}

function display(type: KnownType, v: unknown, unit: string | null): string {
  const withUnit = (x: string) => (unit ? `${x} ${unit}` : x);
  switch (type) {
    case 'string':
    case 'enum':
      return String(v);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'number':
    case 'integer':
      return typeof v === 'number' ? withUnit(num(v)) : String(v);
    case 'percent':
      return typeof v === 'number' ? `${num(v)} %` : String(v);
    case 'bytes':
      return typeof v === 'number' ? formatBytes(v) : String(v);
    case 'duration_s':
      return typeof v === 'number' ? formatDuration(v) : String(v);
    case 'timestamp': {
      const ms = typeof v === 'string' ? Date.parse(v) : NaN;
      return Number.isFinite(ms) ? new Date(ms).toISOString() : String(v);
    }
  }
}
