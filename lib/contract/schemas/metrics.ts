// Host metrics (docs/decisions.md "Ingest": POST …/logcollector/metrics) and their read models.
// One record, or `{items: [record, …]}`; each record is idempotent by its client_metric_id.
import { Type, type Static } from '@sinclair/typebox';
import { IsoTime, Uuid, Text, STORABLE_TEXT } from './common.js';

export const METRIC_NAME_MAX = 128;
export const METRIC_VALUES_MAX = 256;
export const METRIC_LABELS_MAX = 32;

/** Agent times outside this range are refused (422): ClickHouse's DateTime ends in 2105. */
export const METRIC_TS_MIN = Date.parse('2000-01-01T00:00:00Z');
export const METRIC_TS_MAX = Date.parse('2100-01-01T00:00:00Z');

// No $id: the record is compiled alone and inside the batch schema (Ajv refuses a $id twice).
export const MetricRecord = Type.Object(
  {
    client_metric_id: Text({ minLength: 1, maxLength: 128, description: "the agent's id of this record: the same id is stored once, forever" }),
    ts: Type.Optional({ ...IsoTime, description: 'time of the measurement; the receive time when omitted' }),
    values: Type.Record(Type.String(), Type.Number(), {
      minProperties: 1,
      maxProperties: METRIC_VALUES_MAX,
      propertyNames: { minLength: 1, maxLength: METRIC_NAME_MAX, pattern: STORABLE_TEXT },
      description: `metric name -> number; 1 to ${METRIC_VALUES_MAX} names of at most ${METRIC_NAME_MAX} characters`,
    }),
    labels: Type.Optional(
      Type.Record(Type.String(), Text({ maxLength: 256 }), {
        maxProperties: METRIC_LABELS_MAX,
        propertyNames: { minLength: 1, maxLength: METRIC_NAME_MAX, pattern: STORABLE_TEXT },
        description: `label name -> string value; at most ${METRIC_LABELS_MAX}`,
      }),
    ),
  },
  { description: 'One host-metrics record' },
);
export type MetricRecord = Static<typeof MetricRecord>;

export function metricsBatchSchema(maxItems: number) {
  return Type.Object({ items: Type.Array(MetricRecord, { minItems: 1, maxItems }) }, { description: `1 to ${maxItems} records` });
}
export const MetricsBatch = metricsBatchSchema(1000);
export type MetricsBatch = Static<typeof MetricsBatch>;

export const MetricsBody = Type.Union([MetricsBatch, MetricRecord], { $id: 'MetricsBody', description: 'one record, or {items: [record, …]}' });

export const MetricsAnswer = Type.Object(
  {
    ok: Type.Literal(true),
    accepted: Type.Integer({ description: 'records stored by this request' }),
    duplicates: Type.Integer({ description: 'records whose client_metric_id was already received (within METRIC_DEDUP_TTL_S: exact)' }),
  },
  { $id: 'MetricsAnswer' },
);

// Read API.
export const MetricsQuery = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: METRIC_NAME_MAX, description: 'metric name; omitted: list the names' })),
  from: Type.Optional({ ...IsoTime, description: 'start (inclusive); default: `to` minus 24 h' }),
  to: Type.Optional({ ...IsoTime, description: 'end (exclusive); default: now' }),
  step: Type.Optional(
    Type.String({ pattern: '^[0-9]{1,9}(ms|s|m|h|d)?$', description: 'bucket width: seconds, or a number with ms, s, m, h or d; default: about 300 buckets' }),
  ),
});

export const MetricName = Type.Object({
  name: Type.String(),
  points: Type.Integer({ description: 'records with this name in the range' }),
  first: Type.String({ format: 'date-time' }),
  last: Type.String({ format: 'date-time' }),
});

export const MetricNames = Type.Object({ machine_id: Uuid, from: Type.String(), to: Type.String(), names: Type.Array(MetricName) }, { $id: 'MetricNames' });

export const MetricPoint = Type.Object({
  t: Type.String({ format: 'date-time', description: 'start of the bucket' }),
  avg: Type.Number(),
  min: Type.Number(),
  max: Type.Number(),
  count: Type.Integer(),
});

export const MetricSeries = Type.Object(
  {
    machine_id: Uuid,
    name: Type.String(),
    from: Type.String({ format: 'date-time' }),
    to: Type.String({ format: 'date-time' }),
    step_s: Type.Number(),
    points: Type.Array(MetricPoint, { description: 'one per bucket that holds data, oldest first' }),
  },
  { $id: 'MetricSeries' },
);
