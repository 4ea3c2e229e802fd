// Free JSON trees (a status snapshot, a command's output) have no schema below their top, so the
// rules that make a value storable (lib/contract/schemas/common.ts: STORABLE_TEXT, finite numbers) and the
// depth limit are checked here, in one walk, with the JSON Pointer of each offending node.
import type { FieldError } from '../contract/errors.js';
import { STORABLE_TEXT_RE } from '../contract/schemas/common.js';

const ptr = (k: string) => k.replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * The deepest free tree the service stores (a command's output; snapshots have their own, lower
 * limit). The worker serialises trees with JSON.stringify, which runs out of stack at around 4,000
 * levels (Node 20); a report deeper than this is refused by the gateway (422) and, should one be
 * queued anyway (an older gateway, a publisher that bypassed it), dead-lettered by the worker as
 * data at fault instead of failing its apply again and again.
 */
export const TREE_MAX_DEPTH = 1000;

/**
 * Why `tree` cannot be stored: strings or keys with NUL or a lone surrogate, numbers that are not
 * finite, nesting deeper than `maxDepth` (the top object is depth 1; TREE_MAX_DEPTH unless given). At most `max` errors.
 */
export function treeErrors(tree: unknown, base: string, maxDepth = TREE_MAX_DEPTH, max = 20): FieldError[] {
  const out: FieldError[] = [];
  const stack: [unknown, string, number][] = [[tree, base, 1]];
  while (stack.length > 0 && out.length < max) {
    const [node, path, depth] = stack.pop()!;
    if (typeof node === 'string') {
      if (!STORABLE_TEXT_RE.test(node)) out.push({ path, message: 'must not contain NUL or unpaired surrogates' });
      continue;
    }
    if (typeof node === 'number') {
      if (!Number.isFinite(node)) out.push({ path, message: 'must be a finite number' });
      continue;
    }
    if (node === null || typeof node !== 'object') continue;
    if (depth > maxDepth) {
      out.push({ path, message: `nested deeper than ${maxDepth} levels` });
      continue;
    }
    if (Array.isArray(node)) {
      for (let i = node.length - 1; i >= 0; i--) stack.push([node[i], `${path}/${i}`, depth + 1]);
      continue;
    }
    const keys = Object.keys(node);
    for (let i = keys.length - 1; i >= 0; i--) {
      const k = keys[i]!;
      if (!STORABLE_TEXT_RE.test(k)) out.push({ path: `${path}/${ptr(k)}`, message: 'key must not contain NUL or unpaired surrogates' });
      stack.push([(node as Record<string, unknown>)[k], `${path}/${ptr(k)}`, depth + 1]);
    }
  }
  return out.slice(0, max);
}
