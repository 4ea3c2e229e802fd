// The stored traffic light: deciding and recording changes of colour (docs/architecture.md
// "Traffic light").
//
// Three paths recompute an instance's colour with the same SQL the api uses (lib/domain/traffic-light.ts):
//   report  after the batch's upsert, in the same transaction (a heartbeat turns red into green,
//           status error turns red, a warning yellow, ...);
//   expiry  a Redis heartbeat key expired (workers/light-expiry.ts);
//   sweep   the repeatable job that finds what the expiry events missed (workers/light-sweep.ts).
// Each runs `recordTransitions`: an UPDATE conditional on the stored colour still being the one it
// saw, so of several workers (or paths) racing on one change exactly one records it; that UPDATE
// also bumps `light_seq` and writes the change into the `light_outbox` table in the same
// transaction. After the commit, `LightEventSink.deliver` writes the changes to ClickHouse
// (`light_events`, keyed by instance and seq), publishes them on NATS for the api's live stream,
// queues the webhooks, and only then deletes them from the outbox. A worker that dies in between
// leaves them in the outbox; the sweep delivers them again (every copy is the same event).
import type { JetStreamManager, NatsConnection } from 'nats';
import { withTx, type Pool, type PoolClient } from '../lib/infra/postgres.js';
import type { ClickHouseClient } from '../lib/infra/clickhouse.js';
import { insertRows } from '../lib/infra/clickhouse.js';
import type { Logger } from '../lib/infra/log.js';
import { subjects } from '../lib/contract/messages.js';
import {
  lightSql,
  lightReasonSql,
  lightAtSql,
  lightEventId,
  touchesRed,
  type LightCause,
  type LightColour,
  type LightEvent,
  type LightMessage,
} from '../lib/domain/traffic-light.js';
import { chTime } from './reports.js';

export interface LightParams {
  heartbeatTimeoutS: number;
  warningWindowS: number;
}

interface OutboxRow {
  instance_id: string;
  seq: number;
  customer_id: string;
  customer: string;
  machine_id: string;
  machine: string;
  software: string;
  from_light: LightColour;
  to_light: LightColour;
  reason: string;
  cause: LightCause;
  at: Date;
  recorded_at: Date;
}

const OUTBOX_COLUMNS = 'instance_id, seq, customer_id, customer, machine_id, machine, software, from_light, to_light, reason, cause, at, recorded_at';

function toEvent(r: OutboxRow): LightEvent {
  return {
    id: lightEventId(r.instance_id, Number(r.seq)),
    seq: Number(r.seq),
    customer_id: r.customer_id,
    customer: r.customer,
    instance_id: r.instance_id,
    machine_id: r.machine_id,
    machine: r.machine,
    software: r.software,
    from: r.from_light,
    to: r.to_light,
    reason: r.reason,
    cause: r.cause,
    at: r.at.toISOString(),
    recorded_at: r.recorded_at.toISOString(),
  };
}

/**
 * The time the SQL judges silence at: the horizon ($5, ms since the epoch), but never before the
 * time the stored colour was judged at. A report applied again (a batch retried, or redelivered
 * after a crash) is still in the stream, so the horizon goes back to its receive time; judged
 * there, an instance the sweep already found silent would look alive and flip back to green (and
 * red again at the next sweep: a change that never happened). Judgement time only moves forward.
 */
const H = (alias: string) =>
  `GREATEST(LEAST(now(), to_timestamp($5::float8 / 1000)), COALESCE(${alias}.light_judged_at, '-infinity'::timestamptz))`;

