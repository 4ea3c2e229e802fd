// Host metrics: idempotent by client_metric_id (serially, concurrently, through two gateways,
// beyond the 24 h register), exact counts, validation, and the series read API.
import t from 'tap';
import { testStack, post, get, eventually, chRows, consumed } from '../helpers/stack.js';

const s = await testStack(t, 'metrics');
const url = (m: string, gw = s.gatewayUrl) => `${gw}/api/ingest/${s.customer.slug}/${m}/logcollector/metrics`;

/** Rows per name for one record, as reads see them (FINAL collapses copies of the same key). */
async function finalRows(m: string, id: string): Promise<number> {
  const r = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM host_metrics FINAL WHERE machine = '${m}' AND client_metric_id = '${id}'`);
  return Number(r[0]!.n);
}

async function machineId(m: string): Promise<string> {
  return eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=${m}`, s.token)).body.items?.[0]?.machine_id, 5000, `machine ${m} known`);
}

t.test('the same record three times serially: accepted once, two duplicates, one row per name', async (t) => {
  const rec = { client_metric_id: 'serial-1', ts: '2026-05-01T10:00:00Z', values: { cpu: 0.5, mem_mb: 1024 }, labels: { host: 'a' } };
  const answers = [];
  for (let i = 0; i < 3; i++) answers.push(await post(url('m1'), s.token, rec));
  t.same(answers.map((a) => a.status), [200, 200, 200]);
  t.same(answers.map((a) => a.body), [
    { ok: true, accepted: 1, duplicates: 0 },
    { ok: true, accepted: 0, duplicates: 1 },
    { ok: true, accepted: 0, duplicates: 1 },
  ]);
  await eventually(async () => (await finalRows('m1', 'serial-1')) === 2, 5000, 'two rows (cpu, mem_mb)');
  const rows = await chRows<{ name: string; value: number; label_keys: string[]; label_values: string[]; ts_ms: string }>(
    s.ch,
    `SELECT name, value, label_keys, label_values, ts_ms FROM host_metrics WHERE client_metric_id = 'serial-1' ORDER BY name`,
  );
  t.equal(rows.length, 2, 'the repeats were not even queued (no extra copies before merges)');
  t.same(rows.map((r) => [r.name, r.value]), [['cpu', 0.5], ['mem_mb', 1024]]);
  t.same(rows[0]!.label_keys, ['host']);
  t.same(rows[0]!.label_values, ['a']);
  t.equal(rows[0]!.ts_ms, String(Date.parse('2026-05-01T10:00:00Z')));
});

t.test('the same record three times concurrently, through two gateways: exact counts, one row', async (t) => {
  const second = await s.startGateway();
  for (let round = 0; round < 5; round++) {
    const rec = { client_metric_id: `conc-${round}`, values: { load: round } };
    const gws = [s.gatewayUrl, second.url, round % 2 ? s.gatewayUrl : second.url];
    const rs = await Promise.all(gws.map((gw) => post(url('m2', gw), s.token, rec)));
    t.same(rs.map((r) => r.status), [200, 200, 200], `round ${round}: all answered 200`);
    t.equal(rs.reduce((a, r) => a + r.body.accepted, 0), 1, `round ${round}: accepted once`);
    t.equal(rs.reduce((a, r) => a + r.body.duplicates, 0), 2, `round ${round}: two duplicates`);
  }
  await eventually(async () => {
    const r = await chRows<{ n: string; u: string }>(s.ch, `SELECT count() AS n, uniqExact(client_metric_id) AS u FROM host_metrics FINAL WHERE machine = 'm2'`);
    return Number(r[0]!.n) === 5 && Number(r[0]!.u) === 5;
  }, 5000, 'five rows, one per record');
  const id = await machineId('m2');
  const series = await get(`${s.apiUrl}/api/machines/${id}/metrics?name=load&from=2000-01-01T00:00:00Z&step=1d`, s.token);
  t.equal(series.status, 200);
  t.equal(series.body.points.reduce((a: number, p: { count: number }) => a + p.count, 0), 5, 'each record read once');
});

