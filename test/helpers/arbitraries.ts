// fast-check arbitraries generated from the TypeBox schemas (their JSON Schema), biased to the
// boundaries where storage and validation part ways: the extremes of every integer range and one
// past them, numbers JSON can write but a double cannot hold (1e309) or a bigint cannot (1e19),
// the longest strings, unicode (astral, combining, RTL), what Postgres refuses (NUL, lone
// surrogates), timestamps of broken agent clocks (1970, year 0000, 9999), the fewest and the most
// items, deep and wide free trees. Invalid values are generated on purpose: the property under
// test is "every 200 is stored", and a 422 is a fine answer to an invalid value.
//
// Values are trees of plain JSON plus `Raw` number tokens (written as they are, since
// JSON.stringify cannot write 1e309 or 10000000000000000000); `toJson` serialises them.
import fc from 'fast-check';

/** A number token written verbatim into the JSON text. */
export class Raw {
  constructor(readonly text: string) {}
}

export function toJson(v: unknown): string {
  if (v instanceof Raw) return v.text;
  if (Array.isArray(v)) return `[${v.map(toJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.entries(v as Record<string, unknown>)
      .map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

type Schema = Record<string, unknown> & {
  type?: string;
  anyOf?: Schema[];
  const?: unknown;
  properties?: Record<string, Schema>;
  required?: string[];
  patternProperties?: Record<string, Schema>;
  items?: Schema;
  minItems?: number;
  maxItems?: number;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  format?: string;
  minProperties?: number;
  maxProperties?: number;
  propertyNames?: Schema;
};

export interface Bias {
  /** Share of arrays generated at their longest (maxItems). */
  longArrays: number;
  /** Cap on array lengths otherwise (keeps bodies under the body limit most of the time). */
  arrayCap: number;
}

const DEFAULT_BIAS: Bias = { longArrays: 0.03, arrayCap: 12 };

// Characters at the edges of what text is: astral (surrogate pairs), combining, right-to-left,
// zero-width, BOM, the last BMP code point, escapes JSON and the TSV row format must handle.
const EDGY = ['\u{1F600}', 'e\u0301', '\u05D0\u05D1', '\u200B', '\uFEFF', '\uFFFF', '\t', '\n', '\\', '"', "'", '\u00e9', '\u4e2d'];
const REFUSED = ['\u0000', '\ud800', '\udfff'];

/** `hostile`: values outside the schema too (refused characters, one past the limits, non-finite numbers). */
interface Mode {
  hostile: boolean;
}

const edgyChar = fc.constantFrom(...EDGY);
const cp = (s: string) => Array.from(s).length;
const cutTo = (s: string, max: number) => (cp(s) > max ? Array.from(s).slice(0, max).join('') : s);

function text(min: number, max: number, m: Mode): fc.Arbitrary<string> {
  const ch = m.hostile
    ? fc.oneof({ weight: 12, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }) }, { weight: 4, arbitrary: edgyChar }, { weight: 1, arbitrary: fc.constantFrom(...REFUSED) })
    : fc.oneof({ weight: 3, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }) }, { weight: 1, arbitrary: edgyChar });
  const cap = Math.min(max, 48);
  const arbs: fc.WeightedArbitrary<string>[] = [
    { weight: 8, arbitrary: fc.array(ch, { minLength: min, maxLength: Math.max(min, cap) }).map((a) => cutTo(a.join(''), max)).filter((x) => cp(x) >= min) },
    // The longest string the schema allows (maxLength counts code points: 😀 × max is 2 × max UTF-16 units).
    { weight: 1, arbitrary: fc.constantFrom('x', '\u00e9', '\u{1F600}').map((c) => c.repeat(max)) },
  ];
  if (m.hostile) arbs.push({ weight: 1, arbitrary: fc.constant('x'.repeat(max + 1)) });
  return fc.oneof(...arbs);
}

const YEARS = [0, 1, 1969, 1970, 1999, 2000, 2026, 2099, 2100, 2106, 9999];
function dateTime(m: Mode): fc.Arbitrary<string> {
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  const fromParts = fc
    .record({ y: fc.oneof(fc.constantFrom(...YEARS), fc.integer({ min: 0, max: 9999 })), mo: fc.integer({ min: 1, max: 12 }), d: fc.integer({ min: 1, max: 28 }), h: fc.integer({ min: 0, max: 23 }), mi: fc.integer({ min: 0, max: 59 }), s: fc.integer({ min: 0, max: 59 }) })
    .map(({ y, mo, d, h, mi, s }) => `${pad(y, 4)}-${pad(mo)}-${pad(d)}T${pad(h)}:${pad(mi)}:${pad(s)}Z`);
  const near = fc.integer({ min: -40 * 86_400_000, max: 2 * 86_400_000 }).map((off) => new Date(Date.now() + off).toISOString());
  const odd = ['1969-12-31T23:59:59Z', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z', '2016-12-31T23:59:60Z', '2026-11-23T10:00:00+14:00'];
  return fc.oneof({ weight: 4, arbitrary: near }, { weight: 3, arbitrary: fromParts }, { weight: 1, arbitrary: fc.constantFrom(...odd, ...(m.hostile ? ['not a time', '2026-13-01T00:00:00Z'] : [])) });
}

function integer(s: Schema, m: Mode): fc.Arbitrary<number | Raw> {
  const min = s.minimum ?? -Number.MAX_SAFE_INTEGER;
  const max = s.maximum ?? Number.MAX_SAFE_INTEGER;
  const edges = [min, max, 0, 1, -1, min + 1, max - 1, ...(m.hostile ? [min - 1, max + 1] : [])].filter((x) => Number.isSafeInteger(x) && (m.hostile || (x >= min && x <= max)));
  const raws = m.hostile
    ? [new Raw('1e308'), new Raw('1e309'), new Raw('-1e309'), new Raw('10000000000000000000'), new Raw('9007199254740993'), new Raw('1.5')]
    : [new Raw('-0'), new Raw('1.0'), new Raw('2E1')].filter((r) => Number(r.text) >= min && Number(r.text) <= max);
  return fc.oneof(
    { weight: 5, arbitrary: fc.integer({ min: Math.max(min, -1e6), max: Math.min(max, 1e6) }) },
    { weight: 3, arbitrary: fc.constantFrom(...edges) },
    ...(raws.length ? [{ weight: 1, arbitrary: fc.constantFrom(...raws) }] : []),
  );
}

function number(m: Mode): fc.Arbitrary<number | Raw> {
  return fc.oneof(
    { weight: 5, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) },
    { weight: 1, arbitrary: fc.constantFrom(0, -0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, Number.MAX_SAFE_INTEGER + 2) },
    { weight: 1, arbitrary: fc.constantFrom(new Raw('1e-400'), ...(m.hostile ? [new Raw('1e309'), new Raw('-1e309')] : [new Raw('1E2')])) },
  );
}

/** A typed snapshot leaf (5.10.0): fitting its type unless hostile; an unknown type takes anything. */
function typedLeaf(m: Mode): fc.Arbitrary<Record<string, unknown>> {
  const fitting = fc.oneof(
    fc.record({ type: fc.constant('number'), value: fc.double({ noNaN: true, noDefaultInfinity: true }) }),
    fc.record({ type: fc.constant('integer'), value: fc.maxSafeInteger() }),
    fc.record({ type: fc.constant('bytes'), value: fc.maxSafeNat(), unit: fc.constant('B') }),
    fc.record({ type: fc.constant('percent'), value: fc.double({ min: -1e6, max: 1e6, noNaN: true }) }),
    fc.record({ type: fc.constant('duration_s'), value: fc.double({ min: 0, max: 1e9, noNaN: true }) }),
    fc.record({ type: fc.constant('boolean'), value: fc.boolean(), label: text(0, 32, m) }),
    fc.record({ type: fc.constant('timestamp'), value: dateTime({ hostile: false }) }),
    fc.record({ type: fc.constant('enum'), value: fc.constantFrom('a', 'b'), options: fc.constant(['a', 'b']) }),
    fc.record({ type: fc.constant('future-type'), value: fc.jsonValue({ maxDepth: 2 }), hint: text(0, 32, m) }),
  );
  if (!m.hostile) return fitting;
  return fc.oneof(fitting, fc.record({ type: fc.constantFrom('integer', 'bytes', 'timestamp'), value: fc.oneof(text(0, 8, m), number(m)) }));
}

/** Free JSON trees (snapshot values): deep, wide, with typed leaves and every kind of edge. */
function freeTree(depth: number, m: Mode): fc.Arbitrary<unknown> {
  const leaf = fc.oneof(
    { weight: 3, arbitrary: text(0, 64, m) },
    { weight: 2, arbitrary: number(m) },
    { weight: 1, arbitrary: fc.boolean() },
    { weight: 1, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: typedLeaf(m) },
  );
  const { tree } = fc.letrec<{ tree: unknown }>((tie) => ({
    tree: fc.oneof({ depthSize: 'small', maxDepth: depth }, leaf, fc.array(tie('tree'), { maxLength: 4 }), fc.dictionary(text(0, 12, m), tie('tree'), { maxKeys: 4 })),
  }));
  return tree;
}

/** A tree nested exactly `n` levels (the snapshot depth limit is 32). */
export const nested = (n: number): Record<string, unknown> => {
  let v: Record<string, unknown> = { leaf: 1 };
  for (let i = 1; i < n; i++) v = { d: v };
  return v;
};

export function arbitraryOf(schema: unknown, bias: Partial<Bias & Mode> = {}): fc.Arbitrary<unknown> {
  const b = { ...DEFAULT_BIAS, ...bias };
  const m: Mode = { hostile: bias.hostile ?? false };
  const go = (s: Schema): fc.Arbitrary<unknown> => {
    if (s.anyOf) return fc.oneof(...s.anyOf.map(go));
    if ('const' in s) return fc.constant(s.const);
    switch (s.type) {
      case 'object': {
        if (s.patternProperties) {
          const value = Object.values(s.patternProperties)[0]!;
          const key = s.propertyNames ? go({ type: 'string', ...s.propertyNames }) : text(0, 16, m);
          // Value of an untyped record (a snapshot): a free tree.
          const val = Object.keys(value).length === 0 ? freeTree(6, m) : go(value);
          return fc.dictionary(key as fc.Arbitrary<string>, val, { minKeys: s.minProperties ?? 0, maxKeys: Math.min(s.maxProperties ?? 8, 8) });
        }
        const props = s.properties ?? {};
        const model: Record<string, fc.Arbitrary<unknown>> = {};
        for (const [k, v] of Object.entries(props)) model[k] = go(v);
        // Unknown top-level fields are ignored, never an error: sometimes add one.
        model.x_unknown_field = text(0, 8, m);
        return fc.record(model, { requiredKeys: s.required ?? [] });
      }
      case 'array': {
        const min = s.minItems ?? 0;
        const max = s.maxItems ?? 16;
        const item = go(s.items ?? {});
        const arbs: fc.WeightedArbitrary<unknown[]>[] = [
          { weight: Math.round(100 * (1 - b.longArrays)), arbitrary: fc.array(item, { minLength: min, maxLength: Math.max(min, Math.min(max, b.arrayCap)) }) },
          { weight: Math.max(1, Math.round(100 * b.longArrays)), arbitrary: fc.array(item, { minLength: max, maxLength: max }) },
        ];
        if (m.hostile) arbs.push({ weight: 2, arbitrary: fc.array(item, { minLength: 0, maxLength: 0 }) });
        return fc.oneof(...arbs);
      }
      case 'integer':
        return integer(s, m);
      case 'number':
        return number(m);
      case 'string':
        if (s.format === 'date-time') return dateTime(m);
        if (s.format === 'uuid') return fc.uuid();
        if (s.pattern === '^-?[0-9]{1,15}$') {
          return fc.oneof(fc.bigInt({ min: -(10n ** 15n) + 1n, max: 10n ** 15n - 1n }).map(String), fc.constantFrom('0', '-0', '999999999999999', ...(m.hostile ? ['1000000000000000', '1e3', ''] : [])));
        }
        if (s.pattern && !s.pattern.startsWith('^[^\\u0000')) return fc.constant('application/octet-stream');
        return text(s.minLength ?? 0, s.maxLength ?? 256, m);
      case 'boolean':
        return fc.boolean();
      default:
        return freeTree(4, m);
    }
  };
  return go(schema as Schema);
}
