// The quota model (lib/store/quotas.ts) and the reading of artifact reservations (lib/store/artifact-usage.ts), without servers.
import t from 'tap';
import { loadConfig } from '../../lib/infra/config.js';
import {
  QUOTAS, QUOTA_NAMES, QuotaError, checkOverrides, describeQuota, effectiveQuotas, formatBytes, parseBytes, quotaDefaults, quotaView,
} from '../../lib/store/quotas.js';
import { countsAsReserved, parseReservation } from '../../lib/store/artifact-usage.js';
import { METRICS } from '../../lib/infra/metrics.js';

t.test('defaults come from the environment, one setting per quota', async (t) => {
  const d = quotaDefaults(loadConfig({}));
  t.same(d, {
    artifact_bytes: 10 * 1024 ** 3,
    artifact_max_bytes: 2 * 1024 ** 3,
    stream_connections: 50,
    webhooks: 10,
    whitelist_rules: 1000,
    timeout_rules: 1000,
    ingest_requests_per_s: 2000,
    ingest_bytes_per_s: 1024 ** 2,
    maintenance_windows: 100,
  });
  const env: Record<string, string> = {};
  QUOTAS.forEach((q, i) => (env[q.env] = String(i + 7)));
  const set = quotaDefaults(loadConfig(env));
  QUOTAS.forEach((q, i) => t.equal(set[q.name], i + 7, `${q.name} from ${q.env}`));
});

t.test('an override replaces its default; null and missing keep it', async (t) => {
  const d = quotaDefaults(loadConfig({}));
  const e = effectiveQuotas(d, { webhooks: 2, artifact_bytes: null });
  t.equal(e.webhooks, 2);
  t.equal(e.artifact_bytes, d.artifact_bytes);
  t.equal(e.stream_connections, d.stream_connections);
  t.same(effectiveQuotas(d, undefined), d);
  t.equal(effectiveQuotas(d, { stream_connections: 0 }).stream_connections, 0, '0 is a value (none allowed), not "unset"');
  const v = quotaView(d, { webhooks: 2 });
  t.same(v.webhooks, { limit: 2, default: 10, source: 'override', unit: 'count' });
  t.same(v.artifact_bytes, { limit: d.artifact_bytes, default: d.artifact_bytes, source: 'default', unit: 'bytes' });
  t.same(Object.keys(v), QUOTA_NAMES, 'every quota, in order');
});

t.test('overrides are checked against each quota\'s bounds', async (t) => {
  t.doesNotThrow(() => checkOverrides({ artifact_bytes: 0, webhooks: null, ingest_bytes_per_s: 2 ** 40 }));
  t.throws(() => checkOverrides({ webhooks: -1 }), /webhooks must be a whole number from 0 to 2147483647, or default/);
  try {
    checkOverrides({ webhooks: -1 });
  } catch (e) {
    t.ok(e instanceof QuotaError, 'a QuotaError (the CLI prints its message)');
  }
  t.throws(() => checkOverrides({ artifact_max_bytes: 0 }), /artifact_max_bytes must be a whole number from 1/);
  t.throws(() => checkOverrides({ stream_connections: 2 ** 31 }), /stream_connections/, 'integer columns stay 32-bit');
  t.throws(() => checkOverrides({ ingest_requests_per_s: 0 }), /ingest_requests_per_s/);
  t.throws(() => checkOverrides({ webhooks: 1.5 }), /webhooks/);
  t.throws(() => checkOverrides({ nope: 1 } as never), /unknown quota nope/);
});

t.test('sizes as people write them', async (t) => {
  t.equal(parseBytes('1048576'), 1048576);
  t.equal(parseBytes('10GiB'), 10 * 1024 ** 3);
  t.equal(parseBytes('10 gib'), 10 * 1024 ** 3);
  t.equal(parseBytes('500MB'), 500_000_000, 'SI units are powers of 1000');
  t.equal(parseBytes('1.5KiB'), 1536);
  t.equal(parseBytes('64k'), 64_000);
  t.equal(parseBytes('0'), 0);
  for (const bad of ['', 'lots', '-1', '1.5', '10 GiBs', '1e9', '10 G B', '99999999999 TiB']) t.equal(parseBytes(bad), null, JSON.stringify(bad));
  t.equal(formatBytes(512), '512 B');
  t.equal(formatBytes(10 * 1024 ** 3), '10 GiB');
  t.equal(formatBytes(1536), '1.5 KiB');
  t.equal(describeQuota('artifact_bytes', 1024), 'artifact_bytes = 1024 bytes (1 KiB)');
  t.equal(describeQuota('webhooks', 20), 'webhooks = 20');
  t.equal(describeQuota('ingest_requests_per_s', 20), 'ingest_requests_per_s = 20/s');
});

t.test('a reservation counts until the reader\'s copy of the stored bytes has its seq', async (t) => {
  const open = parseReservation('100|1700000000000');
  t.same(open, { size: 100, reservedMs: 1700000000000, seq: null, settledMs: null });
  t.ok(countsAsReserved(open, 99), 'an open upload always counts');
  const settled = parseReservation('100|1700000000000|7|1700000001000');
  t.same(settled, { size: 100, reservedMs: 1700000000000, seq: 7, settledMs: 1700000001000 });
  t.ok(countsAsReserved(settled, 6), 'a copy older than the artifact row: counted as reserved');
  t.notOk(countsAsReserved(settled, 7), 'a copy that has the row counts it as stored');
  t.notOk(countsAsReserved(settled, 8));
});

t.test('the refusal metric has a series for every quota refused by the gateway or the api', async (t) => {
  const m = METRICS.fleet_quota_refusals_total;
  t.same([...m.services].sort(), ['api', 'gateway']);
  t.same(m.init.map((x) => x[0]).sort(), [...QUOTA_NAMES].sort(), 'every quota is enforced by the gateway or the api');
});
