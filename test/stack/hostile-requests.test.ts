// One customer's requests may cost another nothing (issue: "no customer and no partial outage may
// cost another customer anything"), tried against the real gateway and worker processes:
//   - the inputs that once ended a gateway (JSON nested 20,000 deep in a batch entry, a metrics
//     body, a large status snapshot, a command ack's output): 422 with the path, the gateway alive,
//     and another customer's heartbeat sent after them stored;
//   - a bug while a request is handled (GATEWAY_FAULT_INJECTION: thrown in the handler, in the body
//     callback, in the publish callback): that request alone is answered 500 and logged, the process
//     keeps serving;
//   - metrics bodies are queued as sent: 1 MiB of `9e20` values stays 1 MiB on the queue;
//   - Idempotency-Key scoped per endpoint, and refused (422) with another body;
//   - per-customer rates over all its tokens: requests and bytes.
import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, get, eventually, chRows, request } from '../helpers/stack.js';
import { createToken } from '../../lib/store/customers.js';
import { idempotentReportId } from '../../lib/contract/ids.js';

const s = await testStack(t, 'hostile', {
  env: {
    GATEWAY_FAULT_INJECTION: '1',
    // The per-customer rate test below uses its own gateway; this one must not get in the way.
    QUOTA_INGEST_REQUESTS_PER_S: '100000',
    RATE_LIMIT_PER_S: '100000',
    RATE_LIMIT_BURST: '100000',
    REJECTION_LOG_RATE_PER_S: '10000',
    REJECTION_LOG_BURST: '10000',
  },
});
const other = await s.newCustomer(`victim-${s.id}`);
const gw = s.procs.find((p) => p.name === 'gateway')!;
const worker = s.procs.find((p) => p.name === 'worker')!;
const gwPid = gw.child.pid;
/** The first gateway is the one it was: never restarted, still running. */
const sameGateway = () => gw.running && gw.child.pid === gwPid;

const count = async (sql: string) => Number((await chRows<{ n: string }>(s.ch, sql))[0]?.n ?? 0);
const deep = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
const metricsUrl = (machine: string) => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/${machine}/logcollector/metrics`;
const raw = (url: string, body: string, headers: Record<string, string> = {}, token = s.token) =>
  request('POST', url, token, body, { 'Content-Type': 'application/json', ...headers });

/** A heartbeat of the other customer, after whatever came before: answered 200 and stored. */
async function victimHeartbeatStored(t: Test, machine: string): Promise<void> {
  const r = await s.report(machine, 'heartbeat', { version: 'after' }, { customer: other.customer.slug, token: other.token });
  t.equal(r.status, 200, `the other customer's heartbeat is answered 200 (${JSON.stringify(r.body)})`);
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE customer_id = '${other.customer.id}' AND machine = '${machine}'`)) === 1, 30_000, `${machine} stored`);
}

t.test('the inputs that once ended a gateway: 422 with the path; the gateway serves on', async (t) => {
  const cmd = randomUUID();
  const cases: [string, string, string, RegExp][] = [
    ['batch entry body', `${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, `{"entries":[{"machine":"m1","software":"agent","kind":"heartbeat","body":{"x":${deep(20_000)}}}]}`, /nested deeper than 128 levels at \/entries\/0\/body\/x\/0/],
    ['metrics body', metricsUrl('m1'), `{"client_metric_id":"a","values":{"x":1},"labels":{"x":${deep(20_000)}}}`, /nested deeper than 64 levels at \/labels\/x\/0/],
    ['status snapshot over 256 KiB', s.ingestUrl('m1', 'status'), `{"status":"running","message":"${'m'.repeat(8000)}","snapshot":{"pad":"${'p'.repeat(300_000)}","x":${deep(20_000)}}}`, /nested deeper than 64 levels at \/snapshot\/x\/0/],
    ['command ack output', `${s.ingestUrl('m1', 'commands')}/${cmd}/ack`, `{"result":"success","output":${deep(20_000)}}`, /nested deeper than 64 levels at \/output\/0/],
    ['a million values', s.ingestUrl('m1', 'status'), `{"status":"running","snapshot":{"a":[${'0,'.repeat(400_000)}0]}}`, /more than 100000 values/],
  ];
  for (const [what, url, body, detail] of cases) {
    for (let attempt = 0; attempt < 3; attempt++) {
      const r = await raw(url, body);
      // A batch as a whole may nest twice as deep; 20,000 levels refuse the whole request.
      t.equal(r.status, 422, `${what}: ${JSON.stringify(r.body).slice(0, 300)}`);
      t.match(r.body?.detail, detail, `${what}: names the path`);
    }
  }
  // Inside a batch, an entry's own limits: the same 422 as its single request, in its result.
  const entryDeep = `{"entries":[{"machine":"m2","software":"agent","kind":"heartbeat","body":{}},{"machine":"m2","software":"agent","kind":"status","body":{"status":"running","snapshot":{"x":${deep(70)}}}}]}`;
  const b = await raw(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, entryDeep);
  t.equal(b.status, 200);
  t.same(b.body.results.map((x: { status: number }) => x.status), [200, 422], 'the shallow entry accepted, the deep one refused alone');
  t.match(b.body.results[1].detail, /nested deeper than 64 levels at \/snapshot\/x\/0/);
  t.ok(sameGateway(), 'the gateway process is the same and alive');
  t.equal((await get(`${s.gatewayUrl}/healthz`, null)).status, 200);
  await victimHeartbeatStored(t, 'after-deep');
});

