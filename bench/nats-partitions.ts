// Benchmark of NATS JetStream as the ingest queue (issue 26, "Past one stream leader"): the CPU a
// nats-server spends per message and per report, at R1 and at R3 (leader and followers apart), with
// the messages the gateway publishes (batches of heartbeat reports: `encodeBatch`) into ingest
// partitions (lib/contract/messages.ts), and the workers' side (pull and ack, one ack per message).
// The capacity model of docs/operations.md takes its partitions and NATS nodes from these figures.
// Prints one JSON object on stdout; progress goes to stderr.
//
//   node dist/bench/nats-partitions.js [--messages 20000] [--group 8,64]
//
// Starts a NATS cluster of its own (three nats-servers, data under DATA_DIR/nats-partitions, client
// ports from BENCH_NATS_BASE_PORT, default 31240: clients +0..2, routes +3..5, monitoring +6..8)
// with the project's server configuration (deploy/local-servers.ts natsConfig: file storage, fsync
// as shipped), and stops it afterwards. CPU is user + system time of each nats-server from
// /proc/<pid>/stat, between the first publish and the last PubAck (publish), and between the first
// fetch and the last ack (consume).
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { ClusterServer } from '../deploy/cluster.js';
import { natsConfig, tcpProbe, which } from '../deploy/local-servers.js';
import { connectNats, ensureConsumer, ensureStreams, placeStreamLeaders } from '../lib/infra/nats.js';
import { encodeBatch, encodeReport, ingestPartitions } from '../lib/contract/messages.js';
import { cpuSeconds } from './cpu.js';
import { textArg } from './args.js';

const log = (msg: string) => process.stderr.write(`[bench nats] ${msg}\n`);
const MESSAGES = Number(textArg('messages', '20000'));
const GROUPS = textArg('group', '8,64').split(',').map(Number);
/** Bytes published per run at most: large groups send fewer messages. */
const MAX_BYTES = 256 * 1024 * 1024;
const PARTITIONS = 3;
const INFLIGHT = 16;
const base = Number(process.env.BENCH_NATS_BASE_PORT || 31240);
const dir = resolve(process.env.DATA_DIR || '.data/bench', 'nats-partitions');
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });

const ports = { client: [0, 1, 2].map((i) => base + i), route: [3, 4, 5].map((i) => base + i), monitor: [6, 7, 8].map((i) => base + i) };
const servers = ports.client.map((port, i) => {
  const d = join(dir, `n${i + 1}`);
  const node = { serverName: `n${i + 1}`, clusterName: 'bench', routePort: ports.route[i]!, routes: ports.route, httpPort: ports.monitor[i]! };
  return new ClusterServer(
    `nats-server n${i + 1}`,
    d,
    () => {
      mkdirSync(join(d, 'jetstream'), { recursive: true });
      writeFileSync(join(d, 'nats.conf'), natsConfig(d, port, node));
      return { cmd: which('nats-server') ?? 'nats-server', args: ['-c', join(d, 'nats.conf')] };
    },
    () => tcpProbe(port, 'INFO'),
    log,
  );
});

/** One heartbeat report as a gateway queues it (about 250 bytes). */
function heartbeat(): Buffer {
  return encodeReport(
    { id: randomUUID(), kind: 'heartbeat', customerId: randomUUID(), customer: 'bench-customer', machine: `m-${Math.floor(Math.random() * 1e6)}`, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() },
    Buffer.from('{"version":"5.7.0","uptime_seconds":123456,"pid":4242,"agent_ts":"2026-11-28T10:00:00Z"}'),
  );
}

const cpu = () => servers.map((s) => cpuSeconds(s.pid!));

interface Phase {
  wall_s: number;
  messages_per_s: number;
  reports_per_s: number;
  /** CPU-µs of all servers together, per message and per report. */
  cpu_us_per_message: number;
  cpu_us_per_report: number;
  /** CPU-µs per message of the server leading every partition's stream (R1: the one holding them). */
  leader_cpu_us_per_message: number;
  /** CPU-µs per message of each server that follows (R3 only). */
  follower_cpu_us_per_message: number | null;
}

function phase(before: number[], after: number[], ms: number, messages: number, group: number, leaders: Set<number>): Phase {
  const d = after.map((a, i) => a - before[i]!);
  const total = d.reduce((x, y) => x + y, 0);
  const lead = [...leaders].reduce((x, i) => x + d[i]!, 0);
  const followers = d.filter((_, i) => !leaders.has(i));
  const r = (x: number) => Math.round(x * 10) / 10;
  return {
    wall_s: Math.round(ms / 100) / 10,
    messages_per_s: Math.round(messages / (ms / 1000)),
    reports_per_s: Math.round((messages * group) / (ms / 1000)),
    cpu_us_per_message: r((total * 1e6) / messages),
    cpu_us_per_report: r((total * 1e6) / (messages * group)),
    leader_cpu_us_per_message: r((lead * 1e6) / messages),
    follower_cpu_us_per_message: leaders.size === servers.length ? null : r((followers.reduce((x, y) => x + y, 0) * 1e6) / messages / Math.max(1, followers.length)),
  };
}

