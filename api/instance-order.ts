// Sorting and grouping of GET /api/instances (heartbeat fields of 5.7.0: group, location,
// group_priority, sort_priority). `sort` is a comma list of keys from INSTANCE_SORT_KEYS, each
// optionally prefixed with `-` for descending; missing values sort last either way. Ties are broken
// by machine, software and id, so paging is stable. With `group_by`, rows are ordered by the group
// first, so each group is one run of rows:
//   group     groups by their lowest group_priority (missing last), then by name; no group last
//   location  by name; no location last
//   machine, software   by name
import { type INSTANCE_SORT_KEYS, type INSTANCE_GROUP_KEYS } from '../lib/schemas/api.js';

type SortKey = (typeof INSTANCE_SORT_KEYS)[number];
export type GroupKey = (typeof INSTANCE_GROUP_KEYS)[number];

/** SQL expressions over the row alias `x` (api/handlers/instances.ts); only these reach the SQL. */
const EXPR: Record<SortKey, string> = {
  group: 'x.group_name',
  group_priority: 'x.group_priority',
  sort_priority: 'x.sort_priority',
  location: 'x.location',
  machine: 'x.machine',
  software: 'x.software',
  // Worst first: red, yellow, grey, green.
  light: "CASE x.light WHEN 'red' THEN 0 WHEN 'yellow' THEN 1 WHEN 'grey' THEN 2 ELSE 3 END",
  status: 'x.status',
  last_seen: 'x.last_seen_at',
  first_seen: 'x.first_seen_at',
};

const GROUP_ORDER: Record<GroupKey, string[]> = {
  group: ['min(x.group_priority) OVER (PARTITION BY x.group_name) ASC NULLS LAST', 'x.group_name ASC NULLS LAST'],
  location: ['x.location ASC NULLS LAST'],
  machine: ['x.machine ASC'],
  software: ['x.software ASC'],
};

/** `ORDER BY …` for the validated `sort` and `group_by` query parameters. */
export function instanceOrderBy(sort: string | undefined, groupBy: GroupKey | undefined): string {
  const parts: string[] = groupBy ? [...GROUP_ORDER[groupBy]] : [];
  for (const raw of (sort ?? 'machine,software').split(',')) {
    const desc = raw.startsWith('-');
    const key = (desc ? raw.slice(1) : raw) as SortKey;
    const expr = EXPR[key];
    if (!expr) continue; // the query schema allows only known keys
    parts.push(`${expr} ${desc ? 'DESC' : 'ASC'} NULLS LAST`);
  }
  parts.push('x.machine ASC', 'x.software ASC', 'x.id ASC');
  return `ORDER BY ${parts.join(', ')}`;
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
