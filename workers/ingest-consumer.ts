// The workers' side of the stream: one durable pull consumer shared by every worker replica.
// Messages are pulled by count (workers/pull.ts), gathered into a batch (WORKER_BATCH_MESSAGES
// messages or WORKER_BATCH_BYTES, or whatever arrived within WORKER_BATCH_WAIT_MS of the first),
// applied, and acked only once every effect is committed.
//
// Failures (lib/infra/storage-errors.ts decides which is which, positively: only an error code that
// proves the data at fault, or the worker's own check, makes a failure `data`):
//   data    the reports at fault are isolated (workers/isolate.ts) and each is dead-lettered alone,
//           at once; every other report of the batch is applied and its message acked.
//   outage  anything else. A server that refuses as a whole: every message of the batch is nak'ed
//           and retried. Any other error: isolated the same way, and the message of a report
//           that fails alone is nak'ed and retried, its neighbours in other messages acked.
//           Retries come after a growing delay (0.5 s, doubling, at most WORKER_RETRY_MAX_MS), for
//           as long as the outage lasts, whatever the delivery count: an outage never makes a dead
//           letter. While a message waits, the worker names the dependency in /readyz and
//           fleet_worker_outage (workers/outages.ts). A batch that failed half-way is applied again
//           without inserting the ClickHouse rows that landed (LandedRows).
// A dead letter is one report in the dead-letter stream (its own bytes as queued, cut from the
// message, never re-serialised: nothing a report holds can make dead-lettering throw; the reason
// in headers) and one row in the rejection log of the report's own customer, whose detail names
// the error class and field, never the server's text (other customers' rows, table names). A
// dead letter the stream does not take leaves its message to be retried (an outage of `nats`).
//
// Liveness: a watchdog compares what this worker receives with what the consumer holds. Messages
// pending while this worker waits for one longer than WORKER_STALL_TIMEOUT_MS is a stall: it is
// logged, counted, shown in /readyz, and the pull is started afresh. A consumer whose messages
// delivered and not acked reach its max_ack_pending delivers nothing to any worker: that is shown
// in /readyz too.
import type { Consumer, JetStreamClient, JsMsg } from 'nats';
import { deadLetterOf } from '../lib/store/dead-letters.js';
import type { Logger } from '../lib/infra/log.js';
import type { Metrics } from '../lib/infra/metrics.js';
import { decodeBatch, encodeBatch, reportSlices, shareRepeated, toReport, toWire, DecodeError, type Report, type RejectionRecord } from '../lib/contract/messages.js';
import { chTime, insertRows } from '../lib/infra/clickhouse.js';
import { isUuid, uuidFromName } from '../lib/contract/ids.js';
import { envelopeRefusal, type ReportChecker } from '../lib/domain/report-check.js';
import { classifyFailure, type Failure } from '../lib/infra/storage-errors.js';
import { applyBatch, type ApplyDeps, type RowLedger } from './apply-batch.js';
import { applyIsolated } from './isolate.js';
import { MessagePuller, type PullOptions } from './pull.js';
import { LandedRows, Outages } from './outages.js';

export interface ConsumerOptions {
  /** Which stream this consumer pulls (lib/contract/messages.ts): `reports` (the main one) or `heartbeats`; a metric label. */
  lane: string;
  /** Which ingest partition's stream (lib/contract/messages.ts): a metric label, `0` without partitions. */
  partition: string;
  reportsSubject: string;
  rejectionsSubject: string;
  deadLetterSubject: string;
  batchMaxMessages: number;
  /** Bytes of messages per batch (a message holds up to 512 reports). */
  batchMaxBytes: number;
  batchWaitMs: number;
  /** The longest wait before a message that waits for an outage is tried again. */
  retryMaxMs: number;
  /** Batches applied at once by this worker. */
  concurrency: number;
  pull: PullOptions;
  /** Waiting this long for a message while the consumer has some pending is a stall. */
  stallMs: number;
  /** How often the watchdog looks. */
  watchdogMs: number;
}

