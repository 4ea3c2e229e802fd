// NATS connection and the JetStream stream/consumer definitions (see lib/messages.ts for subjects).
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
import { subjects, deadLetterStream } from '../messages.js';
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
  streamReplicas: number;
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

/** Creates or updates the ingest stream and its dead-letter stream. Idempotent; any process may call it. */
export async function ensureStreams(jsm: JetStreamManager, s: StreamSettings): Promise<void> {
  const subj = subjects(s.subjectPrefix);
  await upsertStream(jsm, {
    name: s.streamName,
    subjects: [subj.reports, subj.rejections],
    // Work queue: a message is gone once a worker acked it; an unacked one stays until acked.
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    // Full stream: refuse new reports (the gateway answers 503) rather than drop accepted ones.
    discard: DiscardPolicy.New,
    max_bytes: s.streamMaxBytes,
    num_replicas: s.streamReplicas,
    duplicate_window: nanos(120_000),
  });
  await upsertStream(jsm, {
    name: deadLetterStream(s.streamName),
    subjects: [subj.deadLetter],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: nanos(30 * 86_400_000),
    num_replicas: s.streamReplicas,
  });
}

/** The durable pull consumer that every worker replica shares. */
export async function ensureConsumer(jsm: JetStreamManager, streamName: string, durable: string, ackWaitS: number): Promise<void> {
  const cfg = {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ackWaitS * 1000),
    // Redelivery is unbounded here: the worker itself dead-letters a message that keeps failing
    // for a reason in its data, and keeps retrying one that fails because a server is down.
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
