// The cluster topology (deploy/cluster.ts, `npm run cluster`): agents and the dashboard over HTTPS
// through nginx, the live stream (SSE) through nginx, the client address the services log taken
// from the one trusted hop; three ingest partitions led by three servers, then kill -9 of one
// partition's leader during steady ingest.
import t from 'tap';
import { fetch as undiciFetch } from 'undici';
import { eventually } from '../helpers/stack.js';
import { testCluster, steadyIngest, storedOnce } from '../helpers/cluster.js';
import { NATS_REQUIRED, versionBelow } from '../../lib/infra/nats.js';
import { partitionOf } from '../../lib/contract/messages.js';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from '../../deploy/service-process.js';

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

t.test('three ingest partitions at R3: each partition (main stream and heartbeat lane) led by its own server', async (t) => {
  const jsm = await k.nc.jetstreamManager({ timeout: 5000 });
  t.equal(k.partitions.length, 3, 'STREAM_PARTITIONS=3');
  const leaders: string[] = [];
  for (const p of k.partitions) {
    for (const name of [p.streams.reports, p.streams.heartbeats]) {
      const info = await jsm.streams.info(name);
      t.equal(info.config.num_replicas, 3, `${name} at R3`);
      t.equal(info.cluster?.replicas?.length, 2, `${name}: a leader and two replicas`);
    }
    const lead = await k.streamLeader(p.streams.reports);
    t.equal(await k.streamLeader(p.streams.heartbeats), lead, `partition ${p.partition}: its heartbeat lane led by the same server (${lead})`);
    leaders.push(lead);
  }
  t.equal(new Set(leaders).size, 3, `the partitions' leaders are three servers: ${leaders.join(', ')}`);
  // No stream beside the partitions: the unpartitioned names of a one-partition stack do not exist here.
  await t.rejects(jsm.streams.info(k.c.cfg.streamName), 'no unpartitioned ingest stream');
});

/** `n` machine slugs of partition `p` (lib/contract/messages.ts partitionOf), named `<prefix>-m<j>`. */
function machinesOf(prefix: string, p: number, n: number): string[] {
  const out: string[] = [];
  for (let j = 0; out.length < n; j++) if (partitionOf(k.customer.id, `${prefix}-m${j}`, k.partitions.length) === p) out.push(`${prefix}-m${j}`);
  return out;
}

/** The server names (n1, n2, n3) the gateways are connected to, from each server's /connz. */
async function gatewayServers(): Promise<Set<string>> {
  const out = new Set<string>();
  for (const [i, port] of k.c.ports.natsMonitor.entries()) {
    const r = await fetch(`http://127.0.0.1:${port}/connz?limit=1000`).then((x) => x.json() as Promise<{ connections?: { name?: string }[] }>, () => null);
    if (r?.connections?.some((c) => String(c.name).startsWith('gateway-'))) out.add(`n${i + 1}`);
  }
  return out;
}