/** One thing a batch applies: a report, or a rejection-log record, with the message it came in. */
interface Unit {
  msg: JsMsg;
  /** Its place among the message's reports, and how many the message holds. */
  index: number;
  total: number;
  /** The report as decoded from the queue (from a publisher that bypassed the gateway: maybe not even an object). */
  wire?: unknown;
  /** The report, readable: set when `wire` is an object. What the apply gets. */
  report?: Report;
  rejection?: RejectionRecord;
}

/** The first retry of a message waits this long; each further one twice as long, up to retryMaxMs. */
const FIRST_RETRY_MS = 500;
/** A message counts as waiting until this long after its retry was due (another worker may have taken it). */
const WAIT_GRACE_MS = 15_000;
const DEAD_LETTERED = 'dead-letter';
const DLQ_REFUSED: Failure = { kind: 'outage', dependency: 'nats', reason: 'the dead-letter stream refused the publish', whole: false };

const TIMEOUT = Symbol('timeout');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const isObject = (v: unknown): boolean => v !== null && typeof v === 'object' && !Array.isArray(v);

export class IngestConsumer {
  private stopping = false;
  private puller: MessagePuller | null = null;
  private done: Promise<void> | null = null;
  private readonly inflight = new Set<Promise<void>>();
  private watchdog: NodeJS.Timeout | null = null;
  /** Set while the watchdog sees a stall; cleared by the next delivery. */
  stalledSince: number | null = null;
  /** Last consumer state the watchdog read, null when it could not (NATS away). */
  consumerState: { pending: number; ackPending: number; at: number } | null = null;
  /** Set while the consumer's unacked messages are at its max_ack_pending (nothing is delivered). */
  saturated: { ackPending: number; max: number } | null = null;
  /** The messages this worker nak'ed to wait for an outage, and what they wait for. */
  readonly outages = new Outages(WAIT_GRACE_MS);
  /** ClickHouse rows that landed for reports whose message is retried (applied once). */
  private readonly landed = new LandedRows();
  private startedAt = Date.now();
  private watching = false;
  private readonly m;

  constructor(
    private readonly consumer: Consumer,
    private readonly js: JetStreamClient,
    private readonly deps: ApplyDeps,
    private readonly checker: ReportChecker,
    private readonly opts: ConsumerOptions,
    private readonly log: Logger,
    metrics: Metrics<'worker'>,
  ) {
    const age = metrics.hotHistogram('fleet_worker_report_age_seconds');
    const ageByKind = new Map<string, (seconds: number) => void>();
    this.m = {
      reports: metrics.counter('fleet_worker_reports_total'),
      /** The report-age observer of one kind (made once per kind). */
      age: (kind: string) => {
        let o = ageByKind.get(kind);
        if (!o) ageByKind.set(kind, (o = age.observer(kind)));
        return o;
      },
      batches: metrics.histogram('fleet_worker_batch_duration_seconds'),
      batchReports: metrics.histogram('fleet_worker_batch_reports'),
      retries: metrics.counter('fleet_worker_retries_total'),
      deadLetters: metrics.counter('fleet_worker_dead_letters_total'),
      isolations: metrics.counter('fleet_worker_isolations_total'),
      pending: metrics.gauge('fleet_worker_consumer_pending').labels(opts.lane, opts.partition),
      ackPending: metrics.gauge('fleet_worker_consumer_ack_pending').labels(opts.lane, opts.partition),
      stalls: metrics.counter('fleet_worker_consumer_stalls_total').labels(opts.lane, opts.partition),
    };
    const lastDelivery = metrics.gauge('fleet_worker_last_delivery_age_seconds').labels(opts.lane, opts.partition);
    metrics.onScrape(() => lastDelivery.set(this.puller ? (Date.now() - this.puller.lastDeliveryAt) / 1000 : 0));
  }

