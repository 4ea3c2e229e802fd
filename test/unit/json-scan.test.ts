// gateway/json-scan.ts: depth, value count and spans of JSON text, held against what JSON.parse makes
// of the same text (a recursive reference on the parsed value), on generated documents biased to
// nesting, duplicate keys, escapes and whitespace.
import t from 'tap';
import fc from 'fast-check';
import { scanJson, isOverLimit, type JsonScan } from '../../gateway/json-scan.js';

const NO_LIMIT = { maxDepth: 1e9, maxNodes: 1e9 };

/** Depth and value count of a parsed value, the textbook way (only for the shallow documents generated here). */
function shape(v: unknown): { depth: number; nodes: number } {
  if (v === null || typeof v !== 'object') return { depth: 0, nodes: 1 };
  let depth = 0;
  let nodes = 1;
  for (const x of Object.values(v as object)) {
    const s = shape(x);
    depth = Math.max(depth, s.depth);
    nodes += s.nodes;
  }
  return { depth: depth + 1, nodes };
}

const scan = (text: string, limits = NO_LIMIT, path: string[] = []) => scanJson(Buffer.from(text), limits, path);
const ok = (r: ReturnType<typeof scan>): JsonScan => {
  if (isOverLimit(r)) throw new Error(`unexpected refusal: ${r.detail}`);
  return r;
};

// JSON text with random whitespace, escapes in keys and strings, duplicate keys.
const ws = fc.constantFrom('', ' ', '\n', '\t ', '\r\n  ');
const key = fc.oneof(fc.constantFrom('body', 'entries', 'items', 'a', 'b\\"q', 'bo\\u0064y', '', '~/'), fc.string({ maxLength: 6 }).map((s) => JSON.stringify(s).slice(1, -1)));
const scalar = fc.oneof(
  fc.constantFrom('0', '-1.5e-7', '9e20', '1E+300', 'true', 'false', 'null', '"\\\\"', '"x\\\\\\"y"', '"é\\u00e9"', '"𝄞"'),
  fc.string({ maxLength: 8 }).map((s) => JSON.stringify(s)),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
);
const { doc } = fc.letrec<{ doc: string; arr: string; obj: string }>((tie) => ({
  doc: fc.oneof({ depthSize: 'small', withCrossShrink: true }, scalar, tie('arr'), tie('obj')),
  arr: fc.array(fc.tuple(ws, tie('doc'), ws), { maxLength: 4 }).map((xs) => `[${xs.map(([a, d, b]) => a + d + b).join(',')}]`),
  // Keys distinct once escapes are resolved: a duplicate key is one value for JSON.parse, two for the scan.
  obj: fc.uniqueArray(fc.tuple(ws, key, ws, tie('doc'), ws), { maxLength: 4, selector: (x) => JSON.parse(`"${x[1]}"`) as string }).map((xs) => `{${xs.map(([a, k, b, d, c]) => `${a}"${k}"${b}:${d}${c}`).join(',')}}`),
}));

t.test('depth and value count agree with the parsed value', async (t) => {
  fc.assert(
    fc.property(doc, ws, (d, pad) => {
      const text = pad + d + pad;
      const r = ok(scan(text));
      const s = shape(JSON.parse(text));
      return r.depth === s.depth && r.nodes === s.nodes;
    }),
    { numRuns: 3000 },
  );
  t.pass('3000 documents');
});

