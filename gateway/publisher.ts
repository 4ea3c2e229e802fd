// Groups the reports that arrive together into one JetStream publish and settles every request of
// the group when the PubAck arrives. One publish per request caps a gateway near 30k reports/s
// here (nats.js client cost per publish); grouping removes that ceiling (bench/README.md).
//
// A report is answered 200 only after JetStream durably stored the message holding it. Anything
// else (disconnected, no stream, stream full, timeout) fails every report of the group with 503.
import { randomUUID } from 'node:crypto';
import type { JetStreamClient, NatsConnection, PubAck } from 'nats';
import { encodeBatch, partitionOf, type Lane } from '../lib/contract/messages.js';
import { QueueUnavailableError, type HttpError } from '../lib/contract/errors.js';
import type { QueueShares } from './queue-share.js';
import { JetStreamApiCodes, jsApiCode } from '../lib/infra/jetstream-errors.js';

export type Settle = (err: HttpError | null) => void;

interface Group {
  reports: Buffer[];
  settles: Settle[];
  bytes: number;
}

export interface PublisherOptions {
  subject: string;
  streamName: string;
  timeoutMs: number;
  maxReports: number;
  maxBytes: number;
  maxInflight: number;
}

export interface PublisherStats {
  published(reports: number, bytes: number, ms: number): void;
  failed(reports: number, reason: string): void;
  /** A settle callback threw: its own request's bug, which must not cost the rest of the group its answers. */
  settleThrew?(e: unknown): void;
}

export class BatchPublisher {
  private pending: Group = { reports: [], settles: [], bytes: 0 };
  private scheduled = false;
  private inflight = 0;
  /** Reports handed to add() and not yet settled. */
  outstanding = 0;
  connected = false;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly opts: PublisherOptions,
    private readonly stats?: PublisherStats,
  ) {}

  /** Largest report the queue can carry (the server's max_payload, less the batch wrapper). */
  get maxReportBytes(): number {
    return Math.max(0, (this.nc.info?.max_payload ?? 1024 * 1024) - 64);
  }

  get streamName(): string {
    return this.opts.streamName;
  }

  add(report: Buffer, settle: Settle): void {
    if (!this.connected) {
      this.settleAll([settle], new QueueUnavailableError('queue unavailable: not connected to NATS', 2));
      return;
    }
    this.outstanding++;
    const limit = Math.min(this.opts.maxBytes, this.maxReportBytes);
    if (this.pending.reports.length > 0 && this.pending.bytes + report.length + 1 > limit) this.cut(true);
    this.pending.reports.push(report);
    this.pending.settles.push(settle);
    this.pending.bytes += report.length + 1;
    if (this.pending.reports.length >= this.opts.maxReports) this.cut(true);
    if (!this.scheduled) {
      this.scheduled = true;
      // Everything that arrives in this turn of the event loop joins the same group.
      setImmediate(() => {
        this.scheduled = false;
        this.cut();
      });
    }
  }

  private ready: Group[] = [];

  /**
   * Closes the pending group if a publish slot is free for it (or if it is full: `force`). With
   * every slot busy the group stays open and keeps growing until a PubAck frees a slot: under load,
   * larger groups and fewer publishes, which is where a gateway's CPU goes (about 100 µs of nats.js
   * and socket work per publish; bench/README.md). Closing a group per event-loop turn regardless
   * queued many small groups behind the busy slots instead.
   */
  private cut(force = false): void {
    if (this.pending.reports.length > 0 && (force || this.inflight + this.ready.length < this.opts.maxInflight)) {
      this.ready.push(this.pending);
      this.pending = { reports: [], settles: [], bytes: 0 };
    }
    this.pump();
  }

  private pump(): void {
    while (this.inflight < this.opts.maxInflight && this.ready.length > 0) {
      const g = this.ready.shift()!;
      this.inflight++;
      void this.publish(g).finally(() => {
        this.inflight--;
        this.outstanding -= g.settles.length;
        if (this.outstanding === 0) for (const w of this.idleWaiters.splice(0)) w();
        // A slot is free: the oldest closed group goes first, else the open one.
        if (this.ready.length > 0) this.pump();
        else this.cut();
      });
    }
  }

  private async publish(g: Group): Promise<void> {
    const data = encodeBatch(g.reports);
    const started = Date.now();
    const msgID = randomUUID();
    let ack: PubAck | null = null;
    let error: QueueUnavailableError | null = null;
    // One retry with the same msgID: JetStream drops the second copy if the first did land.
    for (let attempt = 0; attempt < 2 && ack === null; attempt++) {
      if (!this.connected) {
        error = new QueueUnavailableError('queue unavailable: not connected to NATS', 2);
        break;
      }
      try {
        ack = await this.js.publish(this.opts.subject, data, {
          msgID,
          timeout: this.opts.timeoutMs,
          expect: { streamName: this.opts.streamName },
        });
      } catch (e) {
        error = classify(e);
        if (!isRetryable(e)) break;
      }
    }
    if (ack !== null) {
      this.stats?.published(g.reports.length, data.length, Date.now() - started);
      this.settleAll(g.settles, null);
    } else {
      const err = error ?? new QueueUnavailableError('queue unavailable');
      this.stats?.failed(g.reports.length, err.detail);
      this.settleAll(g.settles, err);
    }
  }

  private settleAll(settles: Settle[], err: QueueUnavailableError | null): void {
    for (const s of settles) {
      try {
        s(err);
      } catch (e) {
        this.stats?.settleThrew?.(e);
      }
    }
  }

  /** Resolves when every report handed in so far is settled (graceful shutdown). */
  idle(): Promise<void> {
    if (this.outstanding === 0) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }
}

