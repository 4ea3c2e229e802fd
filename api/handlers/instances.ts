// Instances and their diagnostics, scoped to the caller's customer.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { notFound } from '../../lib/contract/errors.js';
import { lightSql, lightReasonSql, lightSinceSql, lightCandidateSql } from '../../lib/domain/traffic-light.js';
import { ownedInstanceRows } from '../ownership.js';
import { queryRows } from '../../lib/infra/clickhouse.js';
import { chInt } from '../../lib/infra/clickhouse-sql.js';
import { instanceOrderBy, groupInstances, orderKeys, cursorColumns, cursorFits, afterSql } from '../instance-order.js';
import { lightCounts, filterSql } from '../light-counts.js';
import { HttpError } from '../../lib/contract/errors.js';
import type { apiRow } from '../../lib/infra/postgres.js';
import { mergeLatest, type InstanceTimes } from '../../lib/store/live-heartbeats.js';


function instanceSelect(extra = ''): string {
  return `SELECT i.id, i.machine_id, i.machine, i.software,
                 ${lightSql('i', '$2::float8', '$3::float8')} AS light,
                 ${lightReasonSql('i', '$2::float8', '$3::float8')} AS light_reason,
                 ${lightSinceSql('i', '$2::float8', '$3::float8')} AS light_since,
                 i.first_seen_at, i.last_seen_at, i.last_heartbeat_at, i.version, i.uptime_seconds, i.pid,
                 COALESCE(i.ip_addresses, '{}') AS ip_addresses, i.group_name, i.location, i.group_priority, i.sort_priority,
                 i.status, i.status_message, i.status_at, i.agent_ts, i.clock_skew ${extra}
            FROM instances i`;
}

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

// The instance as the api answers it: the SELECT names the fields (never null arrays); the column
// group_name (the sort and group SQL of api/instance-order.ts use it) is the field `group`.
// One pass, no spread and no delete (both showed in the api's profile at 100 rows a page): the page
// query's cursor columns (`_c0`, …) are left out.
function toInstance(r: Record<string, unknown>): ReturnType<typeof apiRow<Record<string, unknown>>> {
  const out: Record<string, unknown> = {};
  for (const k in r) {
    if (k.charCodeAt(0) === 95) continue; // `_`
    const v = r[k];
    out[k === 'group_name' ? 'group' : k] = v instanceof Date ? v.toISOString() : v;
  }
  return out;
}

export function instanceHandlers(d: ApiDeps): HandlersOf<'get_instance' | 'list_instance_diagnostics' | 'list_instances'> {
  const t = d.cfg.heartbeatTimeoutS;
  const w = d.cfg.warningWindowS;

  async function findInstance(customerId: string, id: string) {
    const r = await d.pool.query(`${instanceSelect(', i.snapshot')} WHERE i.customer_id = $1 AND i.id = $4`, [customerId, t, w, id]);
    if (!r.rows[0]) throw notFound('no such instance');
    return r.rows[0];
  }

  return {
    async list_instances(req) {
      const p = principal(req);
      const q = req.query;
      const params: unknown[] = [p.customerId, t, w];
      const param = (v: unknown) => `$${params.push(v)}`;
      const filter = { machine: q.machine, software: q.software, group: q.group, location: q.location, q: q.q };
      const where = filterSql('$1', filter, param);
      const sort = q.sort ?? 'machine,software';
      const keys = orderKeys(sort);
      const outer: string[] = [];
      if (q.light) {
        outer.push(`x.light = ${param(q.light)}`);
        const candidates = lightCandidateSql('i', q.light, '$2::float8', '$3::float8');
        if (candidates) where.push(candidates);
      }
      // Keyset paging: the rows after the previous page's last row (an index walk from there).
      if (q.after !== undefined) {
        if (q.group_by) throw new HttpError(400, 'after cannot be combined with group_by (use offset)');
        if (q.offset) throw new HttpError(400, 'after cannot be combined with offset');
        const c = decodeCursor(q.after);
        if (!c || !Array.isArray(c.v)) throw new HttpError(400, 'after: not a cursor of this list (take `next` from the previous page)');
        if (c.s !== sort) throw new HttpError(400, 'after: the cursor belongs to another sort');
        if (!cursorFits(keys, c.v)) throw new HttpError(400, 'after: not a cursor of this list (take `next` from the previous page)');
        outer.push(afterSql(keys, c.v, param));
      }
      const limit = q.limit ?? 1000;
      // One row more than the page: whether there is a next page.
      const sql = `SELECT x.*, ${cursorColumns(keys)} FROM (${instanceSelect()} WHERE ${where.join(' AND ')}) x
                    ${outer.length ? `WHERE ${outer.join(' AND ')}` : ''}
                    ${instanceOrderBy(q.sort, q.group_by)} LIMIT ${param(limit + 1)} OFFSET ${param(q.offset ?? 0)}`;
      // The total from the counts per colour (cached per customer and filter: api/light-counts.ts).
      const [counts, rows] = await Promise.all([lightCounts(d).get(p.customerId, filter), d.pool.query(sql, params)]);
      const total = q.light ? counts[q.light] : counts.green + counts.yellow + counts.red + counts.grey;
      const more = rows.rows.length > limit;
      const page = (more ? rows.rows.slice(0, limit) : rows.rows) as (InstanceTimes & Record<string, unknown>)[];
      const last = page[page.length - 1];
      const next = more && last ? encodeCursor(sort, keys.map((_, i) => (last[`_c${i}`] ?? null) as string | null)) : null;
      // Heartbeats not in Postgres yet (lib/store/live-heartbeats.ts): the times shown are exact.
      const items = (await mergeLatest(d.redis, d.cfg.redisPrefix, page)).map(toInstance);
      return q.group_by ? { items, total, next, groups: groupInstances(items, q.group_by) } : { items, total, next };
    },

    async get_instance(req) {
      const p = principal(req);
      const [row] = await mergeLatest(d.redis, d.cfg.redisPrefix, [await findInstance(p.customerId, req.params.id)]);
      return { ...toInstance(row), snapshot: row.snapshot ?? null };
    },

    async list_instance_diagnostics(req) {
      const p = principal(req);
      const q = req.query;
      const cond = await ownedInstanceRows(d.pool, p.customerId, req.params.id);
      // Suppressed (whitelisted) diagnostics are kept, but hidden unless asked for.
      if ((q.suppressed ?? 'exclude') === 'exclude') cond.push('suppressed = 0');
      else if (q.suppressed === 'only') cond.push('suppressed = 1');
      if (q.code !== undefined) cond.push(`code = ${chInt(q.code)}`);
      if (q.from) cond.push(`received_ms >= ${chInt(Date.parse(q.from))}`);
      if (q.to) cond.push(`received_ms <= ${chInt(Date.parse(q.to))}`);
      if (q.severity !== undefined) cond.push(`severity >= ${chInt(q.severity)}`);
      const rows = await queryRows<Record<string, string | number>>(
        d.ch,
        `SELECT report_id, item, received_ms, ts_ms, code, severity, message, suppressed, rule_id
           FROM diagnostics FINAL WHERE ${cond.join(' AND ')}
          ORDER BY received_ms DESC, report_id, item LIMIT ${chInt(q.limit ?? 500)}`,
      );
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