t.test('spans hold exactly the values JSON.parse finds at the path (last duplicate wins), with their own shape', async (t) => {
  const entry = fc.tuple(doc, fc.boolean(), ws).map(([body, twice, w]) => (twice ? `{"body":[1],${w}"kind":"x","body":${body}}` : `{"kind":"x",${w}"bo\\u0064y"${w}:${w}${body}}`));
  const batch = fc.tuple(fc.array(fc.oneof(entry, scalar), { maxLength: 5 }), fc.boolean(), ws).map(
    ([es, dup, w]) => `{${dup ? `"entries":[{"body":{"stale":1}},{"body":2},{"body":3},{"body":4},{"body":5},{"body":6}],` : ''}${w}"entries"${w}:${w}[${es.join(',')}]}`,
  );
  fc.assert(
    fc.property(batch, (text) => {
      const r = ok(scan(text, NO_LIMIT, ['entries', '*', 'body']));
      const parsed = JSON.parse(text) as { entries: unknown[] };
      const buf = Buffer.from(text);
      for (let i = 0; i < parsed.entries.length; i++) {
        const e = parsed.entries[i];
        const span = r.spans.get(i);
        const want = e !== null && typeof e === 'object' && 'body' in e ? (e as { body: unknown }).body : undefined;
        if (want === undefined) {
          if (span !== undefined) return false;
          continue;
        }
        if (span === undefined) return false;
        if (JSON.stringify(JSON.parse(buf.subarray(span[0], span[1]).toString())) !== JSON.stringify(want)) return false;
        // Its shape is what a scan of its bytes alone finds (the batch route skips that scan).
        const alone = ok(scanJson(buf.subarray(span[0], span[1]), NO_LIMIT));
        const shape = r.shapes.get(i);
        if (shape === undefined || shape[0] !== alone.nodes || shape[1] !== alone.depth) return false;
      }
      if (r.shapes.size !== r.spans.size) return false;
      return [...r.spans.keys()].every((k) => k < parsed.entries.length);
    }),
    { numRuns: 2000 },
  );
  t.pass('2000 batches');
});

t.test('the limits: refused at the first value over them, with its JSON pointer', async (t) => {
  const deep = `{"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
  const r = scan(deep, { maxDepth: 64, maxNodes: 100_000 });
  t.ok(isOverLimit(r));
  if (!isOverLimit(r)) return;
  t.equal(r.limit, 'depth');
  t.equal(r.path, `/x${'/0'.repeat(63)}`, 'the 65th container, inside the 64th');
  t.match(r.detail, /nested deeper than 64 levels at \/x\/0\/0/);

  t.equal(ok(scan(`${'['.repeat(64)}${']'.repeat(64)}`, { maxDepth: 64, maxNodes: 100 })).depth, 64, '64 levels pass');
  t.ok(isOverLimit(scan(`${'['.repeat(65)}${']'.repeat(65)}`, { maxDepth: 64, maxNodes: 100 })), '65 do not');

  const wide = `{"items":[${Array.from({ length: 10 }, (_, i) => `{"v":${i}}`).join(',')}]}`;
  // 1 + 1 + 10 × 2 = 22 values.
  t.equal(ok(scan(wide, { maxDepth: 64, maxNodes: 22 })).nodes, 22);
  const over = scan(wide, { maxDepth: 64, maxNodes: 21 });
  t.ok(isOverLimit(over) && over.limit === 'nodes' && over.path === '/items/9/v', `the 22nd value is /items/9/v: ${JSON.stringify(over)}`);

  const longKey = scan(`{"${'k'.repeat(5000)}/~":[[1]]}`, { maxDepth: 2, maxNodes: 100 });
  t.ok(isOverLimit(longKey) && longKey.path === `/${'k'.repeat(64)}…/0`, `a long key is shortened: ${isOverLimit(longKey) ? longKey.path : ''}`);
  const escaped = scan(`{"a/b~c":{"x":[1]}}`, { maxDepth: 2, maxNodes: 100 });
  t.ok(isOverLimit(escaped) && escaped.path === '/a~1b~0c/x', 'keys are escaped as JSON pointers');
});

t.test('a 1 MiB body of the deepest and the widest kind is scanned without recursion', async (t) => {
  const depth = 512 * 1024;
  const deepest = Buffer.from('['.repeat(depth) + ']'.repeat(depth));
  const r = scanJson(deepest, { maxDepth: 1e9, maxNodes: 1e9 });
  t.ok(!isOverLimit(r) && r.depth === depth && r.nodes === depth, 'half a million levels');
  const widest = Buffer.from(`[${'0,'.repeat(512 * 1024 - 1)}0]`);
  const w = scanJson(widest, { maxDepth: 64, maxNodes: 1e9 });
  t.ok(!isOverLimit(w) && w.nodes === 512 * 1024 + 1);
});
