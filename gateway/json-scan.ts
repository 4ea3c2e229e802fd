// The cost of a JSON body, measured before anything walks it: how deep it nests and how many values
// it holds. `JSON.parse` accepts any depth, but every recursive walk after it (`JSON.stringify`,
// schema checks, the worker's writes) throws near 5,000 levels, and a body of a million tiny values
// costs every step after the parse. So the gateway refuses a body over JSON_MAX_DEPTH or
// JSON_MAX_NODES (422 with the JSON pointer of the first value over the limit) before any other
// check looks inside it (docs/api.md "Limits").
//
// The scan is a loop over the bytes with an explicit stack: any depth costs it no call stack. It
// reads text that `JSON.parse` has already accepted, so it does not validate.
//
// It can also return the byte spans of the values at one path (`['entries', '*', 'body']`), so that
// the gateway queues the bytes the client sent instead of re-serialising what it parsed
// (re-serialising can throw, and it grows numbers: `9e20` becomes 21 digits). Duplicate keys are
// resolved as `JSON.parse` resolves them: the last one wins.

export interface JsonLimits {
  maxDepth: number;
  maxNodes: number;
}

export interface JsonOverLimit {
  limit: 'depth' | 'nodes';
  /** JSON pointer of the first value over the limit (keys over 64 characters are shortened). */
  path: string;
  detail: string;
}

export interface JsonScan {
  /** Values in the document (objects and arrays count one each, keys none; a value under a duplicate key counts too). */
  nodes: number;
  /** Deepest nesting of objects and arrays (`{}` is 1, a bare scalar 0). */
  depth: number;
  /** With a span path: the byte range [start, end) of each matching value, by the index at `*` (0 without one). */
  spans: Map<number, [number, number]>;
  /**
   * With a span path: each span's own value count and depth, as a scan of its bytes alone would
   * find them (`[nodes, depth]`, same keys as `spans`). The batch route holds each entry's body to
   * a single request's limits from these, without scanning its bytes a second time.
   */
  shapes: Map<number, [number, number]>;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OBJ = 0;
const ARR = 1;

/**
 * Scans `buf` (JSON text that `JSON.parse` accepted). Returns its shape, or the first place where
 * it goes over `limits`. `spanPath`: segments from the root, `*` for any array index (at most one).
 */
export function scanJson(buf: Uint8Array, limits: JsonLimits, spanPath: readonly string[] = []): JsonScan | JsonOverLimit {
  const n = buf.length;
  // One frame per open container: its kind, the current element index (arrays) or key span (objects).
  const kind: number[] = [];
  const index: number[] = [];
  const keyStart: number[] = [];
  const keyEnd: number[] = [];
  // matched[d]: the frames 0..d-1 all match spanPath's first d segments.
  const matched: boolean[] = [true];
  const star = spanPath.indexOf('*');
  const spans = new Map<number, [number, number]>();
  const shapes = new Map<number, [number, number]>();
  let spanKey = 0;
  let spanStart = -1;
  let spanDepth = -1;
  // Of the span being read: the value count before it, and the deepest level reached inside it.
  let spanNodes0 = 0;
  let spanMax = 0;

  let depth = 0;
  let maxDepth = 0;
  let nodes = 0;
  let expectKey = false;
  let i = 0;

  const segBytes = spanPath.map((s) => enc.encode(s));
  const segmentMatches = (d: number): boolean => {
    const seg = spanPath[d];
    if (seg === undefined) return false;
    if (kind[d] === ARR) return seg === '*';
    return seg !== '*' && keyIs(buf, keyStart[d]!, keyEnd[d]!, seg, segBytes[d]!);
  };
  /** `frames`: the open containers whose current key or index leads to the value over the limit. */
  const over = (limit: 'depth' | 'nodes', frames: number): JsonOverLimit => {
    const path = pointer(buf, frames, kind, index, keyStart, keyEnd);
    const detail =
      limit === 'depth'
        ? `JSON nested deeper than ${limits.maxDepth} levels at ${path || '/'}`
        : `JSON with more than ${limits.maxNodes} values (the limit is reached at ${path || '/'})`;
    return { limit, path: path || '/', detail };
  };

  while (i < n) {
    const c = buf[i]!;
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
      i++;
      continue;
    }
    if (c === 0x2c) {
      // ,
      if (kind[depth - 1] === ARR) {
        index[depth - 1]!++;
        matched[depth] = matched[depth - 1]! && segmentMatches(depth - 1);
      } else expectKey = true;
      i++;
      continue;
    }
    if (c === 0x3a) {
      // : after a key
      matched[depth] = matched[depth - 1]! && segmentMatches(depth - 1);
      i++;
      continue;
    }
    if (c === 0x7d || c === 0x5d) {
      // } ]
      depth--;
      i++;
      expectKey = false;
      if (spanDepth === depth) {
        spans.set(spanKey, [spanStart, i]);
        shapes.set(spanKey, [nodes - spanNodes0, spanMax - depth]);
        spanDepth = -1;
      }
      continue;
    }
    if (expectKey) {
      // A key: its span (inside the quotes) is kept for paths.
      const end = stringEnd(buf, i);
      keyStart[depth - 1] = i + 1;
      keyEnd[depth - 1] = end - 1;
      expectKey = false;
      i = end;
      continue;
    }

    // A value starts here.
    if (++nodes > limits.maxNodes) return over('nodes', depth);
    const recording = spanPath.length > 0 && depth === spanPath.length && matched[depth] === true;
    if (recording) {
      spanKey = star === -1 ? 0 : index[star]!;
      spanStart = i;
      spanNodes0 = nodes - 1;
      spanMax = depth;
    } else if (star !== -1 && depth === star && matched[depth] === true) {
      // The array the spans index into starts again (a duplicate key): JSON.parse keeps the last.
      spans.clear();
      shapes.clear();
    }
    if (c === 0x7b || c === 0x5b) {
      // { [
      if (depth + 1 > limits.maxDepth) return over('depth', depth);
      kind[depth] = c === 0x7b ? OBJ : ARR;
      index[depth] = 0;
      keyStart[depth] = keyEnd[depth] = -1;
      if (recording) spanDepth = depth;
      depth++;
      if (depth > maxDepth) maxDepth = depth;
      if (spanDepth !== -1 && depth > spanMax) spanMax = depth;
      i++;
      // An empty container's `}` or `]` is met before the key it does not have.
      if (c === 0x7b) expectKey = true;
      else matched[depth] = matched[depth - 1]! && segmentMatches(depth - 1);
      continue;
    }
    let end: number;
    if (c === QUOTE) end = stringEnd(buf, i);
    else {
      end = i + 1;
      while (end < n) {
        const d = buf[end]!;
        if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break;
        end++;
      }
    }
    if (recording) {
      spans.set(spanKey, [spanStart, end]);
      shapes.set(spanKey, [1, 0]);
    }
    i = end;
  }
  return { nodes, depth: maxDepth, spans, shapes };
}