t.test('a batch: repeats inside the request and records seen before count as duplicates', async (t) => {
  const items = [
    { client_metric_id: 'b-1', values: { x: 1 } },
    { client_metric_id: 'b-2', values: { x: 2 } },
    { client_metric_id: 'b-1', values: { x: 1 } },
  ];
  const r1 = await post(url('m3'), s.token, { items });
  t.same(r1.body, { ok: true, accepted: 2, duplicates: 1 });
  const r2 = await post(url('m3'), s.token, { items: [{ client_metric_id: 'b-2', values: { x: 2 } }, { client_metric_id: 'b-3', values: { x: 3 } }] });
  t.same(r2.body, { ok: true, accepted: 1, duplicates: 1 });
  await eventually(async () => {
    const r = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM host_metrics FINAL WHERE machine = 'm3'`);
    return Number(r[0]!.n) === 3;
  }, 5000, 'three records stored');
  // The same client_metric_id on another machine is another record.
  const other = await post(url('m3b'), s.token, { client_metric_id: 'b-1', values: { x: 9 } });
  t.same(other.body, { ok: true, accepted: 1, duplicates: 0 });
});

t.test('forever: a record sent again after the 24 h register forgot it is still read once (the first copy)', async (t) => {
  const rec = { client_metric_id: 'late-1', values: { temp: 40 } }; // no ts: the receive time
  t.same((await post(url('m4'), s.token, rec)).body, { ok: true, accepted: 1, duplicates: 0 });
  await eventually(async () => (await finalRows('m4', 'late-1')) === 1, 5000, 'stored');
  const first = await chRows<{ ts_ms: string }>(s.ch, `SELECT ts_ms FROM host_metrics WHERE client_metric_id = 'late-1'`);
  // Simulate the register's expiry (24 h later).
  const keys = await s.redis.keys(`${s.env.REDIS_PREFIX}metric:*`);
  t.ok(keys.length > 0, 'ids are registered in Redis');
  for (const k of keys) t.ok((await s.redis.ttl(k)) > 86_000, 'for 24 h');
  await s.redis.del(...keys);
  await new Promise((r) => setTimeout(r, 20));
  const again = await post(url('m4'), s.token, { ...rec, values: { temp: 99 } });
  t.equal(again.status, 200);
  // The second copy has been applied once the stream holds nothing for the workers (counting raw
  // rows instead would race ClickHouse's background merges, which may collapse the copies first).
  await consumed(s, 10_000);
  t.equal(await finalRows('m4', 'late-1'), 1, 'FINAL sees one row');
  const id = await machineId('m4');
  const series = await get(`${s.apiUrl}/api/machines/${id}/metrics?name=temp&step=1d&from=2000-01-01T00:00:00Z`, s.token);
  t.equal(series.body.points.length, 1);
  t.match(series.body.points[0], { count: 1, avg: 40, min: 40, max: 40 }, 'the first copy wins');
  const raw = await chRows<{ ts_ms: string }>(s.ch, `SELECT argMax(ts_ms, ver) AS ts_ms FROM host_metrics WHERE client_metric_id = 'late-1'`);
  t.equal(raw[0]!.ts_ms, first[0]!.ts_ms, "with the first copy's time");
});

t.test('series: avg, min and max per step; names listed without a name', async (t) => {
  const base = Date.parse('2026-06-01T00:00:00Z');
  const items = [];
  // Two buckets of 60 s: values 1..4 at 0, 15, 30, 45 s; 10 and 20 at 60 and 90 s.
  const vals: [number, number][] = [[0, 1], [15, 2], [30, 3], [45, 4], [60, 10], [90, 20]];
  for (const [sec, v] of vals) items.push({ client_metric_id: `s-${sec}`, ts: new Date(base + sec * 1000).toISOString(), values: { cpu: v, disk: 100 - v } });
  t.same((await post(url('m5'), s.token, { items })).body, { ok: true, accepted: 6, duplicates: 0 });
  const id = await machineId('m5');
  const from = new Date(base).toISOString();
  const to = new Date(base + 120_000).toISOString();
  const series = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/machines/${id}/metrics?name=cpu&from=${from}&to=${to}&step=60s`, s.token);
    return r.body.points?.length === 2 ? r.body : null;
  }, 5000, 'two buckets');
  t.equal(series.step_s, 60);
  t.same(series.points, [
    { t: from, avg: 2.5, min: 1, max: 4, count: 4 },
    { t: new Date(base + 60_000).toISOString(), avg: 15, min: 10, max: 20, count: 2 },
  ]);
  const oneStep = await get(`${s.apiUrl}/api/machines/${id}/metrics?name=disk&from=${from}&to=${to}&step=2m`, s.token);
  t.match(oneStep.body.points, [{ t: from, min: 80, max: 99, count: 6 }]);
  t.ok(Math.abs(oneStep.body.points[0].avg - 560 / 6) < 1e-9, 'avg over both minutes');
  const names = await get(`${s.apiUrl}/api/machines/${id}/metrics?from=${from}&to=${to}`, s.token);
  t.equal(names.status, 200);
  t.same(names.body.names.map((n: { name: string; points: number }) => [n.name, n.points]), [['cpu', 6], ['disk', 6]]);
  t.equal(names.body.names[0].first, from);
  const auto = await get(`${s.apiUrl}/api/machines/${id}/metrics?name=cpu&from=${from}&to=${to}`, s.token);
  t.equal(auto.status, 200);
  t.equal(auto.body.step_s, 1, 'a 2-minute range gets 1 s steps');
  t.equal(auto.body.points.length, 6);
  const empty = await get(`${s.apiUrl}/api/machines/${id}/metrics?name=nothing&from=${from}&to=${to}`, s.token);
  t.same(empty.body.points, []);
});

