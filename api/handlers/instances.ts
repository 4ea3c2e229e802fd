// Instances and their diagnostics, scoped to the caller's customer (queries: lib/store/instances.ts,
// lib/store/history.ts).
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { groupInstances, orderKeys, cursorFits } from '../../lib/store/instance-order.js';
import { lightCounts } from '../light-counts.js';
import { HttpError } from '../../lib/contract/errors.js';
import type { Instance } from '../../lib/contract/schemas/api.js';
import { mergeLatest } from '../../lib/store/live-heartbeats.js';
import { COLOUR_FIRST_MAX, getInstance, listInstances, ownedInstance } from '../../lib/store/instances.js';
import { listDiagnostics } from '../../lib/store/history.js';

/** A page's cursor: the order's values of its last row, and the sort they belong to. */
const encodeCursor = (sort: string, values: (string | null)[]) => Buffer.from(JSON.stringify({ s: sort, v: values })).toString('base64url');
function decodeCursor(after: string): { s: unknown; v: unknown } | null {
  try {
    const c = JSON.parse(Buffer.from(after, 'base64url').toString()) as unknown;
    return c && typeof c === 'object' && 's' in c && 'v' in c ? (c as { s: unknown; v: unknown }) : null;
  } catch {
    return null;
  }
}

// The instance as the api answers it: the fields of the `Instance` schema, in its order, from the
// columns of lib/store/instances.ts instanceSelect (the column group_name, which the sort and group
// SQL of lib/store/instance-order.ts use, is the field `group`); the page query's cursor columns
// (`_c0`, …) are left out by not being named. One object literal: its properties are named, so V8
// gives every row the same hidden class. Copied key by key in a loop (until 2026-12-04), each
// row became a dictionary-mode object after its 16th key, which JSON.stringify walks on its slow
// path: the copy and the page's serialisation took twice as long (bench/README.md [A9]).
// `satisfies` holds the literal to the schema: a field missing or not in it does not compile.
const iso = (v: unknown) => (v instanceof Date ? v.toISOString() : v);
function toInstance(r: Record<string, unknown>) {
  return {
    id: r.id,
    machine_id: r.machine_id,
    machine: r.machine,
    software: r.software,
    light: r.light,
    light_reason: r.light_reason,
    light_since: iso(r.light_since),
    first_seen_at: iso(r.first_seen_at),
    last_seen_at: iso(r.last_seen_at),
    last_heartbeat_at: iso(r.last_heartbeat_at),
    version: r.version,
    uptime_seconds: r.uptime_seconds,
    pid: r.pid,
    ip_addresses: r.ip_addresses,
    group: r.group_name,
    location: r.location,
    group_priority: r.group_priority,
    sort_priority: r.sort_priority,
    status: r.status,
    status_message: r.status_message,
    status_at: iso(r.status_at),
    agent_ts: iso(r.agent_ts),
    clock_skew: r.clock_skew,
    timeout_s: r.timeout_s,
    late_percent: r.late_percent,
    deadline: iso(r.deadline),
    late_at: iso(r.late_at),
    maintenance_until: iso(r.maintenance_until),
  } satisfies Record<keyof Instance, unknown>;
}

export function instanceHandlers(d: ApiDeps): HandlersOf<'get_instance' | 'list_instance_diagnostics' | 'list_instances'> {
  return {
    async list_instances(req) {
      const p = principal(req);
      const q = req.query;
      const filter = { machine: q.machine, software: q.software, group: q.group, location: q.location, q: q.q };
      const sort = q.sort ?? 'machine,software';
      const keys = orderKeys(sort);
      let after: (string | null)[] | undefined;
      if (q.after !== undefined) {
        if (q.group_by) throw new HttpError(400, 'after cannot be combined with group_by (use offset)');
        if (q.offset) throw new HttpError(400, 'after cannot be combined with offset');
        const c = decodeCursor(q.after);
        if (!c || !Array.isArray(c.v)) throw new HttpError(400, 'after: not a cursor of this list (take `next` from the previous page)');
        if (c.s !== sort) throw new HttpError(400, 'after: the cursor belongs to another sort');
        if (!cursorFits(keys, c.v)) throw new HttpError(400, 'after: not a cursor of this list (take `next` from the previous page)');
        after = c.v;
      }
      const limit = q.limit ?? 1000;
      // One row more than the page: whether there is a next page.
      const pageOf = { filter, light: q.light, sort: q.sort, keys, groupBy: q.group_by, after, limit: limit + 1, offset: q.offset ?? 0 };
      // The total from the counts per colour (cached per customer and filter: api/light-counts.ts);
      // a list of one colour reads them first, as they choose how its page is read.
      const countsP = lightCounts(d).get(p.customerId, filter);
      const colourFirst = q.light ? (await countsP)[q.light] <= COLOUR_FIRST_MAX : false;
      const [counts, rows] = await Promise.all([countsP, listInstances(d.pool, p.customerId, { ...pageOf, colourFirst })]);
      const total = q.light ? counts[q.light] : Object.values(counts).reduce((a, n) => a + n, 0);
      const more = rows.length > limit;
      const page = more ? rows.slice(0, limit) : rows;
      const last = page[page.length - 1];
      const next = more && last ? encodeCursor(sort, keys.map((_, i) => (last[`_c${i}`] ?? null) as string | null)) : null;
      // Heartbeats not in Postgres yet (lib/store/live-heartbeats.ts): the times shown are exact.
      const items = (await mergeLatest(d.redis, d.cfg.redisPrefix, page)).map(toInstance);
      return q.group_by ? { items, total, next, groups: groupInstances(items, q.group_by) } : { items, total, next };
    },

    async get_instance(req) {
      const p = principal(req);
      const [row] = await mergeLatest(d.redis, d.cfg.redisPrefix, [await getInstance(d.pool, p.customerId, req.params.id)]);
      return { ...toInstance(row), snapshot: row.snapshot ?? null, retired_at: iso(row.retired_at) };
    },

    async list_instance_diagnostics(req) {
      const p = principal(req);
      const q = req.query;
      await ownedInstance(d.pool, p.customerId, req.params.id);
      const rows = await listDiagnostics(d.ch, p.customerId, req.params.id, {
        suppressed: q.suppressed,
        code: q.code,
        fromMs: q.from ? Date.parse(q.from) : undefined,
        toMs: q.to ? Date.parse(q.to) : undefined,
        severity: q.severity,
        limit: q.limit ?? 500,
      });
      return {
        items: rows.map((r) => ({
          report_id: String(r.report_id),
          item: Number(r.item),
          received_at: new Date(Number(r.received_ms)).toISOString(),
          ts: new Date(Number(r.ts_ms)).toISOString(),
          code: Number(r.code),
          severity: Number(r.severity),
          message: String(r.message),
          suppressed: Number(r.suppressed) === 1,
          rule_id: r.rule_id ? String(r.rule_id) : null,
        })),
      };
    },
  };
}
