// Host metrics, the pure pieces (api/handlers/metrics.ts, workers/metrics.ts): steps and rows.
import t from 'tap';
import { parseStep, autoStep } from '../../api/handlers/metrics.js';
import { metricRows, VER_BASE } from '../../workers/metrics.js';
import { metricKey } from '../../gateway/metrics.js';
import type { Report } from '../../lib/contract/messages.js';

t.test('metric steps', async (t) => {
  t.equal(parseStep('60'), 60_000);
  t.equal(parseStep('60s'), 60_000);
  t.equal(parseStep('5m'), 300_000);
  t.equal(parseStep('2h'), 7_200_000);
  t.equal(parseStep('1d'), 86_400_000);
  t.equal(parseStep('250ms'), 250);
  t.equal(parseStep('0'), null);
  t.equal(parseStep('1w'), null);
  t.equal(autoStep(86_400_000), 300_000, '24 h: 5 minutes');
  t.equal(autoStep(3_600_000), 15_000, '1 h: 15 s');
  t.equal(autoStep(1000), 1000);
  t.equal(autoStep(365 * 86_400_000), 7 * 86_400_000);
});

t.test('metric rows: one per value, receive time when no ts, the first copy has the highest version', async (t) => {
  const r = (receivedAt: number, body: unknown): Report => ({ id: 'r', kind: 'metrics', customerId: 'c', customer: 'cs', machine: 'm', software: 'logcollector', tokenId: 't', receivedAt, body });
  const rows = metricRows(
    [
      r(1000, { items: [{ client_metric_id: 'a', values: { y: 2, x: 1 }, labels: { z: '1', a: '2' } }] }),
      r(2000, { items: [{ client_metric_id: 'a', ts: '2026-01-01T00:00:00Z', values: { x: 1 } }] }),
      { ...r(3000, {}), kind: 'heartbeat' },
    ],
    () => 'mid',
  ) as Record<string, unknown>[];
  t.equal(rows.length, 3);
  t.match(rows[0], { name: 'y', value: 2, ts_ms: 1000, machine_id: 'mid', label_keys: ['a', 'z'], label_values: ['2', '1'], ver: VER_BASE - 1000 });
  t.equal(rows[2]!.ts_ms, Date.parse('2026-01-01T00:00:00Z'));
  t.ok((rows[0]!.ver as number) > (rows[2]!.ver as number), 'earlier receive time wins');
  t.equal(metricRows([r(1, { items: [{ client_metric_id: 'a', values: { x: 1 } }] })], () => undefined).length, 0, 'no machine, no row');
  t.equal(metricKey('p:', 'c', 'm', 'id'), metricKey('p:', 'c', 'm', 'id'));
  t.not(metricKey('p:', 'c', 'm', 'id'), metricKey('p:', 'c', 'm2', 'id'), 'per machine');
  t.not(metricKey('p:', 'c', 'm', 'id'), metricKey('p:', 'c2', 'm', 'id'), 'per customer');
});
