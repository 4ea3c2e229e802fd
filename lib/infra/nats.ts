// NATS connection and the JetStream stream/consumer definitions (see lib/contract/messages.ts for subjects).
import {
  connect,
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  nanos,
  type NatsConnection,
  type JetStreamManager,
  type StreamConfig,
} from 'nats';
import { subjects, deadLetterStream, ingestPartitions, ingestStreamOf, type IngestPartition } from '../contract/messages.js';
import { isNotFound } from './jetstream-errors.js';

export type { NatsConnection };

export async function connectNats(url: string, name: string): Promise<NatsConnection> {
  return connect({
    servers: url.split(','),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    waitOnFirstConnect: true,
    // No Error (and stack capture) per request for a timeout's trace: at thousands of JetStream
    // publishes per second it was 5 % of a gateway's CPU. Our errors say what timed out anyway.
    noAsyncTraces: true,
  });
}

export interface StreamSettings {
  streamName: string;
  subjectPrefix: string;
  streamMaxBytes: number;
  /** The heartbeat lane's limit; the main stream's when not given. */
  heartbeatStreamMaxBytes?: number;
  streamReplicas: number;
  /** Ingest partitions (lib/contract/messages.ts); 1 when not given. */
  streamPartitions?: number;
}


async function upsertStream(jsm: JetStreamManager, cfg: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await jsm.streams.info(cfg.name);
    await jsm.streams.update(cfg.name, cfg);
  } catch (e) {
    if (!isNotFound(e)) throw e;
    await jsm.streams.add(cfg);
  }
}

/**
 * Creates or updates one ingest partition's main stream and heartbeat lane. The size limits of
 * `s` are totals: each of its STREAM_PARTITIONS partitions holds its share (a partition outside
 * that count, such as one a restore brings from a stack with more, gets the same share).
 */
export async function ensureIngestPartition(jsm: JetStreamManager, s: StreamSettings, p: IngestPartition): Promise<void> {
  const n = Math.max(1, s.streamPartitions ?? 1);
  const workQueue = (name: string, streamSubjects: string[], maxBytes: number) =>
    upsertStream(jsm, {
      name,
      subjects: streamSubjects,
      // Work queue: a message is gone once a worker acked it; an unacked one stays until acked.
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      // Full stream: refuse new reports (the gateway answers 503) rather than drop accepted ones.
      discard: DiscardPolicy.New,
      max_bytes: maxBytes,
      num_replicas: s.streamReplicas,
      duplicate_window: nanos(120_000),
    });
  await workQueue(p.streams.reports, [p.subjects.reports, p.subjects.rejections], Math.floor(s.streamMaxBytes / n));
  await workQueue(p.streams.heartbeats, [p.subjects.heartbeats], Math.floor((s.heartbeatStreamMaxBytes ?? s.streamMaxBytes) / n));
}

/**
 * Creates or updates the ingest stream, its heartbeat lane and its dead-letter stream (lib/contract/messages.ts).
 * Idempotent; any process may call it.
 */
