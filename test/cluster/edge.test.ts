// The cluster topology (deploy/cluster.ts, `npm run cluster`): agents and the dashboard over HTTPS
// through nginx, the live stream (SSE) through nginx, the client address the services log taken
// from the one trusted hop; then kill -9 of the JetStream stream leader during steady ingest.
import t from 'tap';
import { fetch as undiciFetch } from 'undici';
import { eventually } from '../helpers/stack.js';
import { testCluster, steadyIngest, storedOnce } from '../helpers/cluster.js';
import { NATS_REQUIRED, versionBelow } from '../../lib/infra/nats.js';

const k = await testCluster(t, 'edge');
const slug = k.customer.slug;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('the migration 0006-day-partitions ran ON CLUSTER: both replicas partition heartbeats and rejections by day, no interim table left', async (t) => {
  for (const i of [0, 1]) {
    const rows = (await (await k.replica(i).query({ query: "SELECT name, create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name LIKE '%heartbeats%' OR database = currentDatabase() AND name LIKE '%ingest_rejections%' ORDER BY name", format: 'JSONEachRow' })).json()) as { name: string; q: string }[];
    t.same(rows.map((r) => r.name), ['heartbeats', 'heartbeats_local', 'heartbeats_v', 'ingest_rejections', 'ingest_rejections_local', 'ingest_rejections_v'], `replica ${i}: the tables, no _by_day or _by_month`);
    for (const r of rows.filter((x) => x.name.endsWith('_local'))) t.match(r.q, /ReplicatedReplacingMergeTree\('\/clickhouse\/tables\/\{shard\}\/\w+\/\w+_by_day'.*PARTITION BY toYYYYMMDD\(received_at\)/s, `replica ${i}: ${r.name} by day`);
  }
  t.equal((await k.pool.query('SELECT count(*)::int AS n FROM clickhouse_repartitions')).rows[0].n, 0, 'no repartition under way');
});

t.test('agents over HTTPS through nginx: 200 after JetStream, then readable through the api', async (t) => {
  const r = await k.https('POST', `/api/ingest/${slug}/tls-m1/agent/heartbeat`, k.token, {});
  t.equal(r.status, 200);
  t.same(r.body, { ok: true });
  t.match(r.headers.get('strict-transport-security'), /max-age=/, 'HSTS from nginx');
  const list = await eventually(async () => {
    const a = await k.https('GET', '/api/instances', k.token);
    return a.status === 200 && (a.body.items as { machine: string }[]).some((i) => i.machine === 'tls-m1') ? a : null;
  }, 60_000, 'the instance listed through the api');
  t.equal(list.status, 200);
  // Real TLS: without the cluster's certificate among the trusted ones the connection is refused.
  await t.rejects(undiciFetch(`${k.c.url}/api/instances`), 'an untrusted certificate is refused');
});

t.test("the dashboard's live stream (SSE) through nginx", async (t) => {
  const s = await k.stream('/api/fleet/stream', k.token);
  t.teardown(() => s.close());
  t.equal(s.status, 200);
  t.match(s.headers.get('content-type'), /^text\/event-stream/);
  // A new instance turns green: the change reaches this stream through nginx, unbuffered, from
  // whichever api nginx chose (every api hears every change over NATS).
  await eventually(async () => {
    const r = await k.https('POST', `/api/ingest/${slug}/sse-m1/agent/heartbeat`, k.token, {});
    return r.status === 200;
  }, 30_000, 'heartbeat accepted');
  const lights = () =>
    s
      .text()
      .split('\n\n')
      .filter((b) => b.includes('event: light'))
      .map((b) => JSON.parse(b.split('\n').find((l) => l.startsWith('data: '))!.slice(6)) as { machine: string; to: string });
  const ev = await eventually(async () => lights().find((e) => e.machine === 'sse-m1'), 60_000, 'the light event of sse-m1 on the stream');
  t.equal(ev.to, 'green', 'the change to green');
});

t.test('the rejection log names the client address from the trusted hop, never a forged X-Forwarded-For', async (t) => {
  // The client connects from 127.0.0.2 and claims 203.0.113.9; nginx (127.0.0.1, the one trusted
  // hop) appends the address it saw.
  const r = await k.https('POST', `/api/ingest/${slug}/spoof-m1/agent/heartbeat`, 'not-a-token', {}, { 'X-Forwarded-For': '203.0.113.9' }, '127.0.0.2');
  t.equal(r.status, 403, 'an unknown token');
  const rows = await eventually(async () => {
    const rs = await k.ch.query({ query: `SELECT remote FROM ingest_rejections FINAL WHERE path LIKE '%/spoof-m1/%'`, format: 'JSONEachRow' });
    const got = (await rs.json()) as { remote: string }[];
    return got.length > 0 ? got : null;
  }, 60_000, 'the rejection logged');
  t.same(rows.map((x) => x.remote), ['127.0.0.2']);
});

t.test('kill -9 of the stream leader during steady ingest: a new leader, ingest goes on, every acknowledged report stored once', async (t) => {
  const load = steadyIngest(k, 'lk');
  let stopped = false;
  t.teardown(async () => {
    if (!stopped) await load.stop();
  });
  await eventually(async () => load.acked.length > 200, 60_000, 'ingest under way');
  const leader = await k.streamLeader();
  const node = k.c.nats.find((n) => n.name === `nats-server ${leader}`)!;
  t.ok(node, `the leader ${leader} is one of the three`);
  const killedAt = Date.now();
  await node.kill9();
  const newLeader = await eventually(async () => {
    const l = await k.streamLeader().catch(() => '');
    return l && l !== leader ? l : null;
  }, 90_000, 'a new stream leader');
  t.not(newLeader, leader, `new leader ${newLeader}`);
  await eventually(async () => load.ackedSince(killedAt) > 200, 120_000, 'ingest continues after the kill');
  // The killed server comes back on its data and catches up; ingest goes on meanwhile.
  await node.start();
  const back = Date.now();
  await eventually(async () => load.ackedSince(back) > 100, 120_000, 'ingest continues with the server back');
  await sleep(500);
  await load.stop();
  stopped = true;
  const gap = load.longestGap(killedAt - 1);
  t.comment(`leader ${leader} killed; new leader ${newLeader}; longest time without an acknowledged report from the kill on: ${gap} ms; answers: ${load.summary()}`);
  t.same(load.bad(), [], 'no 5xx other than 503 with Retry-After, no broken connection');
  const end = await eventually(async () => {
    const r = await storedOnce(k, load.acked, 'lk');
    return r.missing.length === 0 ? r : null;
  }, 120_000, 'every acknowledged report stored').catch(async (e) => {
    const r = await storedOnce(k, load.acked, 'lk');
    t.fail(`${String(e)}: ${r.missing.length} of ${load.acked.length} missing (${r.missing.slice(0, 5).join(', ')})`);
    return r;
  });
  // Raw rows (helpers/cluster.ts). An ack the killed leader had not replicated is lost, so its
  // message is applied again: copies of one report are allowed (docs/architecture.md); a second
  // report for one request is not, and no merge hides it.
  t.same(end.split, [], 'no request stored as two reports');
  t.comment(`${load.acked.length} acknowledged, ${end.missing.length} lost, ${end.doubled.length} with raw copies of one report not merged yet`);
  const file = k.record('stream_leader_kill', {
    failure: 'kill -9 of the JetStream stream leader (of 3 servers) during steady ingest through nginx (6 agents)',
    leader,
    new_leader: newLeader,
    longest_gap_ms: gap,
    ingest_answers: load.counts(),
    ingest_bad: load.bad(),
    acknowledged: load.acked.length,
    lost: end.missing.length,
    split: end.split.length,
    raw_copies: end.doubled.length,
  });
  t.comment(`figures kept in ${file}`);
});

t.test('every process warns once about an old NATS server it finds, and not about the replicas (R3)', async (t) => {
  const procs = [...k.c.gateways, ...k.c.workers, ...k.c.apis].filter((p) => p !== null);
  t.equal(procs.length, 6);
  const old = versionBelow(k.nc.info!.version, NATS_REQUIRED.version);
  for (const p of procs) {
    const warnings = () => p.lines.filter((l) => String(l.msg).startsWith('NATS durability below the production requirement'));
    // Each logs its start-up lines before it serves (and it has served by now).
    await p.waitFor((l) => l.msg === 'listening' || l.msg === 'consuming', 30_000);
    if (!old) {
      t.same(warnings(), [], `${p.name}: nats-server ${k.nc.info!.version} at R3 meets the requirement`);
      continue;
    }
    await p.waitFor((l) => String(l.msg).startsWith('NATS durability below the production requirement'), 60_000);
    t.equal(warnings().length, 1, `${p.name}: once`);
    t.equal(warnings()[0]?.stream_replicas, 3, `${p.name}: the stream at R3`);
    t.notMatch(String(warnings()[0]?.msg), /replica/, `${p.name}: names only the server's version`);
  }
});
