// All three report kinds from HTTP to Postgres, ClickHouse, Redis and the read API.
import t from 'tap';
import { testStack, post, get, eventually, chRows, afterMarker } from '../helpers/stack.js';

const s = await testStack(t, 'e2e');
const ingest = (m: string, sw: string, kind: string) => s.ingestUrl(m, kind, { software: sw });

t.test('heartbeat: 200 {ok:true}, then listed green with its last-seen time', async (t) => {
  const r = await post(ingest('m1', 'agent', 'heartbeat'), s.token, {});
  t.equal(r.status, 200);
  t.same(r.body, { ok: true });
  const list = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances`, s.token);
    return l.body.items?.length === 1 ? l.body : null;
  }, 2000, 'instance listed within 2 s');
  const i = list.items[0];
  t.equal(i.machine, 'm1');
  t.equal(i.software, 'agent');
  t.equal(i.light, 'green');
  t.ok(Date.parse(i.last_seen_at) > Date.now() - 10_000, 'last seen just now');
  t.ok(i.last_heartbeat_at);
  // The worker commits Postgres before it writes the Redis key (workers/apply-batch.ts): an
  // instance listed green may not have its key yet (PTTL -2). Wait for the key, not for luck.
  const key = await eventually(async () => {
    const ms = await s.redis.pttl(`${s.env.REDIS_PREFIX}hb:${i.id}`);
    return ms > 0 ? ms : null;
  }, 5000, 'heartbeat key written');
  t.ok(key > 290_000 && key <= 300_000, `heartbeat key expires in about 300 s (${key} ms)`);
});

t.test('heartbeat fields (5.7.0 and older) are stored in Postgres and ClickHouse', async (t) => {
  const body = {
    ts: '2026-11-22T10:00:00Z',
    version: '5.7.0',
    uptime_seconds: 3600,
    pid: 4242,
    ip_addresses: ['10.0.0.1', 'fe80::1'],
    group: 'line-1',
    location: 'hall A',
    group_priority: '3',
    sort_priority: 7,
    unknown_field: 'ignored',
  };
  t.equal((await post(ingest('m2', 'agent', 'heartbeat'), s.token, body)).status, 200);
  t.equal((await post(ingest('m3', 'agent', 'heartbeat'), s.token, { version: '5.6.0', uptime_seconds: 1 })).status, 200);
  const i = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances?machine=m2`, s.token);
    return l.body.items?.[0];
  });
  t.match(i, { version: '5.7.0', uptime_seconds: 3600, pid: 4242, ip_addresses: ['10.0.0.1', 'fe80::1'], group: 'line-1', location: 'hall A', group_priority: 3, sort_priority: 7 });
  const rows = await eventually(async () => {
    const r = await chRows<Record<string, unknown>>(s.ch, `SELECT * FROM heartbeats FINAL WHERE machine = 'm2'`);
    return r.length === 1 ? r : null;
  });
  t.match(rows[0], { version: '5.7.0', group_name: 'line-1', location: 'hall A', ts_ms: String(Date.parse('2026-11-22T10:00:00Z')) });
  // Characters the row format must escape arrive intact; what Postgres cannot store is refused (422).
  const nul = await post(ingest('m2b', 'agent', 'heartbeat'), s.token, { group: 'g\u0000' });
  t.equal(nul.status, 422, 'a NUL is refused, not stripped');
  t.same(nul.body.errors?.map((e: { path: string }) => e.path), ['/group']);
  const odd = { version: 'v\t1\n"\\x\'', ip_addresses: ["a'b", 'c\td', 'e\\f'], group: 'g\u00e9\u{1F600}' };
  t.equal((await post(ingest('m2b', 'agent', 'heartbeat'), s.token, odd)).status, 200);
  const back = await eventually(async () => (await chRows<{ version: string; ip_addresses: string[]; group_name: string }>(s.ch, `SELECT version, ip_addresses, group_name FROM heartbeats FINAL WHERE machine = 'm2b'`))[0]);
  t.same(back, { version: odd.version, ip_addresses: odd.ip_addresses, group_name: odd.group }, 'escaped and unescaped exactly');
  const old = await eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=m3`, s.token)).body.items?.[0]);
  t.equal(old.version, '5.6.0');
  t.equal(old.group, null);
});

t.test('diagnostics are stored and listed newest first; a warning turns the light yellow', async (t) => {
  const items = [
    { code: 100, message: 'all fine', severity: 0 },
    { code: 200, message: 'disk almost full', severity: 1 },
  ];
  t.equal((await post(ingest('m4', 'agent', 'heartbeat'), s.token, {})).status, 200);
  const r = await post(ingest('m4', 'agent', 'diagnostics'), s.token, { items });
  t.equal(r.status, 202, 'accepted; no help texts for these codes yet');
  t.same(r.body, { ok: true, missing_help: [{ code: 100, langs: ['de', 'en'] }, { code: 200, langs: ['de', 'en'] }] });
  const inst = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances?machine=m4`, s.token);
    return l.body.items?.[0]?.light === 'yellow' ? l.body.items[0] : null;
  });
  t.equal(inst.light_reason.startsWith('warning'), true);
  const diags = await eventually(async () => {
    const d = await get(`${s.apiUrl}/api/instances/${inst.id}/diagnostics`, s.token);
    return d.body.items?.length === 2 ? d.body.items : null;
  });
  t.same(
    diags.map((d: { code: number; severity: number; message: string }) => [d.code, d.severity, d.message]).sort(),
    [[100, 0, 'all fine'], [200, 1, 'disk almost full']],
  );
  const sev1 = await get(`${s.apiUrl}/api/instances/${inst.id}/diagnostics?severity=1`, s.token);
  t.equal(sev1.body.items.length, 1);
});

