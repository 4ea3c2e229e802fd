// Postgres writes follow changes, not reports (docs/architecture.md "Where an instance's state
// lives"), through the real processes: steady heartbeats of known instances write (almost) no
// Postgres rows, yet the api shows each instance's newest heartbeat, uptime and agent time exactly;
// a changed field and a status report reach Postgres at once; two customers with the same machine
// names stay apart; and with PG_HEARTBEAT_INTERVAL_S short, the flusher brings Postgres up to date.
import t from 'tap';
import { testStack, eventually, chRows, type TestStack } from '../helpers/stack.js';
import { get } from '../helpers/http.js';

const s = await testStack(t, 'pgwrites');
const owner = await s.newUser('owner');

/** Each instance row's version (xmin): any write to a row, however small, changes it. */
async function rowVersions(st: TestStack): Promise<Map<string, string>> {
  const r = await st.pool.query<{ id: string; v: string }>(`SELECT id, xmin::text AS v FROM instances`);
  return new Map(r.rows.map((x) => [x.id, x.v]));
}
const receivedMs = async (st: TestStack, machine: string) =>
  (await chRows<{ ms: string }>(st.ch, `SELECT max(received_ms) AS ms FROM heartbeats FINAL WHERE machine = '${machine}' AND customer_id = '${st.customer.id}'`)).map((r) => Number(r.ms))[0] ?? 0;
const apiInstance = async (machine: string, jwt = owner.jwt) => {
  const r = await get(`${s.apiUrl}/api/instances?machine=${machine}`, jwt);
  return r.body.items[0];
};

t.test('20 instances x 10 unchanged heartbeats: Postgres writes only the first of each; the api shows the last exactly', async (t) => {
  const machines = Array.from({ length: 20 }, (_, i) => `pw-${i}`);
  const send = (round: number) =>
    Promise.all(machines.map((m) => s.report(m, 'heartbeat', { version: '1.0', uptime_seconds: round, ts: new Date().toISOString() })));
  for (const r of await send(0)) t.equal(r.status, 200);
  await eventually(async () => (await s.pool.query(`SELECT count(*)::int AS n FROM instances WHERE last_heartbeat_at IS NOT NULL`)).rows[0].n === 20, 15_000, 'first heartbeats written');
  const before = await rowVersions(s);
  for (let round = 1; round <= 9; round++) for (const r of await send(round)) t.equal(r.status, 200);
  // Every heartbeat stored in ClickHouse ...
  await eventually(async () => (await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE machine LIKE 'pw-%'`))[0]!.n === '200', 15_000, '200 heartbeat rows');
  const after = await rowVersions(s);
  const written = [...after].filter(([id, v]) => before.get(id) !== v).length;
  t.equal(written, 0, 'Postgres: no instance row written for 180 unchanged heartbeats');
  // ... and the api shows the newest, exact.
  for (const m of machines.slice(0, 5)) {
    const i = await apiInstance(m);
    t.equal(Date.parse(i.last_heartbeat_at), await receivedMs(s, m), `${m}: last heartbeat exact`);
    t.equal(i.uptime_seconds, 9, `${m}: uptime of the newest`);
    t.equal(i.light, 'green');
  }
});

t.test('a changed field and a status report reach Postgres (and the api) at once', async (t) => {
  t.equal((await s.report('pw-0', 'heartbeat', { version: '2.0' })).status, 200);
  await eventually(async () => (await s.pool.query(`SELECT version FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.slug = 'pw-0'`)).rows[0].version === '2.0', 10_000, 'version 2.0 in Postgres');
  t.equal((await apiInstance('pw-0')).version, '2.0');
  t.equal((await s.report('pw-1', 'status', { status: 'degraded', message: 'disk' })).status, 200);
  await eventually(async () => (await apiInstance('pw-1')).light === 'yellow', 10_000, 'yellow');
});

t.test('two customers, same machine names: each sees its own newest heartbeat', async (t) => {
  const other = await s.newCustomer('pw-other');
  const otherUser = await s.newUser('owner', { customer: other.customer });
  for (let round = 0; round < 3; round++) {
    const [a, b] = await Promise.all([
      s.report('pw-shared', 'heartbeat', { uptime_seconds: round }),
      s.report('pw-shared', 'heartbeat', { uptime_seconds: 100 + round }, { customer: other.customer.slug, token: other.token }),
    ]);
    t.equal(a.status, 200);
    t.equal(b.status, 200);
  }
  await eventually(async () => (await apiInstance('pw-shared'))?.uptime_seconds === 2, 10_000, 'mine');
  await eventually(async () => (await apiInstance('pw-shared', otherUser.jwt))?.uptime_seconds === 102, 10_000, 'theirs');
  t.not((await apiInstance('pw-shared')).id, (await apiInstance('pw-shared', otherUser.jwt)).id);
});

t.test('PG_HEARTBEAT_INTERVAL_S=1: the flusher brings Postgres up to date within about a second', async (t) => {
  const f = await testStack(t, 'pgflush', { env: { PG_HEARTBEAT_INTERVAL_S: '1' } });
  t.equal((await f.report('pf-1', 'heartbeat', { uptime_seconds: 1 })).status, 200);
  await eventually(async () => (await f.pool.query(`SELECT 1 FROM instances`)).rowCount === 1, 30_000, 'written');
  t.equal((await f.report('pf-1', 'heartbeat', { uptime_seconds: 2 })).status, 200);
  const last = await eventually(async () => (await chRows<{ ms: string }>(f.ch, `SELECT received_ms AS ms FROM heartbeats FINAL WHERE uptime_seconds = 2`))[0]?.ms, 30_000, 'stored');
  await eventually(
    async () => {
      const r = await f.pool.query(`SELECT round(extract(epoch FROM last_heartbeat_at) * 1000)::float8 AS ms, uptime_seconds FROM instances`);
      return Number(r.rows[0].ms) === Number(last) && r.rows[0].uptime_seconds === 2;
    },
    5_000,
    'Postgres holds the newest heartbeat',
  );
});