export async function ensureStreams(jsm: JetStreamManager, s: StreamSettings): Promise<void> {
  const subj = subjects(s.subjectPrefix);
  for (const p of ingestPartitions(s.streamName, s.subjectPrefix, Math.max(1, s.streamPartitions ?? 1))) await ensureIngestPartition(jsm, s, p);
  await upsertStream(jsm, {
    name: deadLetterStream(s.streamName),
    // Per customer: `<deadLetter>.<customer slug>` (lib/store/dead-letters.ts); the bare subject holds dead
    // letters written before the customer was put in the subject.
    subjects: [subj.deadLetter, `${subj.deadLetter}.>`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: nanos(30 * 86_400_000),
    num_replicas: s.streamReplicas,
  });
}

/**
 * Every ingest stream of `streamName` that exists on the server, under any number of partitions
 * (lib/contract/messages.ts ingestStreamOf), sorted by name: a worker consumes them all, so that
 * reports queued under another STREAM_PARTITIONS (a gateway configured with more, or the streams
 * of before a change of it) are applied too.
 */
export async function existingIngestStreams(jsm: JetStreamManager, streamName: string): Promise<string[]> {
  const out: string[] = [];
  for await (const name of jsm.streams.names()) if (ingestStreamOf(streamName, name)) out.push(name);
  return out.sort();
}

/**
 * Places the leaders of replicated (R > 1) streams: the streams of one group share a leader, and
 * the groups' leaders are on different servers where there are enough. A stream in the wrong place
 * is asked to step down (its servers elect another replica; JetStream picks which), one per round,
 * until everything is placed or `rounds` is spent. For ingest partitions: a group is one
 * partition's main stream and heartbeat lane, so one server's core carries one partition's share
 * of ingest, and losing a server interrupts one partition. Returns each stream's leader afterwards.
 */
export async function placeStreamLeaders(nc: NatsConnection, jsm: JetStreamManager, groups: string[][], rounds = 40): Promise<Record<string, string>> {
  const streams = groups.flat();
  // A stream of one replica has nowhere else to go: it is where it is.
  const fixed = new Set<string>();
  const leaders = async () => {
    const out: Record<string, string> = {};
    for (const name of streams) {
      const info = await jsm.streams.info(name);
      out[name] = info.cluster?.leader ?? '';
      if (info.config.num_replicas <= 1) fixed.add(name);
    }
    return out;
  };
  for (let round = 0; round < rounds; round++) {
    const now = await leaders();
    const taken = new Set<string>();
    let move: string | undefined;
    for (const group of groups) {
      const anchor = now[group[0]!]!;
      if (!anchor) continue;
      if (taken.has(anchor) && !fixed.has(group[0]!)) {
        move = group[0];
        break;
      }
      taken.add(anchor);
      move = group.find((x) => now[x] && now[x] !== anchor && !fixed.has(x));
      if (move) break;
    }
    if (!move) return now;
    await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${move}`, undefined, { timeout: 5000 }).catch(() => undefined);
    // The election takes a moment; the next round looks again.
    for (let i = 0; i < 50; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const l = (await jsm.streams.info(move).catch(() => null))?.cluster?.leader;
      if (l && l !== now[move]) break;
    }
  }
  return leaders();
}

/** The durable pull consumer that every worker replica shares (one per stream: the main one and the heartbeat lane). */
export async function ensureConsumer(jsm: JetStreamManager, streamName: string, durable: string, ackWaitS: number): Promise<void> {
  const cfg = {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ackWaitS * 1000),
    // Redelivery is unbounded here: the worker itself dead-letters a report whose data an error
    // code proves at fault, and retries everything else, with a growing delay, for as long as it
    // takes (lib/infra/storage-errors.ts). Messages waiting count towards max_ack_pending.
    max_deliver: -1,
    max_ack_pending: 50_000,
  };
  try {
    await jsm.consumers.info(streamName, durable);
    await jsm.consumers.update(streamName, durable, { ack_wait: cfg.ack_wait, max_ack_pending: cfg.max_ack_pending });
  } catch (e) {
    if (!isNotFound(e)) throw e;
    await jsm.consumers.add(streamName, cfg);
  }
}

/**
 * The production requirement for JetStream (docs/operations.md, "NATS durability"): nats-server
 * 2.10.23 or later (Jepsen: 2.10.20 to 2.10.22 could lose a whole stream after crashes) and every
 * stream on 3 replicas. `sync_interval: always` belongs to it too, but a client cannot see the
 * server's fsync setting.
 */
export const NATS_REQUIRED = { version: '2.10.23', replicas: 3 } as const;

/** Whether dotted version `v` is older than `min` (numeric parts; a suffix such as -beta is ignored). */
export function versionBelow(v: string, min: string): boolean {
  const parts = (x: string) => x.replace(/^v/, '').split(/[-+]/)[0]!.split('.').map((n) => Number(n) || 0);
  const a = parts(v);
  const b = parts(min);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d < 0;
  }
  return false;
}

/** What falls short of NATS_REQUIRED, one phrase each; empty when nothing does. */
export function durabilityShortfalls(serverVersion: string, replicas: number): string[] {
  const out: string[] = [];
  if (versionBelow(serverVersion, NATS_REQUIRED.version)) out.push(`nats-server ${serverVersion} is older than ${NATS_REQUIRED.version}`);
  if (replicas < NATS_REQUIRED.replicas) out.push(`the stream has ${replicas} replica${replicas === 1 ? '' : 's'}, fewer than ${NATS_REQUIRED.replicas}`);
  return out;
}

interface WarnLog {
  warn(obj: object, msg: string): void;
}

/**
 * Every process calls this once at start: one warning when the server it is connected to or the
 * ingest stream falls short of the production requirement. A stream not made yet counts with the
 * replicas it will be made with (STREAM_REPLICAS).
 */
export async function warnDurability(nc: NatsConnection, jsm: JetStreamManager, s: { streamName: string; streamReplicas: number; streamPartitions?: number }, log: WarnLog): Promise<string[]> {
  const version = nc.info?.version ?? '0.0.0';
  let replicas = s.streamReplicas;
  try {
    replicas = (await jsm.streams.info(ingestPartitions(s.streamName, '', s.streamPartitions ?? 1)[0]!.streams.reports)).config.num_replicas;
  } catch (e) {
    if (!isNotFound(e)) throw e;
  }
  const short = durabilityShortfalls(version, replicas);
  if (short.length > 0) {
    log.warn(
      { nats_version: version, stream: s.streamName, stream_replicas: replicas, required: NATS_REQUIRED },
      `NATS durability below the production requirement (docs/operations.md, "NATS durability"): ${short.join('; ')}`,
    );
  }
  return short;
}
