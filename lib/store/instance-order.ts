// Sorting and grouping of GET /api/instances (heartbeat fields of 5.7.0: group, location,
// group_priority, sort_priority). `sort` is a comma list of keys from INSTANCE_SORT_KEYS, each
// optionally prefixed with `-` for descending; missing values sort last either way. Ties are broken
// by machine, software and id, so paging is stable. With `group_by`, rows are ordered by the group
// first, so each group is one run of rows:
//   group     groups by their lowest group_priority (missing last), then by name; no group last
//   location  by name; no location last
//   machine, software   by name
import { type INSTANCE_SORT_KEYS, type INSTANCE_GROUP_KEYS } from '../contract/schemas/api.js';

type SortKey = (typeof INSTANCE_SORT_KEYS)[number];
export type GroupKey = (typeof INSTANCE_GROUP_KEYS)[number];

/** What a sort key orders by: an SQL expression over the row alias `x` (lib/store/instances.ts),
 * its type (for the cursor's parameters) and whether it can be null. Only these reach the SQL. */
interface KeyExpr {
  sql: string;
  type: 'text' | 'bigint' | 'int' | 'timestamptz' | 'uuid';
  nullable: boolean;
}

const EXPR: Record<SortKey, KeyExpr> = {
  group: { sql: 'x.group_name', type: 'text', nullable: true },
  group_priority: { sql: 'x.group_priority', type: 'bigint', nullable: true },
  sort_priority: { sql: 'x.sort_priority', type: 'bigint', nullable: true },
  location: { sql: 'x.location', type: 'text', nullable: true },
  machine: { sql: 'x.machine', type: 'text', nullable: false },
  software: { sql: 'x.software', type: 'text', nullable: false },
  // Worst first: red, yellow, grey, green.
  light: { sql: "CASE x.light WHEN 'red' THEN 0 WHEN 'late' THEN 1 WHEN 'yellow' THEN 2 WHEN 'maintenance' THEN 3 WHEN 'grey' THEN 4 ELSE 5 END", type: 'int', nullable: false },
  status: { sql: 'x.status', type: 'text', nullable: true },
  last_seen: { sql: 'x.last_seen_at', type: 'timestamptz', nullable: false },
  first_seen: { sql: 'x.first_seen_at', type: 'timestamptz', nullable: false },
};
const TIE: KeyExpr[] = [EXPR.machine, EXPR.software, { sql: 'x.id', type: 'uuid', nullable: false }];

const GROUP_ORDER: Record<GroupKey, string[]> = {
  group: ['min(x.group_priority) OVER (PARTITION BY x.group_name) ASC NULLS LAST', 'x.group_name ASC NULLS LAST'],
  location: ['x.location ASC NULLS LAST'],
  machine: ['x.machine ASC'],
  software: ['x.software ASC'],
};

/** One key of the order: its expression and direction (missing values last either way). */
export interface OrderKey extends KeyExpr {
  desc: boolean;
}

/** The keys of the validated `sort` (default machine,software), then the tie-breakers machine,
 * software, id; a key already in the list is not repeated (it could not break a tie). */
export function orderKeys(sort: string | undefined): OrderKey[] {
  const keys: OrderKey[] = [];
  const add = (k: KeyExpr, desc: boolean) => {
    if (!keys.some((x) => x.sql === k.sql)) keys.push({ ...k, desc });
  };
  for (const raw of (sort ?? 'machine,software').split(',')) {
    const desc = raw.startsWith('-');
    const expr = EXPR[(desc ? raw.slice(1) : raw) as SortKey];
    if (expr) add(expr, desc); // the query schema allows only known keys
  }
  for (const k of TIE) add(k, false);
  return keys;
}

/** `ORDER BY …` for the validated `sort` and `group_by` query parameters. */
export function instanceOrderBy(sort: string | undefined, groupBy: GroupKey | undefined): string {
  const parts: string[] = groupBy ? [...GROUP_ORDER[groupBy]] : [];
  // NULLS LAST only where a value can be missing: for a column never null it changes nothing, and
  // a descending walk of an ascending index yields DESC NULLS FIRST (which the planner must see).
  for (const k of orderKeys(sort)) parts.push(`${k.sql} ${k.desc ? 'DESC' : 'ASC'}${k.nullable ? ' NULLS LAST' : ''}`);
  return `ORDER BY ${parts.join(', ')}`;
}