// A connection the server drops (a slow consumer) leaves promises that never settle; with nothing
// else pending, Node would end the process quietly without stopping the servers. This keeps it
// alive, and the deadline below turns a stuck phase into an error.
const keepAlive = setInterval(() => {}, 1000);
function deadline<T>(p: Promise<T>, what: string, ms = 300_000): Promise<T> {
  const late = new Promise<never>((_, reject) => {
    setTimeout(() => reject(new Error(`${what}: not done in ${ms / 1000} s`)), ms).unref();
  });
  return Promise.race([p, late]);
}

/** A JetStream request of a cluster that is still electing its leaders: tried again for up to two minutes. */
async function retried<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (e) {
      if (i >= 120) throw e;
      if (i % 10 === 0) log(`${what}: ${(e as Error).message}; trying again`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

const out: Record<string, unknown> = { max_messages: MESSAGES, partitions: PARTITIONS, servers: servers.length, inflight: INFLIGHT, runs: [] as unknown[] };
try {
  await Promise.all(servers.map((s) => s.start()));
  const nc = await connectNats(ports.client.map((p) => `nats://127.0.0.1:${p}`).join(','), 'bench-nats');
  const js = nc.jetstream();
  out.nats_version = nc.info?.version;
  for (const replicas of [1, 3]) {
    for (const group of GROUPS) {
      const name = `BENCH_R${replicas}_G${group}`;
      const prefix = `benchnats.r${replicas}g${group}`;
      const jsm = await retried('JetStream', () => nc.jetstreamManager({ timeout: 5000 }));
      // Streams of a healthy cluster: retried while the meta leader is elected.
      await retried('the streams', () => ensureStreams(jsm, { streamName: name, subjectPrefix: prefix, streamMaxBytes: 8 * 1024 ** 3, streamReplicas: replicas, streamPartitions: PARTITIONS }));
      const parts = ingestPartitions(name, prefix, PARTITIONS);
      const streams = parts.map((p) => p.streams.heartbeats);
      // R3: every partition's leader on one server (one group), so that the leader's work and a
      // follower's are told apart (in production each partition leads on a server of its own:
      // docs/architecture.md "Partitions"; the sums are the same). R1: a stream lives where it was made.
      const leaders = await retried('placing the leaders', () => placeStreamLeaders(nc, jsm, [parts.map((p) => p.streams.heartbeats)]));
      const leaderIdx = new Set(Object.values(leaders).map((l) => Number(l.slice(1)) - 1));
      for (const s of streams) await retried('the consumers', () => ensureConsumer(jsm, s, 'workers', 60));
      const payload = encodeBatch(Array.from({ length: group }, heartbeat));
      const messages = Math.min(MESSAGES, Math.floor(MAX_BYTES / payload.length));
      log(`R${replicas}, ${group} reports per message (${payload.length} bytes): publishing ${messages}`);

      // Publish: as the gateways do, up to INFLIGHT publishes waiting for their PubAck.
      const c0 = cpu();
      const t0 = Date.now();
      let sent = 0;
      const lane = async () => {
        while (sent < messages) {
          const i = sent++;
          await js.publish(parts[i % PARTITIONS]!.subjects.heartbeats, payload);
        }
      };
      await deadline(Promise.all(Array.from({ length: INFLIGHT }, lane)), 'publish');
      const publish = phase(c0, cpu(), Date.now() - t0, messages, group, leaderIdx);

      // Consume: as the workers do, a pull per partition, every message acked.
      const c1 = cpu();
      const t1 = Date.now();
      await deadline(Promise.all(
        streams.map(async (s) => {
          const consumer = await js.consumers.get(s, 'workers');
          let left = (await jsm.streams.info(s)).state.messages;
          while (left > 0) {
            const batch = await consumer.fetch({ max_messages: 64, expires: 2000 });
            for await (const m of batch) {
              m.ack();
              left--;
            }
          }
          await nc.flush();
        }),
      ), 'consume');
      // Acks are asynchronous: wait until the streams (work queues) are empty.
      for (const s of streams) while ((await jsm.streams.info(s)).state.messages > 0) await new Promise((r) => setTimeout(r, 50));
      const consume = phase(c1, cpu(), Date.now() - t1, messages, group, leaderIdx);
      const run = { replicas, reports_per_message: group, message_bytes: payload.length, messages, leaders, publish, consume };
      log(JSON.stringify(run));
      (out.runs as unknown[]).push(run);
      for (const p of parts) for (const s of [p.streams.reports, p.streams.heartbeats]) await jsm.streams.delete(s).catch(() => {});
    }
  }
  await nc.close();
} finally {
  await Promise.all(servers.map((s) => s.stop()));
  clearInterval(keepAlive);
}
process.stdout.write(`${JSON.stringify(out)}\n`);
