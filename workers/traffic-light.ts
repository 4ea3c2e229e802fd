// The stored traffic light: deciding and recording changes of colour (docs/architecture.md
// "Traffic light").
//
// Three paths recompute an instance's colour with one SQL rule (lib/domain/traffic-light.ts), and store it (the api shows the stored colour):
//   report  after the batch's upsert, in the same transaction (a heartbeat turns red into green,
//           status error turns red, a warning yellow, ...);
//   expiry  a Redis heartbeat key expired (workers/light-expiry.ts);
//   sweep   the repeatable job that finds what the expiry events missed (workers/light-sweep.ts).
// Each runs `recordTransitions`: an UPDATE conditional on the stored colour still being the one it
// saw, so of several workers (or paths) racing on one change exactly one records it; that UPDATE
// also bumps `light_seq` and writes the change into the `light_outbox` table in the same
// transaction (the statements: lib/store/light-events.ts). After the commit, `LightEventSink.deliver` writes the changes to ClickHouse
// (`light_events`, keyed by instance and seq), publishes them on NATS for the api's live stream,
// queues the webhooks and the e-mail notifications (workers/mail-digest.ts), and only then deletes them from the outbox. A worker that dies in between
// leaves them in the outbox; the sweep delivers them again (every copy is the same event).
import { isNotFound } from '../lib/infra/jetstream-errors.js';
import type { JetStreamManager, NatsConnection } from 'nats';
import { withTx, type Pool, type PoolClient } from '../lib/infra/postgres.js';
import type { ClickHouseClient } from '../lib/infra/clickhouse.js';
import type { Logger } from '../lib/infra/log.js';
import { subjects } from '../lib/contract/messages.js';
import { notifiesWebhooks, NO_WAITING, type LightCause, type LightEvent, type LightMessage, type WaitingHeartbeats } from '../lib/domain/traffic-light.js';
import { lockFreeInstances, lockInstances } from '../lib/store/instances.js';
import { recordLightChanges, lockOutboxOlderThan, deleteFromOutbox, insertLightEvents, NO_CHANGES, type RecordedChanges } from '../lib/store/light-events.js';

export interface LightParams {
  warningWindowS: number;
  /** How far Postgres's last heartbeat may lag the newest one (s; HeartbeatState.postgresLagMs): recheck times are that much later while heartbeats may wait. */
  recheckSlackS?: number;
}

/**
 * Recomputes the colour of `instanceIds` at `horizonMs` (see Horizon) and records every change
 * (UPDATE + outbox row) in the transaction of `c`. `lock`: take the rows' locks first, in the order
 * the ingest upsert takes them (machine, software), so that this never deadlocks with it; not
 * needed inside the ingest transaction, which holds them already.
 */
export async function recordTransitions(
  c: PoolClient,
  instanceIds: string[],
  cause: LightCause,
  p: LightParams,
  horizonMs: number,
  lock: boolean,
  /** Receive times of heartbeats still waiting in Redis, judged as if written (recordLightChanges). */
  waiting: WaitingHeartbeats = NO_WAITING,
): Promise<RecordedChanges> {
  if (instanceIds.length === 0) return NO_CHANGES;
  if (lock) await lockInstances(c, instanceIds);
  return recordLightChanges(c, instanceIds, cause, p.warningWindowS, horizonMs, p.recheckSlackS ?? 0, waiting);
}

/** `recordTransitions` in a transaction of its own (expiry events, the sweep). */
export async function recordTransitionsTx(pool: Pool, instanceIds: string[], cause: LightCause, p: LightParams, horizonMs: number): Promise<RecordedChanges> {
  if (instanceIds.length === 0) return NO_CHANGES;
  return withTx(pool, (c) => recordTransitions(c, instanceIds, cause, p, horizonMs, true));
}

/**
 * `recordTransitionsTx` for the rows no other transaction holds (lockFreeInstances); the ids of
 * the others come back in `skipped`, not judged: someone is writing them right now (the other of
 * expiry listener and sweep, a report), and the caller looks at them again.
 */
export async function recordFreeTransitionsTx(
  pool: Pool,
  instanceIds: string[],
  cause: LightCause,
  p: LightParams,
  horizonMs: number,
  /** Receive times of heartbeats still waiting in Redis (HeartbeatState.waiting), judged as if written. */
  waiting: WaitingHeartbeats = NO_WAITING,
): Promise<RecordedChanges & { skipped: string[] }> {
  if (instanceIds.length === 0) return { ...NO_CHANGES, skipped: [] };
  return withTx(pool, async (c) => {
    const locked = await lockFreeInstances(c, instanceIds);
    const held = new Set(locked);
    const changes = await recordTransitions(c, locked, cause, p, horizonMs, false, waiting);
    return { ...changes, skipped: instanceIds.filter((id) => !held.has(id)) };
  });
}