const TRANSITION_SQL = `
  WITH cur AS (
    SELECT i.id, i.customer_id, c.slug AS customer, i.machine_id, m.slug AS machine, i.software,
           i.light AS old_light, ${lightSql('i', '$2::float8', '$3::float8', H('i'))} AS new_light,
           ${lightReasonSql('i', '$2::float8', '$3::float8', H('i'))} AS reason, ${H('i')} AS judged_at,
           i.light_since, i.last_heartbeat_at, i.last_warning_at, i.last_seen_at, i.status_at, i.light
      FROM instances i JOIN machines m ON m.id = i.machine_id JOIN customers c ON c.id = i.customer_id
     WHERE i.id = ANY($1::uuid[])
  ), chg AS (
    SELECT cur.*, ${lightAtSql('cur', 'cur.new_light', '$2::float8', '$3::float8', 'cur.judged_at')} AS at
      FROM cur WHERE cur.new_light <> cur.old_light
  ), upd AS (
    UPDATE instances i
       SET light = chg.new_light, light_since = chg.at, light_reason = chg.reason, light_seq = i.light_seq + 1,
           light_judged_at = chg.judged_at
      FROM chg
     WHERE i.id = chg.id AND i.light = chg.old_light
    RETURNING i.id AS instance_id, i.light_seq AS seq, chg.customer_id, chg.customer, chg.machine_id, chg.machine, chg.software,
              chg.old_light AS from_light, chg.new_light AS to_light, chg.reason, chg.at
  )
  INSERT INTO light_outbox (${OUTBOX_COLUMNS})
  SELECT instance_id, seq, customer_id, customer, machine_id, machine, software, from_light, to_light, reason, $4::text, at, clock_timestamp()
    FROM upd
  RETURNING ${OUTBOX_COLUMNS}`;

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
): Promise<LightEvent[]> {
  if (instanceIds.length === 0) return [];
  if (lock) {
    await c.query(`SELECT 1 FROM instances WHERE id = ANY($1::uuid[]) ORDER BY machine_id, software COLLATE "C" FOR UPDATE`, [instanceIds]);
  }
  const r = await c.query<OutboxRow>(TRANSITION_SQL, [instanceIds, p.heartbeatTimeoutS, p.warningWindowS, cause, horizonMs]);
  return r.rows.map(toEvent);
}

/** `recordTransitions` in a transaction of its own (expiry events, the sweep). */
export async function recordTransitionsTx(pool: Pool, instanceIds: string[], cause: LightCause, p: LightParams, horizonMs: number): Promise<LightEvent[]> {
  if (instanceIds.length === 0) return [];
  return withTx(pool, (c) => recordTransitions(c, instanceIds, cause, p, horizonMs, true));
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
      const infos = await Promise.all(this.streamNames.map((n) => this.jsm!.streams.info(n)));
      let oldest = asked;
      for (const info of infos) {
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
  ) {}

  /**
   * ClickHouse, then NATS and the webhook queue, then out of the outbox. Every step is idempotent
   * for a copy of the same event, so a delivery that failed half-way is simply repeated.
   */
  async deliver(events: LightEvent[], client: Pool | PoolClient = this.pool): Promise<void> {
    if (events.length === 0) return;
    await insertRows(
      this.ch,
      'light_events',
      events.map((e) => {
        const at = Date.parse(e.at);
        return {
          at: chTime(at),
          at_ms: at,
          recorded_ms: Date.parse(e.recorded_at),
          customer_id: e.customer_id,
          customer: e.customer,
          machine_id: e.machine_id,
          machine: e.machine,
          software: e.software,
          instance_id: e.instance_id,
          seq: e.seq,
          from_light: e.from,
          to_light: e.to,
          reason: e.reason,
          cause: e.cause,
        };
      }),
    );
    this.publish(events);
    const red = events.filter(touchesRed);
    if (red.length && this.webhooks) await this.webhooks.enqueue(red, client);
    await client.query(`DELETE FROM light_outbox o USING unnest($1::uuid[], $2::bigint[]) AS d(i, s) WHERE o.instance_id = d.i AND o.seq = d.s`, [
      events.map((e) => e.instance_id),
      events.map((e) => e.seq),
    ]);
    this.onDelivered(events);
  }

  /** Delivers what `recordTransitions` returned; a failure leaves the events to the outbox drain. */
  async deliverOrLeave(events: LightEvent[]): Promise<void> {
    try {
      await this.deliver(events);
    } catch (e) {
      this.log.warn({ err: e, events: events.length }, 'traffic-light events not delivered yet; the sweep delivers them from the outbox');
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
      const n = await withTx(this.pool, async (c) => {
        const r = await c.query<OutboxRow>(
          `SELECT ${OUTBOX_COLUMNS} FROM light_outbox WHERE recorded_at < now() - make_interval(secs => $1::float8)
            ORDER BY recorded_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
          [olderThanMs / 1000, limit],
        );
        if (r.rows.length) await this.deliver(r.rows.map(toEvent), c);
        return r.rows.length;
      });
      total += n;
      if (n < limit) return total;
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

  async inTransaction(c: PoolClient, instanceIds: string[]): Promise<LightEvent[]> {
    return recordTransitions(c, instanceIds, 'report', this.params, await this.horizon.get(), false);
  }

  async afterCommit(events: LightEvent[]): Promise<void> {
    if (events.length === 0) return;
    this.onEvents(events);
    await this.sink.deliverOrLeave(events);
  }
}