/** SELECT list of the order's values as text (timestamps as microseconds since the epoch, exact):
 * what the cursor of the page's last row holds. */
export function cursorColumns(keys: OrderKey[]): string {
  return keys.map((k, i) => `${k.type === 'timestamptz' ? `(extract(epoch from ${k.sql}) * 1000000)::bigint::text` : `(${k.sql})::text`} AS _c${i}`).join(', ');
}

const VALUE: Record<KeyExpr['type'], RegExp> = {
  text: /^[\s\S]*$/,
  bigint: /^-?[0-9]{1,19}$/,
  int: /^-?[0-9]{1,9}$/,
  timestamptz: /^-?[0-9]{1,19}$/,
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
};

/** Whether these cursor values fit the keys (a cursor is the client's: checked, never trusted). */
export function cursorFits(keys: OrderKey[], values: unknown[]): values is (string | null)[] {
  return values.length === keys.length && values.every((v, i) => (v === null ? keys[i]!.nullable : typeof v === 'string' && v.length <= 1000 && VALUE[keys[i]!.type].test(v)));
}

/**
 * SQL true for the rows after the row whose order values are `values` (keyset paging): the rows
 * whose first differing key comes later in the order, missing values last. `param` adds a value and
 * returns its placeholder. The leading keys of one direction that are never null are also bounded
 * by a row comparison, so an index in that order starts where the page starts.
 */
export function afterSql(keys: OrderKey[], values: (string | null)[], param: (v: unknown) => string): string {
  const val = (i: number) => {
    const k = keys[i]!;
    const p = param(values[i]);
    return k.type === 'timestamptz' ? `('epoch'::timestamptz + ${p}::bigint * interval '1 microsecond')` : `${p}::${k.type}`;
  };
  const vals = keys.map((_, i) => (values[i] === null ? null : val(i)));
  const alts: string[] = [];
  for (let j = 0; j < keys.length; j++) {
    const k = keys[j]!;
    if (vals[j] === null) continue; // nothing comes after a missing value but more missing values: the next key decides
    const eq = keys.slice(0, j).map((x, i) => (vals[i] === null ? `${x.sql} IS NULL` : `${x.sql} = ${vals[i]}`));
    const later = `${k.sql} ${k.desc ? '<' : '>'} ${vals[j]}${k.nullable ? ` OR ${k.sql} IS NULL` : ''}`;
    alts.push(`(${[...eq, `(${later})`].join(' AND ')})`);
  }
  // The ties of a key whose value is missing: only the keys after it decide (handled by the loop,
  // where the missing key contributes `IS NULL` to the equal prefix).
  let where = alts.length ? `(${alts.join(' OR ')})` : 'false';
  let n = 0;
  while (n < keys.length && !keys[n]!.nullable && keys[n]!.desc === keys[0]!.desc && vals[n] !== null) n++;
  if (n > 0) {
    const cols = keys.slice(0, n).map((k) => k.sql);
    where += ` AND (${cols.join(', ')}) ${keys[0]!.desc ? '<=' : '>='} (${vals.slice(0, n).join(', ')})`;
  }
  return where;
}

const GROUP_FIELD: Record<GroupKey, 'group' | 'location' | 'machine' | 'software'> = { group: 'group', location: 'location', machine: 'machine', software: 'software' };

/** The page split into runs of equal group key (the order already puts each group together). */
export function groupInstances<T extends Record<string, unknown>>(items: T[], groupBy: GroupKey): { key: string | null; count: number; items: T[] }[] {
  const field = GROUP_FIELD[groupBy];
  const out: { key: string | null; count: number; items: T[] }[] = [];
  for (const it of items) {
    const key = (it[field] as string | null | undefined) ?? null;
    const last = out[out.length - 1];
    if (last && last.key === key) {
      last.items.push(it);
      last.count++;
    } else out.push({ key, count: 1, items: [it] });
  }
  return out;
}