/** Whether a scan result is a refusal. */
export const isOverLimit = (r: JsonScan | JsonOverLimit): r is JsonOverLimit => 'limit' in r;

/** The index just past the string that opens at `i` (a quote). */
function stringEnd(buf: Uint8Array, i: number): number {
  let j = i + 1;
  for (;;) {
    const q = buf.indexOf(QUOTE, j);
    if (q === -1) return buf.length;
    // Escaped when an odd number of backslashes stands right before it.
    let b = q - 1;
    while (b > i && buf[b] === BACKSLASH) b--;
    if ((q - 1 - b) % 2 === 0) return q + 1;
    j = q + 1;
  }
}

const dec = new TextDecoder();
const enc = new TextEncoder();

/** Whether the key at [start, end) is `seg` (bytes compared when the key has no escapes). */
function keyIs(buf: Uint8Array, start: number, end: number, seg: string, segBytes: Uint8Array): boolean {
  if (end - start === segBytes.length) {
    let k = 0;
    while (k < segBytes.length && buf[start + k] === segBytes[k]) k++;
    if (k === segBytes.length) return true;
  }
  // Not the same bytes: still the same key when escapes spell it.
  for (let k = start; k < end; k++) if (buf[k] === BACKSLASH) return keyText(buf, start, end) === seg;
  return false;
}

/** A key's text (escapes resolved). */
function keyText(buf: Uint8Array, start: number, end: number): string {
  if (start < 0) return '';
  const raw = buf.subarray(start, end);
  if (raw.indexOf(BACKSLASH) === -1) return dec.decode(raw);
  return JSON.parse(`"${dec.decode(raw)}"`) as string;
}

const KEY_SHOWN = 64;
const POINTER_MAX = 1000;

/** The JSON pointer of the value that the current keys and indices of the first `frames` containers lead to. */
function pointer(buf: Uint8Array, frames: number, kind: number[], index: number[], keyStart: number[], keyEnd: number[]): string {
  let out = '';
  for (let d = 0; d < frames; d++) {
    let seg: string;
    if (kind[d] === ARR) seg = String(index[d]);
    else {
      const k = keyText(buf, keyStart[d]!, keyEnd[d]!);
      seg = (k.length > KEY_SHOWN ? `${k.slice(0, KEY_SHOWN)}…` : k).replace(/~/g, '~0').replace(/\//g, '~1');
    }
    out += `/${seg}`;
    if (out.length > POINTER_MAX) return `${out.slice(0, POINTER_MAX)}…`;
  }
  return out;
}
