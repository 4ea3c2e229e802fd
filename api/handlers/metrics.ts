// GET /api/machines/{id}/metrics: host metrics of one machine of the caller's customer, read from
// ClickHouse. With `name`: one series, aggregated per step (avg, min, max, count); without: the
// names the machine reported in the range. Every record counts once however many copies of it
// reached the table (grouped by client_metric_id, the first copy's values).
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError } from '../../lib/contract/errors.js';
import { ownedMachine } from '../../lib/store/machines.js';
import { listMetricNames, metricSeries } from '../../lib/store/history.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const NICE_STEPS_S = [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 604_800];
export const MAX_BUCKETS = 10_000;

/** `90`, `90s`, `5m`, `1h`, `1d`, `500ms` -> milliseconds; a bare number is seconds. */
export function parseStep(step: string): number | null {
  const m = /^([0-9]{1,9})(ms|s|m|h|d)?$/.exec(step);
  if (!m) return null;
  const ms = Number(m[1]) * UNIT_MS[m[2] ?? 's']!;
  return ms >= 1 ? ms : null;
}

/** About 300 buckets over the range, rounded up to a step a person would pick. */
export function autoStep(rangeMs: number): number {
  const want = rangeMs / 300 / 1000;
  return (NICE_STEPS_S.find((s) => s >= want) ?? Math.ceil(want / 86_400) * 86_400) * 1000;
}

export function metricHandlers(d: ApiDeps): HandlersOf<'get_machine_metrics'> {
  const machine = (customerId: string, id: string) => ownedMachine(d.pool, customerId, id);

  return {
    async get_machine_metrics(req) {
      const p = principal(req);
      const { id } = req.params;
      await machine(p.customerId, id);
      const q = req.query;
      const to = q.to ? Date.parse(q.to) : Date.now();
      const from = q.from ? Date.parse(q.from) : to - 86_400_000;
      if (!(from < to)) throw new HttpError(400, '`from` must be before `to`');
      const range = { from: new Date(from).toISOString(), to: new Date(to).toISOString() };

      if (!q.name) {
        const rows = await listMetricNames(d.ch, p.customerId, id, from, to);
        return {
          machine_id: id,
          ...range,
          names: rows.map((r) => ({ name: r.name, points: Number(r.points), first: new Date(Number(r.first)).toISOString(), last: new Date(Number(r.last)).toISOString() })),
        };
      }

      const stepMs = q.step ? parseStep(q.step) : autoStep(to - from);
      if (stepMs === null) throw new HttpError(400, `invalid step ${JSON.stringify(q.step)}: a number of seconds, or a number with ms, s, m, h or d`);
      if ((to - from) / stepMs > MAX_BUCKETS) throw new HttpError(400, `step too small: at most ${MAX_BUCKETS} buckets per query`);
      const rows = await metricSeries(d.ch, p.customerId, id, from, to, q.name, stepMs);
      return {
        machine_id: id,
        name: q.name,
        ...range,
        step_s: stepMs / 1000,
        points: rows.map((r) => ({ t: new Date(Number(r.t)).toISOString(), avg: Number(r.avg), min: Number(r.min), max: Number(r.max), count: Number(r.n) })),
      };
    },
  };
}