t.test('status with a snapshot: latest in Postgres, history in ClickHouse, colours', async (t) => {
  const snapshot = { cpu: { load: 0.5, cores: 4 }, disks: [{ name: 'sda', free: 10 }], ok: true, text: 'unicode \u{1F600} survives' };
  t.equal((await post(ingest('m5', 'edr', 'heartbeat'), s.token, {})).status, 200);
  // What Postgres refuses in jsonb (NUL, a lone surrogate) is refused at the gateway, with its path.
  const bad = await post(ingest('m5', 'edr', 'status'), s.token, { status: 'running', snapshot: { a: { 'k\u0000': 1 }, b: ['x', '\ud800'] } });
  t.equal(bad.status, 422);
  t.same(bad.body.errors?.map((e: { path: string }) => e.path).sort(), ['/snapshot/a/k\u0000', '/snapshot/b/1']);
  t.equal((await post(ingest('m5', 'edr', 'status'), s.token, { status: 'running', message: 'fine', snapshot })).status, 200);
  const id = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances?machine=m5`, s.token);
    return l.body.items?.[0]?.status === 'running' ? l.body.items[0].id : null;
  });
  const detail = await get(`${s.apiUrl}/api/instances/${id}`, s.token);
  t.equal(detail.status, 200);
  t.same(detail.body.snapshot.cpu, snapshot.cpu);
  t.same(detail.body.snapshot.disks, snapshot.disks);
  t.equal(detail.body.status_message, 'fine');

  t.equal((await post(ingest('m5', 'edr', 'status'), s.token, { status: 'degraded' })).status, 200);
  await eventually(async () => (await get(`${s.apiUrl}/api/instances/${id}`, s.token)).body.light === 'yellow', 5000, 'yellow on degraded');
  t.equal((await post(ingest('m5', 'edr', 'status'), s.token, { status: 'error', message: 'boom' })).status, 200);
  await eventually(async () => (await get(`${s.apiUrl}/api/instances/${id}`, s.token)).body.light === 'red', 5000, 'red on error');
  t.equal((await post(ingest('m5', 'edr', 'status'), s.token, { status: 'stopped' })).status, 200);
  await eventually(async () => (await get(`${s.apiUrl}/api/instances/${id}`, s.token)).body.light === 'grey', 5000, 'grey on stopped');

  const hist = await eventually(async () => {
    const r = await chRows<{ status: string; snapshot: string }>(s.ch, `SELECT status, snapshot FROM status_history FINAL WHERE instance_id = '${id}' ORDER BY received_ms`);
    return r.length === 4 ? r : null;
  });
  t.same(hist.map((h) => h.status), ['running', 'degraded', 'error', 'stopped']);
  t.same(JSON.parse(hist[0]!.snapshot).cpu, snapshot.cpu);
});

t.test('an instance that only reported status is grey (never sent a heartbeat)', async (t) => {
  t.equal((await post(ingest('m6', 'agent', 'status'), s.token, { status: 'running' })).status, 200);
  const i = await eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=m6`, s.token)).body.items?.[0]);
  t.equal(i.light, 'grey');
  const grey = await get(`${s.apiUrl}/api/instances?light=grey`, s.token);
  t.ok(grey.body.items.some((x: { machine: string }) => x.machine === 'm6'));
  t.notOk(grey.body.items.some((x: { light: string }) => x.light !== 'grey'));
});