  start(): void {
    this.startedAt = Date.now();
    this.puller = new MessagePuller(this.consumer, this.opts.pull, this.log);
    this.done = this.loop(this.puller);
    this.watchdog = setInterval(() => void this.watch(), this.opts.watchdogMs);
    this.watchdog.unref();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.watchdog) clearInterval(this.watchdog);
    // Stop pulling; what was already pulled and not acked is redelivered to another worker.
    this.puller?.stop();
    await this.done;
  }

  /** Why this worker is not doing its job, or null. */
  problem(): string | null {
    if (this.stalledSince !== null) return `stalled for ${Math.round((Date.now() - this.stalledSince) / 1000)} s (messages pending, none delivered)`;
    const seen = this.consumerState?.at ?? this.startedAt;
    if (Date.now() - seen > 3 * this.opts.watchdogMs + 2000) return 'NATS (JetStream) not answering';
    if (this.saturated) {
      return `saturated: ${this.saturated.ackPending} messages delivered and not acked (max_ack_pending ${this.saturated.max}); no worker gets more until some are acked`;
    }
    return null;
  }

  /** What this worker's messages wait for (an outage), or null. */
  outageProblem(): string | null {
    return this.outages.problem();
  }

  private async loop(source: MessagePuller): Promise<void> {
    const it = source[Symbol.asyncIterator]();
    let next = it.next();
    while (!this.stopping) {
      const first = await next;
      if (first.done) break;
      this.stalledSince = null;
      const batch: JsMsg[] = [first.value];
      let bytes = first.value.data.length;
      next = it.next();
      const deadline = Date.now() + this.opts.batchWaitMs;
      while (batch.length < this.opts.batchMaxMessages && bytes < this.opts.batchMaxBytes) {
        const left = deadline - Date.now();
        if (left <= 0) break;
        let timer: NodeJS.Timeout | undefined;
        const r = await Promise.race([next, new Promise<typeof TIMEOUT>((res) => (timer = setTimeout(() => res(TIMEOUT), left)))]);
        clearTimeout(timer);
        if (r === TIMEOUT || r.done) break;
        batch.push(r.value);
        bytes += r.value.data.length;
        next = it.next();
      }
      // Up to WORKER_CONCURRENCY batches at once: while one waits for Postgres or ClickHouse, the
      // next is decoded and prepared. Each is acked on its own; the writes are idempotent and take
      // their locks in one order, so concurrent batches never deadlock (at worst one waits).
      const p: Promise<void> = this.handle(batch).finally(() => this.inflight.delete(p));
      this.inflight.add(p);
      if (this.inflight.size >= this.opts.concurrency) await Promise.race(this.inflight);
    }
    await Promise.all(this.inflight);
  }

  /** The watchdog: consumer state into the metrics; a stall into the log, /readyz and a new pull. */
  private async watch(): Promise<void> {
    const puller = this.puller;
    if (!puller || this.stopping || this.watching) return;
    this.watching = true;
    let info;
    try {
      info = await this.consumer.info(false);
    } catch (e) {
      this.log.warn({ err: e, lane: this.opts.lane, partition: this.opts.partition }, 'consumer state unknown (NATS)');
      return;
    } finally {
      this.watching = false;
    }
    this.consumerState = { pending: info.num_pending, ackPending: info.num_ack_pending, at: Date.now() };
    this.m.pending.set(info.num_pending);
    this.m.ackPending.set(info.num_ack_pending);
    const max = info.config.max_ack_pending;
    const saturated = max !== undefined && max > 0 && info.num_ack_pending >= max;
    if (saturated && !this.saturated) this.log.error({ lane: this.opts.lane, ackPending: info.num_ack_pending, max }, 'consumer saturated: as many messages delivered and not acked as max_ack_pending; nothing more is delivered');
    this.saturated = saturated ? { ackPending: info.num_ack_pending, max } : null;
    const since = puller.waitingSince;
    if (since === null) return;
    const waited = Date.now() - Math.max(since, puller.lastDeliveryAt);
    // A saturated consumer delivers nothing by design: a new pull would not help (reported above).
    if (waited < this.opts.stallMs || info.num_pending === 0 || saturated) return;
    this.stalledSince ??= Date.now() - waited;
    this.m.stalls.inc();
    this.log.error({ lane: this.opts.lane, pending: info.num_pending, ackPending: info.num_ack_pending, waitedMs: waited }, 'consumer stalled: messages pending but none delivered; restarting the pull');
    puller.restart();
  }

  /** The strings the reports of every batch repeat, one copy each (lib/contract/messages.ts shareRepeated). */
  private readonly sharedStrings = new Map<string, string>();

  private decode(msg: JsMsg): Unit[] {
    if (msg.subject === this.opts.rejectionsSubject) {
      let rec: RejectionRecord;
      try {
        rec = msg.json<RejectionRecord>();
      } catch (e) {
        throw new DecodeError(`rejection record is not JSON: ${(e as Error).message}`);
      }
      if (!isObject(rec)) throw new DecodeError('rejection record is not an object');
      return [{ msg, index: 0, total: 1, rejection: rec }];
    }
    const r = decodeBatch(msg.data).r;
    const shared = this.sharedStrings;
    return r.map((wire, index) => {
      if (!isObject(wire)) return { msg, index, total: r.length, wire, report: undefined };
      shareRepeated(wire, shared);
      return { msg, index, total: r.length, wire, report: toReport(wire) };
    });
  }

  /** How long message `m` waits before its next try: doubling with each delivery, capped. */
  private retryDelay(m: JsMsg): number {
    return Math.min(this.opts.retryMaxMs, FIRST_RETRY_MS * 2 ** Math.min(20, Math.max(0, m.info.redeliveryCount - 1)));
  }

  private key = (m: JsMsg) => `${m.info.stream}:${m.seq}`;
  /** The report's (or record's) id when it is a UUID (as every gateway writes it), else its place in the stream. */
  private idOf = (u: Unit): string => {
    const id = u.report ? u.report.id : u.rejection?.id;
    return typeof id === 'string' && isUuid(id) ? id : `${u.msg.info.stream}-${u.msg.seq}-${u.index}`;
  };

  /** `m` is tried again later; `failure` (an outage) is what it waits for. */
  private retry(m: JsMsg, failure: Failure | null, settled: Set<JsMsg>): void {
    if (settled.has(m)) return;
    settled.add(m);
    const delay = this.retryDelay(m);
    if (failure?.kind === 'outage') this.outages.wait(this.key(m), failure, delay);
    this.m.retries.labels(failure?.dependency ?? 'worker').inc();
    m.nak(delay);
  }

  private ack(m: JsMsg, units: Unit[], settled: Set<JsMsg>): void {
    if (settled.has(m)) return;
    settled.add(m);
    m.ack();
    this.outages.done(this.key(m));
    if (this.landed.size > 0) this.landed.forget(units.map(this.idOf));
  }

  /**
   * Applies a batch and settles every message of it: acked, nak'ed for a retry, or dead-lettered.
   * Never throws: whatever goes wrong unexpectedly leaves the messages not yet settled to a retry.
   */
  async handle(batch: JsMsg[]): Promise<void> {
    const settled = new Set<JsMsg>();
    try {
      await this.handleBatch(batch, settled);
    } catch (e) {
      const failure = classifyFailure(e);
      this.log.error({ err: e, failure }, 'batch handling failed unexpectedly; its messages are retried');
      for (const m of batch) this.retry(m, failure.kind === 'outage' ? failure : { ...failure, kind: 'outage', dependency: 'worker' }, settled);
    }
  }

  private async handleBatch(batch: JsMsg[], settled: Set<JsMsg>): Promise<void> {
    const units: Unit[] = [];
    const msgs: JsMsg[] = [];
    const unitsOf = new Map<JsMsg, Unit[]>();
    const retry = new Map<JsMsg, Failure | null>();
    for (const msg of batch) {
      let us: Unit[];
      try {
        us = this.decode(msg);
      } catch (e) {
        await this.deadLetterMessage(msg, e, settled);
        continue;
      }
      unitsOf.set(msg, us);
      const todo: Unit[] = [];
      for (const u of us) {
        // Dead-lettered before, while its message had to be retried for a neighbour: done.
        if (this.landed.size > 0 && this.landed.has(DEAD_LETTERED, this.idOf(u))) continue;
        // Not an object: nothing to apply, and nothing the apply could refuse: data at fault.
        if (u.wire !== undefined && !isObject(u.wire)) {
          const f = await this.deadLetterUnit(u, null, { kind: 'data', reason: 'not storable: envelope: a report must be an object', dependency: 'worker', whole: false });
          if (f) retry.set(msg, f);
          continue;
        }
        todo.push(u);
      }
      if (todo.length === 0 && !retry.has(msg)) {
        this.ack(msg, us, settled); // an empty batch, or nothing left to apply
        continue;
      }
      units.push(...todo);
      msgs.push(msg);
    }
    if (units.length === 0) {
      for (const m of msgs) this.settle(m, retry, unitsOf, settled);
      return;
    }
    const started = Date.now();
    // The first apply is the whole batch: when it succeeds every message is acked (unless one
    // already waits), so what it inserted need not be remembered. Any other apply may be followed
    // by a retry of its messages.
    let first = true;
    const apply = async (part: Unit[]) => {
      const whole = first && retry.size === 0;
      first = false;
      const ledger = this.landed.ledger();
      try {
        await this.apply(part, ledger);
      } catch (e) {
        ledger.commit();
        throw e;
      }
      if (!whole) ledger.commit();
    };
    let isolation;
    try {
      isolation = await applyIsolated(units, apply, (u) => this.explain(u));
    } catch (e) {
      // A server refuses as a whole: nothing is lost, everything waits for it.
      const failure = classifyFailure(e);
      const deliveries = Math.max(...msgs.map((m) => m.info.redeliveryCount));
      this.log.warn({ err: e, messages: msgs.length, deliveries, failure }, `batch waits for ${failure.dependency}: ${failure.reason}; retrying`);
      for (const m of msgs) this.retry(m, failure, settled);
      await sleep(1000);
      return;
    }
    const committed = Date.now();
    if (isolation.applies > 1) {
      this.m.isolations.inc();
      this.log.warn({ units: units.length, failed: isolation.failed.length, unresolved: isolation.unresolved.length, applies: isolation.applies }, 'batch refused by storage; isolated the reports at fault');
    }
    if (isolation.unresolved.length > 0) {
      // Left for a later delivery, which groups them differently. An outage is what they wait for.
      const f = classifyFailure(isolation.error);
      for (const u of isolation.unresolved) if (!retry.has(u.msg)) retry.set(u.msg, f.kind === 'outage' ? f : null);
    }
    for (const f of isolation.failed) {
      if (f.failure.kind === 'data') {
        const refused = await this.deadLetterUnit(f.unit, f.error, f.failure);
        if (refused) retry.set(f.unit.msg, refused);
      } else {
        this.log.warn(
          { err: f.error, failure: f.failure, deliveries: f.unit.msg.info.redeliveryCount, seq: f.unit.msg.seq, report: f.unit.report?.id },
          `report waits for ${f.failure.dependency}: ${f.failure.reason}; its message is retried`,
        );
        retry.set(f.unit.msg, f.failure);
      }
    }
    for (const m of msgs) this.settle(m, retry, unitsOf, settled);
    const failedUnits = new Set<Unit>([...isolation.unresolved, ...isolation.failed.map((f) => f.unit)]);
    this.observe(units.filter((u) => !failedUnits.has(u) && !retry.has(u.msg)), started, committed);
  }

  private settle(m: JsMsg, retry: Map<JsMsg, Failure | null>, unitsOf: Map<JsMsg, Unit[]>, settled: Set<JsMsg>): void {
    if (retry.has(m)) this.retry(m, retry.get(m)!, settled);
    else this.ack(m, unitsOf.get(m) ?? [], settled);
  }

  private async apply(units: Unit[], rows: RowLedger): Promise<void> {
    const reports: Report[] = [];
    const rejections: RejectionRecord[] = [];
    const customerOf = (u: Unit) => u.report?.customerId ?? u.rejection?.customer_id ?? '';
    // Reports of a customer being deleted (offboarding) are dropped, never applied: asked on every
    // attempt, so a batch retried across the deletion drops them too (workers/live-customers.ts).
    const gone = this.deps.customers ? await this.deps.customers.goneOf(units.map(customerOf)) : null;
    const dropped = new Map<string, number>();
    for (const u of units) {
      const c = customerOf(u);
      if (gone?.has(c)) dropped.set(c, (dropped.get(c) ?? 0) + 1);
      else if (u.report) reports.push(u.report);
      else if (u.rejection) rejections.push(u.rejection);
    }
    if (dropped.size > 0) {
      this.log.info({ dropped: Object.fromEntries(dropped) }, 'reports of a deleted customer dropped (offboarding: it is being deleted or gone)');
      if (reports.length === 0 && rejections.length === 0) return;
    }
    await applyBatch({ ...this.deps, rows }, reports, rejections);
  }

  /** Why a report cannot be stored, by its envelope and schema (null: it looks storable, or is not a report). */
  private explain(u: Unit): string | null {
    if (!u.report) return null;
    try {
      // The envelope as applied: the idempotency settle may have given it the first copy's receive time.
      const why = envelopeRefusal(toWire(u.report)) ?? this.checker.check(u.report.kind, u.report.body)?.detail ?? null;
      // At most 500 characters, keeping the end (a path 1,000 levels deep ends in what is wrong with it).
      return why === null || why.length <= 500 ? why : `${why.slice(0, 300)}…${why.slice(-199)}`;
    } catch (e) {
      // The check itself failed: it proves nothing; the report's own error decides.
      this.log.warn({ err: e, report: u.report.id }, 'report check failed');
      return null;
    }
  }

  /** The applied reports: counted by kind, their age at the commit (receive -> committed), the batch's time. */
  private observe(units: Unit[], started: number, committed: number): void {
    const byKind = new Map<string, number>();
    let n = 0;
    for (const u of units) {
      const r = u.report;
      if (!r) continue;
      n++;
      byKind.set(r.kind, (byKind.get(r.kind) ?? 0) + 1);
      this.m.age(r.kind)(Math.max(0, committed - r.receivedAt) / 1000);
    }
    for (const [kind, count] of byKind) this.m.reports.labels(kind).inc(count);
    this.m.batches.observe((Date.now() - started) / 1000);
    this.m.batchReports.observe(n);
  }

  /** The bytes a dead letter of `u` carries: its report cut from the message as queued, or the whole message. */
  private rawOf(u: Unit): Uint8Array {
    if (u.rejection) return u.msg.data; // a rejection record: one per message
    const slices = reportSlices(u.msg.data);
    const own = slices && slices.length === u.total ? slices[u.index] : undefined;
    // A message this cannot cut up (written by something else than a gateway) is kept whole; the
    // Fleet-Report-Id header names the report, and a replay applies the others again (idempotently).
    return own ? encodeBatch([Buffer.from(own.buffer, own.byteOffset, own.byteLength)]) : u.msg.data;
  }

  /**
   * One report (or rejection record) to the dead-letter stream and the rejection log of its own
   * customer. Null when done; else what it waits for (the dead-letter stream refused the publish:
   * the message is retried). Never throws.
   */
  private async deadLetterUnit(u: Unit, err: unknown, failure: Failure): Promise<Failure | null> {
    try {
      const msg = u.msg;
      const deliveries = msg.info.redeliveryCount;
      const r = u.report;
      const id = this.idOf(u);
      this.log.error({ err, report: id, customer: r?.customerId, kind: r?.kind, seq: msg.seq, deliveries, failure }, 'dead-lettering a report');
      const data = this.rawOf(u);
      if (!(await this.publishDeadLetter(data, msg, failure, 'data', u))) return DLQ_REFUSED;
      this.landed.add(DEAD_LETTERED, [id]);
      if (r && typeof r.customerId === 'string') {
        const now = Date.now();
        await insertRows(this.deps.ch, 'ingest_rejections', [
          {
            received_at: chTime(now),
            received_ms: now,
            id: uuidFromName('dead-letter', id),
            customer_id: r.customerId,
            customer: String(r.customer),
            token_id: String(r.tokenId),
            method: 'QUEUE',
            path: `/api/ingest/${r.customer}/${r.machine}/${r.software}/${r.kind}`,
            status: 500,
            detail: `dead-lettered after ${deliveries} ${deliveries === 1 ? 'delivery' : 'deliveries'}: ${failure.reason}`,
            body_size: data.length,
            remote: '',
            dropped: 0,
          },
        ]).catch((e) => this.log.warn({ err: e }, 'rejection-log row for a dead letter failed'));
      }
      this.m.deadLetters.labels('data').inc();
      return null;
    } catch (e) {
      this.log.error({ err: e }, 'dead-lettering failed; the message is retried');
      return { kind: 'outage', dependency: 'worker', reason: 'dead-lettering failed', whole: false };
    }
  }

  /** A message that is not a batch at all: byte for byte to the dead-letter stream; no customer known. */
  private async deadLetterMessage(msg: JsMsg, err: unknown, settled: Set<JsMsg>): Promise<void> {
    const failure = classifyFailure(err);
    this.log.error({ err, seq: msg.seq, deliveries: msg.info.redeliveryCount }, 'dead-lettering an undecodable message');
    const id = `${msg.info.stream}-${msg.seq}`;
    if (!(await this.publishDeadLetter(msg.data, msg, failure, 'decode'))) {
      this.retry(msg, DLQ_REFUSED, settled);
      return;
    }
    const now = Date.now();
    await insertRows(this.deps.ch, 'ingest_rejections', [
      {
        received_at: chTime(now),
        received_ms: now,
        id: uuidFromName('dead-letter', id),
        customer_id: '',
        customer: '',
        token_id: '',
        method: 'QUEUE',
        path: msg.subject,
        status: 500,
        detail: `dead-lettered after ${msg.info.redeliveryCount} deliver${msg.info.redeliveryCount === 1 ? 'y' : 'ies'}: ${failure.reason}`,
        body_size: msg.data.length,
        remote: '',
        dropped: 0,
      },
    ]).catch((e) => this.log.warn({ err: e }, 'rejection-log row for a dead letter failed'));
    this.m.deadLetters.labels('decode').inc();
    settled.add(msg);
    this.outages.done(this.key(msg));
    msg.term();
  }

  private async publishDeadLetter(data: Uint8Array, msg: JsMsg, failure: Failure, failureClass: string, u?: Unit): Promise<boolean> {
    try {
      // Subject (per customer), headers and message id: the dead-letter format of lib/store/dead-letters.ts.
      const dl = deadLetterOf({
        base: this.opts.deadLetterSubject,
        failure,
        failureClass,
        source: { stream: msg.info.stream, seq: msg.seq, subject: msg.subject, deliveries: msg.info.redeliveryCount, index: u && u.rejection === undefined ? u.index : undefined },
        // A report that is not even an object (a publisher that bypassed the gateway) names nothing.
        report: u?.report,
        rejection: u && isObject(u.rejection) ? u.rejection : undefined,
      });
      await this.js.publish(dl.subject, data, { headers: dl.headers, msgID: dl.msgID });
      return true;
    } catch (e) {
      // Without a copy in the dead-letter stream the report must stay where it is.
      this.log.error({ err: e }, 'dead-letter publish failed; leaving the message for redelivery');
      return false;
    }
  }
}