/**
 * The horizon: a receive time up to which every accepted report has been applied. Silence is
 * judged at the horizon, not at the wall clock, so that reports still waiting in the queue (the
 * workers are behind, or were down) are never taken for silence: a heartbeat received in time
 * never turns its instance red, however late it is applied; and a whole fleet does not turn red
 * because its heartbeats sat in the stream.
 *
 * The streams (the main one and the heartbeat lane) have work-queue retention: a message leaves its
 * stream when a worker acks it, after applying it. So the oldest message still in either stream
 * bounds what is not applied yet; when both are empty, everything published is applied. Reports a gateway received but has not published yet
 * (a few milliseconds) are covered by MARGIN_MS. The answer is cached for CACHE_MS; when NATS cannot
 * answer, the last answer stands (a horizon only errs on the early side: red comes later, never
 * wrongly).
 */
export class Horizon {
  static readonly MARGIN_MS = 50;
  static readonly CACHE_MS = 100;
  private value = 0;
  private fetchedAt = 0;
  private inflight: Promise<number> | null = null;

  constructor(
    private readonly jsm: JetStreamManager | null,
    private readonly streamNames: readonly string[],
    private readonly log: Logger,
    /** Told how far the horizon is behind the wall clock (a metric). */
    private readonly onLag: (ms: number) => void = () => {},
  ) {}

  async get(): Promise<number> {
    if (!this.jsm) return Date.now() - Horizon.MARGIN_MS;
    if (Date.now() - this.fetchedAt < Horizon.CACHE_MS) return this.value;
    this.inflight ??= this.fetch().finally(() => (this.inflight = null));
    return this.inflight;
  }

  private async fetch(): Promise<number> {
    const asked = Date.now();
    try {
      // A stream deleted meanwhile (an old partition, drained and removed) holds nothing.
      const infos = await Promise.all(this.streamNames.map((n) => this.jsm!.streams.info(n).catch((e) => (isNotFound(e) ? null : Promise.reject(e)))));
      let oldest = asked;
      for (const info of infos) {
        if (!info) continue;
        const first = info.state.messages > 0 ? Date.parse(info.state.first_ts) : asked;
        if (Number.isFinite(first)) oldest = Math.min(oldest, first);
      }
      this.value = oldest - Horizon.MARGIN_MS;
      this.fetchedAt = asked;
      this.onLag(asked - this.value);
    } catch (e) {
      this.log.warn({ err: e }, 'stream state unknown (NATS): the traffic light keeps its last horizon');
    }
    return this.value;
  }
}

/** Where webhook jobs go (workers/webhooks.ts); the sink only needs to hand events over. */
export interface WebhookEnqueuer {
  /** `db`: where to look the webhooks up (the caller's connection when it holds one). */
  enqueue(events: LightEvent[], db?: Pool | PoolClient): Promise<void>;
}

/**
 * Where changes wait for e-mail digests (lib/store/mail-notifications.ts queueMailNotifications):
 * called with every delivery, on the caller's connection; idempotent for a copy of a change.
 */
export type MailEnqueuer = (events: LightEvent[], db: Pool | PoolClient) => Promise<unknown>;

/** NATS messages of the live stream: at most this many events each (core NATS payload limit). */
const EVENTS_PER_MESSAGE = 500;

export class LightEventSink {
  constructor(
    private readonly pool: Pool,
    private readonly ch: ClickHouseClient,
    private readonly nc: NatsConnection,
    private readonly subjectPrefix: string,
    private readonly webhooks: WebhookEnqueuer | null,
    private readonly log: Logger,
    private readonly onDelivered: (events: LightEvent[]) => void = () => {},
    private readonly mail: MailEnqueuer | null = null,
  ) {}