t.test('a bug while handling a request: that request answered 500 and logged, everyone else served', async (t) => {
  for (const step of ['handler', 'body', 'publish']) {
    const r = await raw(s.ingestUrl(`fault-${step}`, 'heartbeat'), '{}', { 'X-Fleet-Fault': step });
    t.equal(r.status, 500, `${step}: 500`);
    t.match(r.body?.detail, /internal error/, `${step}: a detail`);
    if (step === 'publish') t.match(r.body.detail, /\(report [0-9a-f-]{36}\)/, 'after the report was made: its id');
    const ok = await s.report(`fault-${step}-next`, 'heartbeat', {});
    t.equal(ok.status, 200, `${step}: the next request is served`);
  }
  // A batch and a metrics request through the same boundaries.
  for (const [url, body] of [
    [`${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, '{"entries":[{"machine":"fb","software":"agent","kind":"heartbeat"}]}'],
    [metricsUrl('fm'), '{"client_metric_id":"x","values":{"v":1}}'],
  ] as const) {
    const r = await raw(url, body, { 'X-Fleet-Fault': 'handler' });
    t.ok(r.status === 500 || r.status === 200, `${url.split('/').pop()}: answered (${r.status} ${JSON.stringify(r.body).slice(0, 200)})`);
  }
  t.ok(sameGateway(), 'the gateway process is the same and alive');
  const metrics = await get(`${s.gatewayUrl}/metrics`, null);
  const counted = [...String(metrics.body).matchAll(/^fleet_gateway_internal_errors_total\{[^}]*route="ingest_heartbeat"[^}]*\} (\d+)/gm)].map((m) => Number(m[1]));
  t.same(counted, [3], 'each counted by route');
  await eventually(
    async () => (await count(`SELECT count() AS n FROM ingest_rejections WHERE status = 500 AND path LIKE '%/fault-%'`)) === 3,
    30_000,
    'each in the rejection log',
  );
  t.ok(gw.output.includes('internal error while handling a request'), 'logged');
  await victimHeartbeatStored(t, 'after-fault');
});

t.test('metrics bodies are queued as sent: 1 MiB of 9e20 values is accepted and stored, not grown past the queue limit', async (t) => {
  const items: string[] = [];
  let size = 12;
  for (let i = 0; size < 1024 * 1024 - 200; i++) {
    const rec = `{"client_metric_id":"big-${s.id}-${i}","values":{${Array.from({ length: 60 }, (_, j) => `"v${j}":9e20`).join(',')}}}`;
    items.push(rec);
    size += rec.length + 1;
    if (items.length === 1000) break;
  }
  const body = `{"items":[${items.join(',')}]}`;
  t.ok(body.length <= 1024 * 1024, `${body.length} bytes`);
  const r = await raw(metricsUrl('big'), body);
  t.equal(r.status, 200, JSON.stringify(r.body).slice(0, 200));
  t.equal(r.body.accepted, items.length);
  await eventually(
    async () => (await count(`SELECT uniqExact(client_metric_id) AS n FROM host_metrics WHERE machine = 'big' AND value = 9e20`)) === items.length,
    60_000,
    'every record stored, with its value',
  );
  t.ok(worker.running, 'the worker is alive');
});

t.test('Idempotency-Key: scoped to the endpoint; another body is 422; the same value in other spelling is the same body', async (t) => {
  const key = `k-${s.id}`;
  const a = await raw(s.ingestUrl('idem-a', 'status'), '{"status":"running","message":"one","snapshot":{"b":1,"a":2}}', { 'Idempotency-Key': key });
  t.equal(a.status, 200);
  const again = await raw(s.ingestUrl('idem-a', 'status'), '{ "snapshot" : {"a":2.0, "b":1}, "message":"one", "status":"running" }', { 'Idempotency-Key': key });
  t.equal(again.status, 200, 'the same JSON value, other spacing, key order and number spelling: accepted again');
  const changed = await raw(s.ingestUrl('idem-a', 'status'), '{"status":"running","message":"two"}', { 'Idempotency-Key': key });
  t.equal(changed.status, 422, 'the same key with another body is refused');
  t.match(changed.body.detail, /already used with a different body/);
  const otherMachine = await raw(s.ingestUrl('idem-b', 'status'), '{"status":"running","message":"two"}', { 'Idempotency-Key': key });
  t.equal(otherMachine.status, 200, 'the same key on another machine is another report');
  const otherKind = await raw(s.ingestUrl('idem-a', 'heartbeat'), '{}', { 'Idempotency-Key': key });
  t.equal(otherKind.status, 200, 'and on another kind');
  // Heartbeats and status reports travel in different lanes (streams): each is waited for in its
  // own, the status reports until both accepted ones are stored and a later marker of their lane too.
  t.equal((await s.report('idem-marker', 'status', { status: 'running', message: 'marker' })).status, 200);
  await eventually(async () => (await count(`SELECT count() AS n FROM status_history FINAL WHERE machine = 'idem-marker'`)) === 1, 30_000, 'marker stored');
  await eventually(async () => (await count(`SELECT count() AS n FROM status_history FINAL WHERE machine IN ('idem-a', 'idem-b')`)) === 2, 30_000, 'both accepted status reports stored');
  await eventually(async () => (await count(`SELECT count() AS n FROM heartbeats FINAL WHERE machine = 'idem-a'`)) === 1, 30_000, 'heartbeat stored');
  const ida = idempotentReportId(s.customer.id, 'status', 'idem-a', 'agent', key);
  const idb = idempotentReportId(s.customer.id, 'status', 'idem-b', 'agent', key);
  const rows = await chRows<{ machine: string; message: string; report_id: string }>(s.ch, `SELECT machine, message, report_id FROM status_history FINAL WHERE machine IN ('idem-a', 'idem-b') ORDER BY machine`);
  t.same(rows, [
    { machine: 'idem-a', message: 'one', report_id: ida },
    { machine: 'idem-b', message: 'two', report_id: idb },
  ], 'each endpoint its own report; the refused body never stored');
});

t.test('per-customer rates over all its tokens: requests (batch entries one each) and body bytes', async (t) => {
  // 1 request/s (a burst of 2); on a second gateway, 1 byte/s (a burst of BATCH_BODY_LIMIT_BYTES, 4 MiB).
  const g = await s.startGateway({ QUOTA_INGEST_REQUESTS_PER_S: '1' });
  const gb = await s.startGateway({ QUOTA_INGEST_BYTES_PER_S: '1' });
  const second = await createToken(s.pool, s.customer.id, 'second', ['ingest']);
  const batchOf = (n: number, tag: string) => JSON.stringify({ entries: Array.from({ length: n }, (_, i) => ({ machine: `rate-${tag}-${i}`, software: 'agent', kind: 'heartbeat' })) });
  const url = (slug: string) => `${g.url}/api/ingest/${slug}/batch`;
  const accepted = (r: { status: number; body: { results?: { status: number }[] } }) => (r.status === 429 ? 0 : r.body.results!.filter((x) => x.status === 200).length);
  // Both tokens at once: together they get the customer's burst of 2 (and what refilled meanwhile).
  const t0 = Date.now();
  const [a, b] = await Promise.all([raw(url(s.customer.slug), batchOf(10, 'a')), raw(url(s.customer.slug), batchOf(10, 'b'), {}, second.token)]);
  const refilled = Math.floor((Date.now() - t0) / 1000);
  const got = accepted(a) + accepted(b);
  t.ok(got >= 2 && got <= 2 + refilled, `two tokens of one customer share its bucket: ${accepted(a)} + ${accepted(b)} accepted of 20 (burst 2, ${refilled} refilled)`);
  const c = await raw(url(other.customer.slug), batchOf(10, 'c'), {}, other.token);
  t.equal(accepted(c), 2, 'another customer has its own burst, untouched');

  // Bytes: a burst of 4 MiB, refilled at 1 byte/s: 20 bodies of 200 kB fill it.
  const big = JSON.stringify({ status: 'running', snapshot: { pad: 'x'.repeat(200_000) } });
  const statusUrl = `${gb.url}/api/ingest/${other.customer.slug}/bytes/agent/status`;
  const statuses: number[] = [];
  for (let i = 0; i < 22; i++) statuses.push((await raw(statusUrl, big, {}, other.token)).status);
  const fit = Math.floor((4 * 1024 * 1024) / big.length);
  t.same(statuses.slice(0, fit), Array(fit).fill(200), `${fit} bodies of ${big.length} bytes fit the burst`);
  t.same(statuses.slice(fit), Array(22 - fit).fill(429), 'then 429');
  const last = await raw(statusUrl, big, {}, other.token);
  t.match(last.body.detail, /over the ingest byte rate of 1 bytes\/s for customer/);
  t.ok(Number(last.headers.get('retry-after')) >= 1);
  const hb = await raw(`${gb.url}/api/ingest/${s.customer.slug}/bytes-other/agent/heartbeat`, '{}');
  t.equal(hb.status, 200, "the byte rate of one customer is not another's");
  const metrics = String((await get(`${g.url}/metrics`, null)).body) + String((await get(`${gb.url}/metrics`, null)).body);
  t.match(metrics, /fleet_quota_refusals_total\{[^}]*quota="ingest_bytes_per_s"[^}]*\} [1-9]/);
  t.match(metrics, /fleet_quota_refusals_total\{[^}]*quota="ingest_requests_per_s"[^}]*\} [1-9]/);
});
