// Host-metric reports -> ClickHouse `host_metrics`: one row per record and value name. Every copy
// of a record (a redelivered batch, the same record sent again, by two gateways at once) yields
// the same sorting key (customer, machine, name, client_metric_id) and collapses; `ver` keeps the
// first copy received (see lib/store/schema.ts, ClickHouse 0004-metrics).
import type { Report } from '../lib/contract/messages.js';
import { chTime, insertRows, type ClickHouseClient } from '../lib/infra/clickhouse.js';
import type { MetricsBatch } from '../lib/contract/schemas/metrics.js';
import { instanceKey, parseTs } from './reports.js';

/** `ver` = VER_BASE - receive time: the earliest copy has the highest version and wins. */
export const VER_BASE = Date.parse('2100-01-01T00:00:00Z');

export function metricRows(reports: Report[], machineIdOf: (r: Report) => string | undefined): object[] {
  const rows: object[] = [];
  for (const r of reports) {
    if (r.kind !== 'metrics') continue;
    const machineId = machineIdOf(r);
    if (!machineId) continue;
    for (const rec of (r.body as MetricsBatch).items) {
      const tsMs = parseTs(rec.ts) ?? r.receivedAt;
      const labels = Object.keys(rec.labels ?? {}).sort();
      for (const [name, value] of Object.entries(rec.values)) {
        rows.push({
          ts: chTime(tsMs),
          ts_ms: tsMs,
          received_ms: r.receivedAt,
          customer_id: r.customerId,
          customer: r.customer,
          machine_id: machineId,
          machine: r.machine,
          client_metric_id: rec.client_metric_id,
          name,
          value,
          label_keys: labels,
          label_values: labels.map((k) => rec.labels![k]!),
          report_id: r.id,
          ver: VER_BASE - r.receivedAt,
        });
      }
    }
  }
  return rows;
}

export async function writeMetrics(ch: ClickHouseClient, reports: Report[], ids: Map<string, { machineId: string }>): Promise<void> {
  await insertRows(ch, 'host_metrics', metricRows(reports, (r) => ids.get(instanceKey(r))?.machineId));
}