  /**
   * ClickHouse, then NATS, the webhook queue and the e-mail notifications, then out of the outbox. Every step is idempotent
   * for a copy of the same event, so a delivery that failed half-way is simply repeated.
   */
  async deliver(changes: RecordedChanges, client: Pool | PoolClient = this.pool): Promise<void> {
    const { events } = changes;
    if (events.length === 0) return;
    await insertLightEvents(this.ch, events);
    this.publish(events);
    const red = events.filter(notifiesWebhooks);
    if (red.length && this.webhooks) await this.webhooks.enqueue(red, client);
    if (this.mail) await this.mail(events, client);
    await deleteFromOutbox(client, changes.outbox);
    this.onDelivered(events);
  }

  /** The last delivery queued (`queue`): every later one starts after it. */
  private tail: Promise<void> = Promise.resolve();
  /** Events handed to `queue` and not yet delivered (or left to the outbox). */
  private queuedEvents = 0;

  /**
   * Delivers `events` after everything queued before them, one delivery at a time, in order: the
   * expiry listener and the sweep hand a batch's changes over and go on judging the next batch.
   * Resolves once they are delivered or left to the outbox (deliverOrLeave: it never rejects).
   * With nothing to deliver it resolves when what was queued before has gone.
   */
  queue(changes: RecordedChanges): Promise<void> {
    const n = changes.events.length;
    if (n === 0) return this.tail;
    this.queuedEvents += n;
    this.tail = this.tail.then(() => this.deliverOrLeave(changes)).finally(() => (this.queuedEvents -= n));
    return this.tail;
  }

  /** Events queued and not yet delivered (or left to the outbox). */
  get queued(): number {
    return this.queuedEvents;
  }

  /**
   * Resolves once at most `limit` events wait in the queue: a caller that records faster than
   * ClickHouse takes the changes (ClickHouse slow, not away: away fails fast into the outbox)
   * waits here instead of holding ever more of them in memory.
   */
  async queuedAtMost(limit: number): Promise<void> {
    while (this.queuedEvents > limit) await this.tail;
  }

  /** Delivers what `recordTransitions` returned; a failure leaves the events to the outbox drain. */
  async deliverOrLeave(changes: RecordedChanges): Promise<void> {
    try {
      await this.deliver(changes);
    } catch (e) {
      this.log.warn({ err: e, events: changes.events.length }, 'traffic-light events not delivered yet; the sweep delivers them from the outbox');
    }
  }

  private publish(events: LightEvent[]): void {
    if (this.nc.isClosed()) return;
    const byCustomer = new Map<string, LightEvent[]>();
    for (const e of events) {
      const list = byCustomer.get(e.customer_id);
      if (list) list.push(e);
      else byCustomer.set(e.customer_id, [e]);
    }
    const subj = subjects(this.subjectPrefix);
    for (const [customerId, list] of byCustomer) {
      for (let i = 0; i < list.length; i += EVENTS_PER_MESSAGE) {
        const msg: LightMessage = { v: 1, events: list.slice(i, i + EVENTS_PER_MESSAGE) };
        // Core NATS: fire-and-forget, like the stream it feeds. A dashboard that missed something
        // (reconnect) re-reads the instances, which are always right.
        this.nc.publish(subj.control(`light.${customerId}`), JSON.stringify(msg));
      }
    }
  }

  /**
   * Delivers outbox rows older than `olderThanMs` (their worker died or ClickHouse was away).
   * Called by the sweep, which one worker runs at a time; rows are locked while they are delivered.
   */
  async drainOutbox(olderThanMs: number, limit: number): Promise<number> {
    let total = 0;
    for (;;) {
      const { n, more } = await withTx(this.pool, async (c) => {
        const due = await lockOutboxOlderThan(c, olderThanMs, limit);
        if (due.events.length) await this.deliver(due, c);
        return { n: due.events.length, more: due.more };
      });
      total += n;
      if (!more) return total;
    }
  }
}

/**
 * What the ingest path calls (workers/apply-batch.ts): `inTransaction` after the batch's upsert,
 * in its transaction (the rows are locked already); `afterCommit` once the batch is applied.
 */
export class ReportLights {
  constructor(
    private readonly sink: LightEventSink,
    private readonly params: LightParams,
    private readonly horizon: Horizon,
    private readonly onEvents: (events: LightEvent[]) => void = () => {},
  ) {}

  async inTransaction(c: PoolClient, instanceIds: string[]): Promise<RecordedChanges> {
    return recordTransitions(c, instanceIds, 'report', this.params, await this.horizon.get(), false);
  }

  async afterCommit(changes: RecordedChanges): Promise<void> {
    if (changes.events.length === 0) return;
    this.onEvents(changes.events);
    await this.sink.deliverOrLeave(changes);
  }
}
