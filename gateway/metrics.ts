// POST /api/ingest/{customer}/{machine}/logcollector/metrics: host metrics, idempotent by
// client_metric_id per customer and machine.
//
// Stored once, forever: every copy of a record that reaches the queue produces the same
// ClickHouse row key (customer, machine, name, client_metric_id), so copies collapse and reads
// (grouped by client_metric_id) see one. Counted exactly within METRIC_DEDUP_TTL_S (24 h): Redis
// remembers each id that was durably queued, and the answer says how many records were new.
//
// Per request, after the usual checks and the schema:
//   1. ids repeated inside the request count as duplicates;
//   2. MGET: ids already registered are duplicates and are not queued again;
//   3. the rest are queued as one report; on the PubAck:
//   4. SET NX EX per id (one Lua call, gateway/metric-register.ts): set -> accepted; already
//      there -> duplicate (another gateway queued the same record at the same moment: both
//      copies are stored and collapse, one counts).
// The register is written only AFTER the PubAck: an id marked before a failed publish would turn
// the agent's retry into a "duplicate" that was never stored. Redis unreachable: 503, retry.
import type { JsonRoute } from './types.js';
import type { Ingest } from './ingest.js';
import { mgetAny, redisKeys } from '../lib/infra/redis.js';
import type { Validator } from '../lib/contract/validation.js';
import { compile } from '../lib/contract/validation.js';
import { MetricRecord, metricsBatchSchema } from '../lib/contract/schemas/metrics.js';
import { metricTimes } from '../lib/domain/report-check.js';
import { encodeReport } from '../lib/contract/messages.js';
import { HttpError, unprocessable } from '../lib/contract/errors.js';
import { randomId, uuidFromName } from '../lib/contract/ids.js';
import { markNew } from './metric-register.js';

const RECORDS = ['items', '*'];
const ITEMS_OPEN = Buffer.from('{"items":[');
const ITEMS_CLOSE = Buffer.from(']}');
const COMMA = Buffer.from(',');
const REDIS_TIMEOUT_MS = 2000;

/** The Redis key that remembers a client_metric_id of a customer's machine, from the keys of a prefix (built once per route). */
const keyOf = (keys: ReturnType<typeof redisKeys>, customerId: string, machine: string, clientMetricId: string) => keys.metric(uuidFromName(customerId, machine, clientMetricId));

/** Redis key that remembers a client_metric_id of a customer's machine. */
export function metricKey(prefix: string, customerId: string, machine: string, clientMetricId: string, layout = { isCluster: false }): string {
  return keyOf(redisKeys(prefix, layout), customerId, machine, clientMetricId);
}

const isBatch = (data: unknown): data is { items: unknown[] } => typeof data === 'object' && data !== null && 'items' in data;

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]);
}

export function metricsRoute(core: Ingest): JsonRoute {
  const { cfg, redis, publisher, metrics, log } = core.d;
  const ttl = cfg.metricDedupTtlS;
  const keys = redisKeys(cfg.redisPrefix, redis);
  const records = metrics.counter('fleet_gateway_host_metric_records_total');
  const acceptedRecords = records.labels('accepted');
  const duplicateRecords = records.labels('duplicate');

  const one = compile(MetricRecord);
  const batch = compile(metricsBatchSchema(cfg.gateway.maxItems));
  const validate = Object.assign((data: unknown) => (isBatch(data) ? batch(data) : one(data)), {
    errorsOf: (data: unknown) => (isBatch(data) ? batch.errorsOf(data) : one.errorsOf(data)),
  }) as Validator<unknown>;

  const unavailable = (what: string) => new HttpError(503, `${what}; retry (a record is never stored twice)`, { retryAfterS: 2 });

  return {
    software: 'logcollector',
    validate,
    spanPath: RECORDS,
    finish(call, tok, raw, data, path, _idemKey, spans, done) {
      const list = (isBatch(data) ? data.items : [data]) as MetricRecord[];
      const late = metricTimes(list, isBatch(data) ? (i) => `/items/${i}` : () => '');
      if (late) return done(unprocessable(late.detail, late.errors));

      let duplicates = 0;
      const seen = new Set<string>();
      // Each record's bytes as the agent sent them: one record is the whole body, many are spans of `items`.
      const bytesOf = (i: number): Buffer => {
        if (!isBatch(data)) return raw;
        const span = spans.get(i)!;
        return raw.subarray(span[0], span[1]);
      };
      const fresh: { rec: MetricRecord; key: string; index: number }[] = [];
      for (let index = 0; index < list.length; index++) {
        const rec = list[index]!;
        const key = keyOf(keys, tok.customerId, path.machine, rec.client_metric_id);
        if (seen.has(key)) duplicates++;
        else {
          seen.add(key);
          fresh.push({ rec, key, index });
        }
      }
      const at = Date.now();

      const answer = (accepted: number) => {
        acceptedRecords.inc(accepted);
        duplicateRecords.inc(duplicates);
        done({ status: 200, body: `{"ok":true,"accepted":${accepted},"duplicates":${duplicates}}` });
      };

      withTimeout(mgetAny(redis, fresh.map((f) => f.key)), REDIS_TIMEOUT_MS).then(
        (known) => {
          const todo = fresh.filter((_, i) => known[i] === null);
          duplicates += fresh.length - todo.length;
          if (todo.length === 0) return answer(0);
          if (call.aborted) return;
          // The new records, queued as the bytes the agent sent (never re-serialised: that would
          // grow numbers such as 9e20 to 21 digits, and the report past the body limit).
          const parts: Buffer[] = [ITEMS_OPEN];
          todo.forEach((x, i) => parts.push(...(i > 0 ? [COMMA, bytesOf(x.index)] : [bytesOf(x.index)])));
          parts.push(ITEMS_CLOSE);
          const body = Buffer.concat(parts);
          const report = encodeReport({ id: randomId(), kind: 'metrics', customerId: tok.customerId, customer: tok.customer, machine: path.machine, software: path.software, tokenId: tok.id, receivedAt: at }, body);
          if (report.length > publisher.maxReportBytes) {
            return done(new HttpError(413, `report of ${report.length} bytes is over the queue's message limit`));
          }
          publisher.add(report, call.guard((err: HttpError | null) => {
            if (err) return done(err);
            withTimeout(markNew(redis, todo.map((x) => x.key), String(at), ttl), REDIS_TIMEOUT_MS).then(
              (accepted) => {
                duplicates += todo.length - accepted;
                answer(accepted);
              },
            ).catch((e) => {
              log.warn({ err: e }, 'metric id register (Redis) failed after the records were queued');
              done(unavailable('the records are queued, but the duplicate register (Redis) did not answer'));
            });
          }), 'reports', tok.customerId, path.machine);
        },
        (e) => {
          log.warn({ err: e }, 'metric id register (Redis) unavailable');
          done(unavailable('the duplicate register (Redis) is unavailable'));
        },
      ).catch(call.fail);
    },
  };
}