t.test('Idempotency-Key: the same report sent again is acknowledged and stored once', async (t) => {
  const url = ingest('m7', 'agent', 'diagnostics');
  const body = { items: [{ code: 1, message: 'once', severity: 0 }] };
  for (let i = 0; i < 3; i++) {
    const r = await post(url, s.token, body, { 'Idempotency-Key': 'retry-42' });
    t.equal(r.status, 202, 'accepted (202: no help text for code 1)');
  }
  // Concurrent copies too.
  const rs = await Promise.all([1, 2, 3].map(() => post(url, s.token, body, { 'Idempotency-Key': 'retry-43' })));
  t.same(rs.map((r) => r.status), [202, 202, 202]);
  await eventually(async () => {
    const r = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM diagnostics FINAL WHERE machine = 'm7'`);
    return Number(r[0]!.n) === 2;
  }, 5000, 'two diagnostics rows (one per key)');
  // A marker: one more diagnostic of m7, without a key, sent after every copy was answered.
  // afterMarker waits until it and everything queued before it is applied, so a copy stored under an
  // id of its own would show here as a fourth row.
  await afterMarker(s, 'm7', { kind: 'diagnostics', body });
  const r = await chRows<{ n: string; u: string }>(s.ch, `SELECT count() AS n, uniqExact(report_id) AS u FROM diagnostics FINAL WHERE machine = 'm7'`);
  t.equal(Number(r[0]!.n), 3, 'one row per key, and the marker');
  t.equal(Number(r[0]!.u), 3);
});

t.test('read API: unknown instance 404, ill-formed id 400, no credentials 401', async (t) => {
  t.equal((await get(`${s.apiUrl}/api/instances/00000000-0000-4000-8000-000000000000`, s.token)).status, 404);
  const bad = await get(`${s.apiUrl}/api/instances/not-a-uuid`, s.token);
  t.equal(bad.status, 400);
  t.type(bad.body.detail, 'string');
  const none = await get(`${s.apiUrl}/api/instances`, null);
  t.equal(none.status, 401);
  t.type(none.body.detail, 'string');
  const unknown = await get(`${s.apiUrl}/api/nothing-here`, s.token);
  t.equal(unknown.status, 404);
  t.type(unknown.body.detail, 'string');
});

t.test("another customer's token sees none of this customer's instances", async (t) => {
  const other = await s.newCustomer('other');
  const l = await get(`${s.apiUrl}/api/instances`, other.token);
  t.equal(l.status, 200);
  t.same(l.body.items, []);
  const mine = await get(`${s.apiUrl}/api/instances`, s.token);
  const id = mine.body.items[0].id;
  t.equal((await get(`${s.apiUrl}/api/instances/${id}`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/diagnostics`, other.token)).status, 404);
});

t.test('health, readiness and metrics', async (t) => {
  t.equal((await get(`${s.gatewayUrl}/healthz`, null)).status, 200);
  t.equal((await get(`${s.gatewayUrl}/readyz`, null)).status, 200);
  const m = await fetch(`${s.gatewayUrl}/metrics`);
  t.equal(m.status, 200);
  t.match(await m.text(), /fleet_gateway_responses_total\{[^}]*kind="heartbeat"[^}]*status="200"/);
  t.equal((await get(`${s.apiUrl}/readyz`, null)).status, 200);
});