function messageOf(e: unknown): string {
  return (e as Error)?.message ?? String(e);
}

function isRetryable(e: unknown): boolean {
  return /timeout/i.test(messageOf(e));
}

function classify(e: unknown): QueueUnavailableError {
  // JetStream API errors carry the reason in api_error (the message is just the code).
  const api = (e as { api_error?: { err_code?: number; description?: string } }).api_error;
  const m = api?.description ?? messageOf(e);
  const code = jsApiCode(e);
  const full = code === JetStreamApiCodes.StreamStoreFailed || code === JetStreamApiCodes.StorageResourcesExceeded || code === JetStreamApiCodes.InsufficientResources;
  if (full || /maximum (bytes|messages)|storage|insufficient resources/i.test(m)) {
    return new QueueUnavailableError('queue full: the stream is at its limit; retry later', 5);
  }
  if (/no responders|stream not found|503/i.test(m)) return new QueueUnavailableError('queue unavailable: no stream answered', 2);
  if (/timeout/i.test(m)) return new QueueUnavailableError('queue unavailable: no acknowledgement in time', 2);
  return new QueueUnavailableError(`queue unavailable: ${m}`, 2);
}

/**
 * The gateway's publisher: one BatchPublisher per partition and lane (lib/contract/messages.ts).
 * Heartbeats are grouped apart from other reports and go to their partition's heartbeat lane, so
 * that no heartbeat shares a message, or a place in the queue, with a large report
 * (docs/architecture.md "Lanes"); a machine's reports go to its partition (`partitionOf`), so one
 * partition's stream leader carries only its share (docs/architecture.md "Partitions").
 */
export class IngestPublisher {
  private readonly all: BatchPublisher[];

  constructor(
    private readonly partitions: Record<Lane, BatchPublisher>[],
    /** Each customer's share of a stream that fills up (gateway/queue-share.ts); none: no shares. */
    private readonly shares?: QueueShares,
  ) {
    if (partitions.length === 0) throw new Error('no ingest partition');
    this.all = partitions.flatMap((p) => [p.reports, p.heartbeats]);
  }

  /** Queues a report of this customer's machine in its lane of the machine's partition. */
  add(report: Buffer, settle: Settle, lane: Lane, customerId: string, machine: string): void {
    const pub = this.partitions[partitionOf(customerId, machine, this.partitions.length)]![lane];
    if (this.shares) {
      const refused = this.shares.refusal(pub.streamName, customerId);
      if (refused) return settle(refused);
      this.shares.record(pub.streamName, customerId, report.length);
    }
    pub.add(report, settle);
  }

  /** Every stream the publisher writes to. */
  get streamNames(): string[] {
    return this.all.map((p) => p.streamName);
  }

  get maxReportBytes(): number {
    return this.partitions[0]!.reports.maxReportBytes;
  }

  get connected(): boolean {
    return this.all[0]!.connected;
  }

  set connected(v: boolean) {
    for (const p of this.all) p.connected = v;
  }

  get outstanding(): number {
    return this.all.reduce((n, p) => n + p.outstanding, 0);
  }

  async idle(): Promise<void> {
    await Promise.all(this.all.map((p) => p.idle()));
  }
}
