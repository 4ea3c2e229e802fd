// Instances and their diagnostics, scoped to the caller's customer.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { notFound } from '../../lib/errors.js';
import { lightSql, lightReasonSql, lightSinceSql } from '../../lib/traffic-light.js';
import { ownedInstanceRows } from '../../lib/ownership.js';
import { queryRows } from '../../lib/db/clickhouse.js';
import { chInt } from '../../lib/db/clickhouse-sql.js';
import { instanceOrderBy, groupInstances } from '../instance-order.js';
import { apiRow } from '../../lib/db/postgres.js';
import { mergeLatest, type InstanceTimes } from '../../lib/live-heartbeats.js';


function instanceSelect(extra = ''): string {
  return `SELECT i.id, i.machine_id, m.slug AS machine, i.software,
                 ${lightSql('i', '$2::float8', '$3::float8')} AS light,
                 ${lightReasonSql('i', '$2::float8', '$3::float8')} AS light_reason,
                 ${lightSinceSql('i', '$2::float8', '$3::float8')} AS light_since,
                 i.first_seen_at, i.last_seen_at, i.last_heartbeat_at, i.version, i.uptime_seconds, i.pid,
                 COALESCE(i.ip_addresses, '{}') AS ip_addresses, i.group_name, i.location, i.group_priority, i.sort_priority,
                 i.status, i.status_message, i.status_at, i.agent_ts, i.clock_skew ${extra}
            FROM instances i JOIN machines m ON m.id = i.machine_id`;
}

// The instance as the api answers it: the SELECT names the fields (never null arrays); the column
// group_name (the sort and group SQL of api/instance-order.ts use it) is the field `group`.
const toInstance = ({ group_name, ...r }: Record<string, unknown>) => apiRow({ ...r, group: group_name });

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
      const where = ['i.customer_id = $1'];
      const params: unknown[] = [p.customerId, t, w];
      if (q.machine) where.push(`m.slug = $${params.push(q.machine)}`);
      if (q.software) where.push(`i.software = $${params.push(q.software)}`);
      if (q.group) where.push(`i.group_name = $${params.push(q.group)}`);
      if (q.location) where.push(`i.location = $${params.push(q.location)}`);
      const base = `SELECT * FROM (${instanceSelect()} WHERE ${where.join(' AND ')}) x ${q.light ? `WHERE x.light = $${params.push(q.light)}` : ''}`;
      const total = await d.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${base}) y`, params);
      const rows = await d.pool.query(`${base} ${instanceOrderBy(q.sort, q.group_by)} LIMIT $${params.push(q.limit ?? 1000)} OFFSET $${params.push(q.offset ?? 0)}`, params);
      // Heartbeats not in Postgres yet (lib/live-heartbeats.ts): the times shown are exact.
      const items = (await mergeLatest(d.redis, d.cfg.redisPrefix, rows.rows as (InstanceTimes & Record<string, unknown>)[])).map(toInstance);
      return q.group_by ? { items, total: total.rows[0]!.n, groups: groupInstances(items, q.group_by) } : { items, total: total.rows[0]!.n };
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