t.test('bad metric bodies: 422 with the failing path; 403 for another customer', async (t) => {
  const cases: [unknown, string][] = [
    [{ values: { a: 1 } }, '/client_metric_id'],
    [{ client_metric_id: 'x'.repeat(129), values: { a: 1 } }, '/client_metric_id'],
    [{ client_metric_id: 'x', values: {} }, '/values'],
    [{ client_metric_id: 'x', values: { a: 'high' } }, '/values/a'],
    [{ client_metric_id: 'x', values: { a: 1 }, ts: 'yesterday' }, '/ts'],
    [{ client_metric_id: 'x', values: { a: 1 }, ts: '1999-12-31T23:59:59Z' }, '/ts'],
    [{ items: [{ client_metric_id: 'x', values: { a: 1 } }, { client_metric_id: 'y' }] }, '/items/1/values'],
    [{ items: [] }, '/items'],
    [{ items: Array.from({ length: 1001 }, (_, i) => ({ client_metric_id: `i${i}`, values: { a: 1 } })) }, '/items'],
  ];
  for (const [body, path] of cases) {
    const r = await post(url('m6'), s.token, body);
    t.equal(r.status, 422, JSON.stringify(body).slice(0, 80));
    t.ok(r.body.errors?.some((e: { path: string }) => e.path.startsWith(path)), `error at ${path}: ${JSON.stringify(r.body.errors)}`);
  }
  const other = await s.newCustomer('metrics-other');
  const r = await post(url('m6'), other.token, { client_metric_id: 'x', values: { a: 1 } });
  t.equal(r.status, 403);
  t.type(r.body.detail, 'string');
  t.equal((await post(url('m6'), s.token, '{"client_metric_id":')).status, 400);
  t.equal((await post(url('m6'), s.token, { client_metric_id: 'ok', values: { a: 1 } }, { 'Content-Type': 'text/plain' })).status, 415);
});

t.test('routes: `logcollector` is still an ordinary software for the other reports', async (t) => {
  const hb = await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/m7/logcollector/heartbeat`, s.token, { version: '1.0' });
  t.equal(hb.status, 200);
  t.same(hb.body, { ok: true });
  const st = await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/m7/logcollector/status`, s.token, { status: 'running' });
  t.equal(st.status, 200);
  const wrongSoftware = await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/m7/agent/metrics`, s.token, { client_metric_id: 'x', values: { a: 1 } });
  t.equal(wrongSoftware.status, 404, 'metrics exist only under logcollector');
  const wrongMethod = await get(url('m7'), s.token);
  t.equal(wrongMethod.status, 405);
  // The two lanes are applied independently: the status report (main lane) may come before the
  // heartbeat (its own lane) or after it. Wait for both, not for the first row.
  const i = await eventually(async () => {
    const item = (await get(`${s.apiUrl}/api/instances?machine=m7`, s.token)).body.items?.[0];
    return item?.version === '1.0' && item?.status === 'running' ? item : null;
  }, 30_000, "the heartbeat's version and the status stored");
  t.equal(i.software, 'logcollector');
  t.equal(i.version, '1.0');
  t.equal(i.status, 'running', 'and the status report');
});

t.test('read API: customer-scoped, ill-formed input refused', async (t) => {
  const id = await machineId('m5');
  const other = await s.newCustomer('metrics-reader');
  t.equal((await get(`${s.apiUrl}/api/machines/${id}/metrics`, other.token)).status, 404, "another customer's machine is not found");
  t.equal((await get(`${s.apiUrl}/api/machines/not-a-uuid/metrics`, s.token)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/machines/00000000-0000-4000-8000-000000000000/metrics`, s.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/machines/${id}/metrics?name=cpu&step=5x`, s.token)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/machines/${id}/metrics?name=cpu&step=1ms`, s.token)).status, 400, 'too many buckets');
  const backwards = await get(`${s.apiUrl}/api/machines/${id}/metrics?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z`, s.token);
  t.equal(backwards.status, 400);
  t.type(backwards.body.detail, 'string');
  t.equal((await get(`${s.apiUrl}/api/machines/${id}/metrics`, null)).status, 401);
});
