// The workers' side of the stream: one durable pull consumer shared by every worker replica.
// Messages are pulled by count (workers/pull.ts), gathered into a batch (WORKER_BATCH_MESSAGES
// messages or WORKER_BATCH_BYTES, or whatever arrived within WORKER_BATCH_WAIT_MS of the first),
// applied, and acked only once every effect is committed.
//
// Failures (lib/storage-errors.ts decides which is which):
//   unavailable  a server is down -> every message of the batch is nak'ed with a delay and
//                retried, for as long as it takes; never dead-lettered.
//   data         the reports at fault are isolated (workers/isolate.ts) and each is dead-lettered
//                alone, at once; every other report of the batch is applied and its message acked.
//   unknown      isolated the same way; the message of a failing report is retried until its
//                WORKER_MAX_DELIVER-th delivery, then that report alone is dead-lettered.
// A dead letter is one report in the dead-letter stream (byte for byte the report, the reason in
// headers) and one row in the rejection log of the report's own customer, whose detail names the
// error class and field, never the server's text (other customers' rows, table names).
//
// Liveness: a watchdog compares what this worker receives with what the consumer holds. Messages
// pending while this worker waits for one longer than WORKER_STALL_TIMEOUT_MS is a stall: it is
// logged, counted, shown in /readyz, and the pull is started afresh.
import type { Consumer, JetStreamClient, JsMsg } from 'nats';
import { deadLetterOf } from '../lib/dead-letters.js';
import type { Logger } from '../lib/log.js';
import type { Metrics } from '../lib/metrics.js';
import { decodeBatch, encodeBatch, DecodeError, type Report, type RejectionRecord } from '../lib/messages.js';
import { insertRows } from '../lib/db/clickhouse.js';
import { uuidFromName } from '../lib/ids.js';
import type { ReportChecker } from '../lib/report-check.js';
import { classifyFailure, type Failure } from '../lib/storage-errors.js';
import { applyBatch, type ApplyDeps } from './apply-batch.js';
import { applyIsolated } from './isolate.js';
import { MessagePuller, type PullOptions } from './pull.js';
import { chTime } from './reports.js';

export interface ConsumerOptions {
  reportsSubject: string;
  rejectionsSubject: string;
  deadLetterSubject: string;
  batchMaxMessages: number;
  /** Bytes of messages per batch (a message holds up to 512 reports). */
  batchMaxBytes: number;
  batchWaitMs: number;
  maxDeliver: number;
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
  report?: Report;
  rejection?: RejectionRecord;
}

