// Status snapshots: the full tree is kept for every software (security agents included), latest in
// Postgres, history in ClickHouse; typed leaves (5.10.0) are checked at the gateway (422 when a
// known type's value does not fit) and resolved by GET /api/instances/{id}/status and /status/history;
// untyped leaves and pre-5.10 payloads come back exactly as sent.
import t from 'tap';
import { testStack, post, get, eventually, chRows } from '../helpers/stack.js';

const s = await testStack(t, 'snapshots');
const c = s.customer.slug;
const ingest = (m: string, sw: string, kind: string) => `${s.gatewayUrl}/api/ingest/${c}/${m}/${sw}/${kind}`;

async function instanceId(machine: string, software: string): Promise<string> {
  return eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=${machine}&software=${software}`, s.token)).body.items?.[0]?.id, 5000, 'instance');
}

const mixed = {
  cpu: { usage: { value: 87.5, type: 'percent', label: 'CPU usage', hint: 'over 90 % for long: add cores' }, cores: 8 },
  memory: { total: { value: 17179869184, type: 'bytes', label: 'RAM' }, free_mb: 2048 },
  uptime: { value: 93784, type: 'duration_s' },
  last_update: { value: '2026-07-01T12:00:00Z', type: 'timestamp', label: 'Signatures' },
  mode: { value: 'enforcing', type: 'enum', options: ['enforcing', 'permissive'] },
  sensor: { value: [1, 2, 3], type: 'histogram-v9', unit: 'ms' },
  legacy: { value: 'no type here', note: 'kept' },
  disks: [{ name: 'sda', free: { value: 1073741824, type: 'bytes' } }, { name: 'sdb', free: 5 }],
  flags: [true, false, null],
  text: 'plain',
};

t.test('a snapshot with mixed typed and untyped leaves round-trips; /status resolves typed leaves', async (t) => {
  t.equal((await post(ingest('m1', 'agent', 'status'), s.token, { status: 'running', message: '5.10 agent', snapshot: mixed })).status, 200);
  const id = await instanceId('m1', 'agent');
  const raw = await eventually(async () => (await get(`${s.apiUrl}/api/instances/${id}`, s.token)).body.snapshot, 5000, 'snapshot stored');
  t.same(raw, mixed, 'stored exactly as sent (latest, Postgres)');
  const hist = await eventually(async () => (await chRows<{ snapshot: string }>(s.ch, `SELECT snapshot FROM status_history FINAL WHERE instance_id = '${id}'`))[0], 5000, 'history row');
  t.same(JSON.parse(hist.snapshot), mixed, 'stored exactly as sent (history, ClickHouse)');

  const st = await get(`${s.apiUrl}/api/instances/${id}/status`, s.token);
  t.equal(st.status, 200);
  t.match(st.body, { instance_id: id, status: 'running', message: '5.10 agent' });
  const snap = st.body.snapshot;
  t.same(snap.cpu.usage, { value: 87.5, type: 'percent', unit: '%', label: 'CPU usage', hint: 'over 90 % for long: add cores', display: '87.5 %' });
  t.equal(snap.cpu.cores, 8, 'untyped leaf unchanged');
  t.same(snap.memory.total, { value: 17179869184, type: 'bytes', unit: 'B', label: 'RAM', hint: null, display: '16 GiB' });
  t.equal(snap.memory.free_mb, 2048);
  t.match(snap.uptime, { type: 'duration_s', unit: 's', display: '1 d 2 h' });
  t.match(snap.last_update, { type: 'timestamp', label: 'Signatures', display: '2026-07-01T12:00:00.000Z' });
  t.match(snap.mode, { value: 'enforcing', type: 'enum', display: 'enforcing' });
  t.same(snap.sensor, mixed.sensor, 'unknown type kept as it is');
  t.same(snap.legacy, mixed.legacy, 'an object with value but no type is not a typed leaf');
  t.match(snap.disks, [{ name: 'sda', free: { display: '1 GiB' } }, { name: 'sdb', free: 5 }]);
  t.same(snap.flags, [true, false, null]);
  t.equal(snap.text, 'plain');
});

t.test('a pre-5.10 payload is stored and shown unchanged', async (t) => {
  const old = { service: { state: 'ok', threads: 12, queues: [{ name: 'a', depth: 0 }] }, version: '5.9.3', enabled: true };
  t.equal((await post(ingest('m2', 'agent', 'status'), s.token, { status: 'degraded', snapshot: old })).status, 200);
  const id = await instanceId('m2', 'agent');
  const st = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/instances/${id}/status`, s.token);
    return r.body.status === 'degraded' ? r.body : null;
  }, 5000, 'status');
  t.same(st.snapshot, old);
  t.equal(st.message, '');
  t.same((await get(`${s.apiUrl}/api/instances/${id}`, s.token)).body.snapshot, old);
});

