// The api's reads of ClickHouse (diagnostics, status history, colour events, the rejection log)
// while ClickHouse is away: 503 with Retry-After and a {"detail"} naming it, never 500. A 500 says
// "our bug, do not retry"; an outage says "ask again". Found in the cluster tests, where a replica
// killed during a distributed read answered with a DB::NetException the classifier did not read,
// and every read error (even a server that refused the connection) was a 500. Here: a table
// detached (code 60), and an api whose ClickHouse refuses connections. Afterwards the same reads
// answer 200 with the rows stored before.
import t, { type Test } from 'tap';
import { testStack, post, get, eventually, chRows } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';

const s = await testStack(t, 'apichaway');
const db = `t_${s.id}`;

const reads = (id: string) => [
  `/api/instances/${id}/diagnostics`,
  `/api/instances/${id}/status/history`,
  `/api/instances/${id}/events`,
  `/api/ingest-rejections`,
];

async function setUp(t: Test): Promise<string> {
  const d = await post(s.ingestUrl('away-1', 'diagnostics'), s.token, { items: [{ code: 7, severity: 1, message: 'disk' }] });
  t.equal(d.status, 202, `diagnostics accepted (202: code 7 has no help text): ${JSON.stringify(d.body)}`);
  const st = await post(s.ingestUrl('away-1', 'status'), s.token, { status: 'running' });
  t.equal(st.status, 200, `status accepted: ${JSON.stringify(st.body)}`);
  const id = await eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=away-1`, s.token)).body.items?.[0]?.id as string | undefined, 20_000, 'the instance');
  await eventually(async () => (await chRows(s.ch, `SELECT 1 FROM diagnostics FINAL WHERE machine = 'away-1'`)).length === 1, 20_000, 'its diagnostic stored');
  return id;
}

t.test('a table detached: its read answers 503 with Retry-After, the others 200; attached again, 200 with the rows', async (t) => {
  const id = await setUp(t);
  await s.ch.command({ query: `DETACH TABLE ${db}.diagnostics` });
  let attached = false;
  t.teardown(async () => {
    if (!attached) await s.ch.command({ query: `ATTACH TABLE ${db}.diagnostics` });
  });
  const r = await get(`${s.apiUrl}/api/instances/${id}/diagnostics`, s.token);
  t.equal(r.status, 503, 'diagnostics: 503');
  t.ok(Number(r.headers.get('retry-after')) > 0, 'with Retry-After');
  t.match(r.body, { detail: /clickhouse unavailable/ }, '{"detail"} names ClickHouse');
  t.notMatch(JSON.stringify(r.body), /heartbeats|diagnostics|DB::|Code:/, "no server text (it could quote another customer's rows)");
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/status/history`, s.token)).status, 200, 'status history (another table): 200');
  await s.ch.command({ query: `ATTACH TABLE ${db}.diagnostics` });
  attached = true;
  const back = await get(`${s.apiUrl}/api/instances/${id}/diagnostics`, s.token);
  t.equal(back.status, 200, 'attached again: 200');
  t.same(back.body.items.map((x: { code: number; message: string }) => [x.code, x.message]), [[7, 'disk']], 'with the row stored before');
});

t.test('ClickHouse refusing connections: every read of it answers 503 with Retry-After; Postgres reads go on', async (t) => {
  const id = (await get(`${s.apiUrl}/api/instances?machine=away-1`, s.token)).body.items[0].id as string;
  // Nothing listens on this port (freePort closed it): connection refused.
  const api = await s.startApi({ CLICKHOUSE_URL: `http://127.0.0.1:${await freePort()}` });
  t.teardown(() => api.proc.stop('SIGKILL'));
  for (const path of reads(id)) {
    const r = await get(`${api.url}${path}`, s.token);
    t.equal(r.status, 503, `${path}: 503`);
    t.ok(Number(r.headers.get('retry-after')) > 0, `${path}: Retry-After`);
    t.match(r.body, { detail: /clickhouse unavailable/ }, `${path}: {"detail"} names ClickHouse`);
  }
  const list = await get(`${api.url}/api/instances?machine=away-1`, s.token);
  t.equal(list.status, 200, 'the instance list (Postgres): 200');
  for (const path of reads(id)) t.equal((await get(`${s.apiUrl}${path}`, s.token)).status, 200, `${path} on the api with ClickHouse: 200`);
});