t.test("kill -9 of one partition's leader during steady ingest: only that partition waits, the others answer on; every acknowledged report stored once", async (t) => {
  // A server no gateway is connected to (two gateways, three servers: there is one), so that what
  // the kill interrupts is the partition it leads, not a gateway's connection.
  const gateways = await gatewayServers();
  const leaders = await Promise.all(k.partitions.map((p) => k.streamLeader(p.streams.reports)));
  const victim = leaders.findIndex((l) => !gateways.has(l));
  t.ok(victim >= 0, `a partition led by a server without a gateway (gateways on ${[...gateways].join(', ')}; leaders ${leaders.join(', ')})`);
  const leader = leaders[victim]!;
  // One load per partition, each its own agents and machines: an agent waiting on the killed
  // partition's answer holds up no other partition's reports.
  const loads = k.partitions.map((p) => steadyIngest(k, `lk${p.partition}`, 2, machinesOf(`lk${p.partition}`, p.partition, 3)));
  let stopped = false;
  const stopAll = async () => {
    if (stopped) return;
    stopped = true;
    await Promise.all(loads.map((l) => l.stop()));
  };
  t.teardown(stopAll);
  await eventually(async () => loads.every((l) => l.acked.length > 60), 60_000, 'ingest under way in every partition');
  const node = k.c.nats.find((n) => n.name === `nats-server ${leader}`)!;
  t.ok(node, `the leader ${leader} of partition ${victim} is one of the three`);
  const killedAt = Date.now();
  await node.kill9();
  const newLeader = await eventually(async () => {
    const l = await k.streamLeader(k.partitions[victim]!.streams.reports).catch(() => '');
    return l && l !== leader ? l : null;
  }, 90_000, "a new leader of the killed partition's stream");
  t.not(newLeader, leader, `new leader ${newLeader}`);
  await eventually(async () => loads.every((l) => l.ackedSince(killedAt) > 60), 120_000, 'ingest continues in every partition after the kill');
  // The killed server comes back on its data and catches up; ingest goes on meanwhile.
  await node.start();
  const back = Date.now();
  await eventually(async () => loads.every((l) => l.ackedSince(back) > 30), 120_000, 'ingest continues with the server back');
  await sleep(500);
  await stopAll();

  // What the kill cost each partition: its longest time without an acknowledged report, and what
  // it answered while the killed partition waited: the killed partition's longest time without an
  // acknowledgement from the kill on (an answer already on its way can come a few ms after the
  // kill, so the wait is that gap, not the time to its first acknowledgement).
  let waitFrom = killedAt;
  let waitTo = killedAt;
  let last = killedAt;
  for (const a of loads[victim]!.acked) {
    if (a.at < killedAt) continue;
    if (a.at - last > waitTo - waitFrom) [waitFrom, waitTo] = [last, a.at];
    last = a.at;
  }
  const perPartition = loads.map((l, p) => ({
    partition: p,
    longest_gap_ms: l.longestGap(killedAt - 1),
    refused_while_victim_waited: l.answered.filter((a) => a.at > waitFrom && a.at <= waitTo && a.status !== '200' && a.status !== '202').length,
    acked_while_victim_waited: l.acked.filter((a) => a.at > waitFrom && a.at < waitTo).length,
    answers: l.counts(),
  }));
  t.comment(
    `partition ${victim}'s leader ${leader} killed, new leader ${newLeader}; it waited ${waitTo - waitFrom} ms (from ${waitFrom - killedAt} ms after the kill); ${JSON.stringify(perPartition)}`,
  );
  for (const l of loads) t.same(l.bad(), [], 'no 5xx other than 503 with Retry-After, no broken connection');
  // Only the killed partition waits: the others refuse nothing meanwhile and go on acknowledging,
  // and none of them pauses as long as it does. (How long each pause is, is a figure for the
  // failover results, not a bound here: on two busy cores every partition can pause a second or two.)
  const waited = waitTo - waitFrom;
  for (const x of perPartition.filter((x) => x.partition !== victim)) {
    t.equal(x.refused_while_victim_waited, 0, `partition ${x.partition}: nothing refused while partition ${victim} waited for its new leader`);
    t.ok(x.acked_while_victim_waited > 0, `partition ${x.partition}: ${x.acked_while_victim_waited} reports acknowledged meanwhile`);
    t.ok(x.longest_gap_ms < waited, `partition ${x.partition}: its longest pause from the kill on, ${x.longest_gap_ms} ms, shorter than partition ${victim}'s wait of ${waited} ms`);
  }

  let lost = 0;
  for (const [p, l] of loads.entries()) {
    const prefix = `lk${p}`;
    const end = await eventually(async () => {
      const r = await storedOnce(k, l.acked, prefix);
      return r.missing.length === 0 ? r : null;
    }, 120_000, `every acknowledged report of partition ${p} stored`).catch(async (e) => {
      const r = await storedOnce(k, l.acked, prefix);
      t.fail(`${String(e)}: ${r.missing.length} of ${l.acked.length} missing (${r.missing.slice(0, 5).join(', ')})`);
      return r;
    });
    // Raw rows (helpers/cluster.ts). An ack the killed leader had not replicated is lost, so its
    // message is applied again: copies of one report are allowed (docs/architecture.md); a second
    // report for one request is not, and no merge hides it.
    t.same(end.split, [], `partition ${p}: no request stored as two reports`);
    lost += end.missing.length;
  }
  const file = k.record('stream_leader_kill', {
    failure: "kill -9 of one ingest partition's JetStream leader (3 partitions at R3 on 3 servers, each partition led by its own) during steady ingest through nginx (2 agents per partition)",
    partition: victim,
    leader,
    new_leader: newLeader,
    victim_wait_ms: waitTo - waitFrom,
    victim_wait_from_kill_ms: waitFrom - killedAt,
    longest_gap_ms: perPartition[victim]!.longest_gap_ms,
    partitions: perPartition,
    ingest_bad: loads.flatMap((l) => l.bad()),
    acknowledged: loads.reduce((n, l) => n + l.acked.length, 0),
    lost,
  });
  t.comment(`figures kept in ${file}`);
});

t.test("after the kill two partitions share a leader; `fleet streams --place` puts each on a server of its own again", async (t) => {
  const fleet = (...args: string[]) => {
    const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), 'streams', ...args], { env: { ...process.env, ...k.c.env }, encoding: 'utf8', timeout: 180_000 });
    t.equal(r.status, 0, `fleet streams ${args.join(' ')}: ${r.stderr}`);
    return r.stdout
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => l.split('\t'))
      .map(([stream, leader]) => ({ stream: stream!, leader: leader! }));
  };
  const rows = fleet();
  t.same(rows.map((r) => r.stream), k.partitions.flatMap((p) => [p.streams.reports, p.streams.heartbeats]).sort(), 'every partition\'s two streams listed');
  const leaderOf = (rs: { stream: string; leader: string }[], p: number) => rs.find((r) => r.stream === k.partitions[p]!.streams.reports)!.leader;
  const before = k.partitions.map((p) => leaderOf(rows, p.partition));
  t.comment(`leaders after the kill: ${before.join(', ')}`);
  const placed = fleet('--place');
  const after = k.partitions.map((p) => leaderOf(placed, p.partition));
  t.equal(new Set(after).size, 3, `three partitions, three leaders: ${after.join(', ')}`);
  for (const p of k.partitions) t.equal(placed.find((r) => r.stream === p.streams.heartbeats)!.leader, after[p.partition], `partition ${p.partition}: both streams led by ${after[p.partition]}`);
  // Ingest goes on after the move.
  const r = await k.https('POST', `/api/ingest/${k.customer.slug}/placed-m1/agent/heartbeat`, k.token, {});
  t.equal(r.status, 200);
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