t.test('a typed leaf whose value does not fit its known type: 422 with the path', async (t) => {
  const cases: [unknown, string][] = [
    [{ cpu: { value: 'high', type: 'percent' } }, '/snapshot/cpu/value'],
    [{ disks: [{ free: { value: -5, type: 'bytes' } }] }, '/snapshot/disks/0/free/value'],
    [{ at: { value: 'last tuesday', type: 'timestamp' } }, '/snapshot/at/value'],
    [{ mode: { value: 'chaos', type: 'enum', options: ['on', 'off'] } }, '/snapshot/mode/value'],
    [{ n: { value: 1, type: 'integer', label: 42 } }, '/snapshot/n/label'],
  ];
  for (const [snapshot, path] of cases) {
    const r = await post(ingest('m3', 'agent', 'status'), s.token, { status: 'running', snapshot });
    t.equal(r.status, 422, path);
    t.match(r.body.detail, /typed snapshot leaf/);
    t.ok(r.body.errors.some((e: { path: string }) => e.path === path), `${path} named: ${JSON.stringify(r.body.errors)}`);
  }
});

t.test("a security agent's full snapshot is stored, latest and history", async (t) => {
  const big = {
    engine: { version: '4.12.2', signatures: { value: '2026-07-01T00:00:00Z', type: 'timestamp' } },
    realtime: { enabled: true, exclusions: Array.from({ length: 200 }, (_, i) => `/opt/app${i}/**`) },
    quarantine: { items: Array.from({ length: 50 }, (_, i) => ({ path: `C:\\Users\\u${i}\\evil.exe`, sha256: 'ab'.repeat(32), at: '2026-07-01T00:00:00Z' })) },
    modules: { firewall: { rules: 1200, mode: { value: 'block', type: 'enum' }, commands: [{ name: 'rescan', label: 'Rescan' }] } },
    deep: JSON.parse('{"a":'.repeat(20) + '1' + '}'.repeat(20)),
  };
  for (const status of ['running', 'degraded']) {
    t.equal((await post(ingest('m4', 'security-agent', 'status'), s.token, { status, message: `edr ${status}`, snapshot: big })).status, 200);
  }
  const id = await instanceId('m4', 'security-agent');
  const latest = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/instances/${id}`, s.token);
    return r.body.status === 'degraded' ? r.body : null;
  }, 5000, 'latest status');
  t.same(latest.snapshot, big, 'latest kept whole');
  const hist = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/instances/${id}/status/history`, s.token);
    return r.body.items?.length === 2 ? r.body.items : null;
  }, 5000, 'two history entries');
  t.same(hist.map((h: { status: string }) => h.status), ['degraded', 'running'], 'newest first');
  t.equal(hist[1].message, 'edr running');
  t.equal(hist[0].snapshot.quarantine.items.length, 50);
  t.same(hist[0].snapshot.deep, big.deep);
  t.match(hist[0].snapshot.engine.signatures, { type: 'timestamp', display: '2026-07-01T00:00:00.000Z' }, 'history resolves typed leaves too');
  const lean = await get(`${s.apiUrl}/api/instances/${id}/status/history?snapshot=false&limit=1`, s.token);
  t.equal(lean.body.items.length, 1);
  t.equal(lean.body.items[0].snapshot, null, 'snapshot=false leaves them out');
  const future = await get(`${s.apiUrl}/api/instances/${id}/status/history?from=2099-01-01T00:00:00Z`, s.token);
  t.same(future.body.items, []);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/status/history?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z`, s.token)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/status/history?limit=0`, s.token)).status, 400);
});

t.test('status endpoints: no status yet, unknown and foreign instances, ill-formed ids', async (t) => {
  t.equal((await post(ingest('m5', 'agent', 'heartbeat'), s.token, {})).status, 200);
  const id = await instanceId('m5', 'agent');
  const st = await get(`${s.apiUrl}/api/instances/${id}/status`, s.token);
  t.same(st.body, { instance_id: id, status: null, message: null, status_at: null, snapshot: null });
  t.same((await get(`${s.apiUrl}/api/instances/${id}/status/history`, s.token)).body, { items: [] });
  const other = await s.newCustomer('nosy');
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/status`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/status/history`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/instances/nope/status`, s.token)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/status`, null)).status, 401);
});