const TIMEOUT = Symbol('timeout');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
      pending: metrics.gauge('fleet_worker_consumer_pending'),
      ackPending: metrics.gauge('fleet_worker_consumer_ack_pending'),
      stalls: metrics.counter('fleet_worker_consumer_stalls_total'),
    };
    const lastDelivery = metrics.gauge('fleet_worker_last_delivery_age_seconds');
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
    return null;
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
      const p: Promise<void> = this.handle(batch)
        .catch((e) => this.log.error({ err: e }, 'batch handling failed; its messages are redelivered after ACK_WAIT_S'))
        .finally(() => this.inflight.delete(p));
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
      this.log.warn({ err: e }, 'consumer state unknown (NATS)');
      return;
    } finally {
      this.watching = false;
    }
    this.consumerState = { pending: info.num_pending, ackPending: info.num_ack_pending, at: Date.now() };
    this.m.pending.set(info.num_pending);
    this.m.ackPending.set(info.num_ack_pending);
    const since = puller.waitingSince;
    if (since === null) return;
    const waited = Date.now() - Math.max(since, puller.lastDeliveryAt);
    const saturated = info.config.max_ack_pending !== undefined && info.config.max_ack_pending > 0 && info.num_ack_pending >= info.config.max_ack_pending;
    if (waited < this.opts.stallMs || info.num_pending === 0 || saturated) return;
    this.stalledSince ??= Date.now() - waited;
    this.m.stalls.inc();
    this.log.error({ pending: info.num_pending, ackPending: info.num_ack_pending, waitedMs: waited }, 'consumer stalled: messages pending but none delivered; restarting the pull');
    puller.restart();
  }

  private decode(msg: JsMsg): Unit[] {
    if (msg.subject === this.opts.rejectionsSubject) {
      let rec: RejectionRecord;
      try {
        rec = msg.json<RejectionRecord>();
      } catch (e) {
        throw new DecodeError(`rejection record is not JSON: ${(e as Error).message}`);
      }
      return [{ msg, rejection: rec }];
    }
    return decodeBatch(msg.data).r.map((report) => ({ msg, report }));
  }

  async handle(batch: JsMsg[]): Promise<void> {
    const units: Unit[] = [];
    const msgs: JsMsg[] = [];
    for (const msg of batch) {
      try {
        const u = this.decode(msg);
        if (u.length === 0) {
          msg.ack(); // an empty batch: nothing to apply
          continue;
        }
        units.push(...u);
        msgs.push(msg);
      } catch (e) {
        await this.deadLetterMessage(msg, e);
      }
    }
    if (units.length === 0) return;
    const started = Date.now();
    let isolation;
    let committed: number;
    try {
      isolation = await applyIsolated(units, (u) => this.apply(u), (u) => this.explain(u));
      committed = Date.now();
    } catch (e) {
      // A server is unavailable: nothing is lost, everything waits for it.
      this.m.retries.labels('unavailable').inc(msgs.length);
      this.log.warn({ err: e, messages: msgs.length }, 'batch failed: a server is unavailable; retrying');
      for (const m of msgs) m.nak(2000);
      await sleep(1000);
      return;
    }
    const retry = new Set<JsMsg>();
    if (isolation.applies > 1) {
      this.m.isolations.inc();
      this.log.warn({ units: units.length, failed: isolation.failed.length, unresolved: isolation.unresolved.length, applies: isolation.applies }, 'batch refused by storage; isolated the reports at fault');
    }
    for (const u of isolation.unresolved) retry.add(u.msg);
    for (const f of isolation.failed) {
      const deliveries = f.unit.msg.info.redeliveryCount;
      if (f.failure.kind === 'data' || deliveries >= this.opts.maxDeliver) {
        if (!(await this.deadLetterUnit(f.unit, f.error, f.failure))) retry.add(f.unit.msg);
      } else {
        this.log.warn({ err: f.error, deliveries, seq: f.unit.msg.seq, report: f.unit.report?.id }, 'report failed; its message will be retried');
        retry.add(f.unit.msg);
      }
    }
    const failedUnits = new Set<Unit>([...isolation.unresolved, ...isolation.failed.map((f) => f.unit)]);
    for (const m of msgs) {
      if (retry.has(m)) {
        this.m.retries.labels('failed').inc();
        m.nak(Math.min(500 * m.info.redeliveryCount, 5000));
      } else m.ack();
    }
    this.observe(units.filter((u) => !failedUnits.has(u) && !retry.has(u.msg)), started, committed);
  }

  private async apply(units: Unit[]): Promise<void> {
    const reports: Report[] = [];
    const rejections: RejectionRecord[] = [];
    for (const u of units) {
      if (u.report) reports.push(u.report);
      else if (u.rejection) rejections.push(u.rejection);
    }
    await applyBatch(this.deps, reports, rejections);
  }

  /** Why a report cannot be stored, by its schema (null: it looks storable, or is not a report). */
  private explain(u: Unit): string | null {
    if (!u.report) return null;
    const r = this.checker.check(u.report.k, u.report.b);
    return r ? r.detail.slice(0, 500) : null;
  }

  /** The applied reports: counted by kind, their age at the commit (receive -> committed), the batch's time. */
  private observe(units: Unit[], started: number, committed: number): void {
    const byKind = new Map<string, number>();
    let n = 0;
    for (const u of units) {
      const r = u.report;
      if (!r) continue;
      n++;
      byKind.set(r.k, (byKind.get(r.k) ?? 0) + 1);
      this.m.age(r.k)(Math.max(0, committed - r.at) / 1000);
    }
    for (const [kind, count] of byKind) this.m.reports.labels(kind).inc(count);
    this.m.batches.observe((Date.now() - started) / 1000);
    this.m.batchReports.observe(n);
  }

  /**
   * One report (or rejection record) to the dead-letter stream and the rejection log of its own
   * customer. False when the dead-letter stream did not take it (the message is then retried).
   */
  private async deadLetterUnit(u: Unit, err: unknown, failure: Failure): Promise<boolean> {
    const msg = u.msg;
    const deliveries = msg.info.redeliveryCount;
    const r = u.report;
    const id = r?.id ?? u.rejection?.id ?? `${msg.info.stream}-${msg.seq}`;
    this.log.error({ err, report: id, customer: r?.c, kind: r?.k, seq: msg.seq, deliveries, failure }, 'dead-lettering a report');
    const data = r ? encodeBatch([Buffer.from(JSON.stringify(r))]) : Buffer.from(JSON.stringify(u.rejection));
    if (!(await this.publishDeadLetter(data, msg, failure, failure.kind, u))) return false;
    if (r) {
      const now = Date.now();
      await insertRows(this.deps.ch, 'ingest_rejections', [
        {
          received_at: chTime(now),
          received_ms: now,
          id: uuidFromName('dead-letter', id),
          customer_id: r.c,
          customer: r.cs,
          token_id: r.t,
          method: 'QUEUE',
          path: `/api/ingest/${r.cs}/${r.m}/${r.s}/${r.k}`,
          status: 500,
          detail: `dead-lettered after ${deliveries} ${deliveries === 1 ? 'delivery' : 'deliveries'}: ${failure.reason}`,
          body_size: JSON.stringify(r.b ?? null).length,
          remote: '',
          dropped: 0,
        },
      ]).catch((e) => this.log.warn({ err: e }, 'rejection-log row for a dead letter failed'));
    }
    this.m.deadLetters.labels(failure.kind).inc();
    return true;
  }

  /** A message that is not a batch at all: byte for byte to the dead-letter stream; no customer known. */
  private async deadLetterMessage(msg: JsMsg, err: unknown): Promise<void> {
    const failure = classifyFailure(err);
    this.log.error({ err, seq: msg.seq, deliveries: msg.info.redeliveryCount }, 'dead-lettering an undecodable message');
    const id = `${msg.info.stream}-${msg.seq}`;
    if (!(await this.publishDeadLetter(msg.data, msg, failure, 'decode'))) {
      msg.nak(5000);
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
        detail: `dead-lettered after ${msg.info.redeliveryCount} deliveries: ${failure.reason}`,
        body_size: msg.data.length,
        remote: '',
        dropped: 0,
      },
    ]).catch((e) => this.log.warn({ err: e }, 'rejection-log row for a dead letter failed'));
    this.m.deadLetters.labels('decode').inc();
    msg.term();
  }

  private async publishDeadLetter(data: Uint8Array, msg: JsMsg, failure: Failure, failureClass: string, u?: Unit): Promise<boolean> {
    try {
      // Subject (per customer), headers and message id: the dead-letter format of lib/dead-letters.ts.
      const dl = deadLetterOf({
        base: this.opts.deadLetterSubject,
        failure,
        failureClass,
        source: { stream: msg.info.stream, seq: msg.seq, subject: msg.subject, deliveries: msg.info.redeliveryCount },
        report: u?.report,
        rejection: u?.rejection,
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
