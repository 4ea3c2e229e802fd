// The workers' side of the stream: one durable pull consumer shared by every worker replica.
// Messages are gathered into a batch (WORKER_BATCH_MESSAGES messages, or whatever arrived within
// WORKER_BATCH_WAIT_MS of the first), applied, and acked only once every effect is committed.
//
// Failures: a server that is down (transient) -> the batch is nak'ed with a delay and retried, for
// as long as it takes; never dead-lettered. A failure caused by the data -> the batch is retried
// message by message, so one bad message cannot hold back the others; a message that still fails
// after WORKER_MAX_DELIVER deliveries goes to the dead-letter stream (and the rejection log), and
// the stream moves on.
import type { Consumer, ConsumerMessages, JetStreamClient, JsMsg } from 'nats';
import { headers } from 'nats';
import { randomUUID } from 'node:crypto';
import type { Logger } from '../lib/log.js';
import type { Metrics } from '../lib/metrics.js';
import { decodeBatch, DecodeError, type Report, type RejectionRecord } from '../lib/messages.js';
import { isTransientPgError } from '../lib/db/postgres.js';
import { insertRows } from '../lib/db/clickhouse.js';
import { applyBatch, type ApplyDeps } from './apply-batch.js';
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
}

interface Decoded {
  msg: JsMsg;
  reports: Report[];
  rejections: RejectionRecord[];
}

const TIMEOUT = Symbol('timeout');
/** Half the NATS server's default per-client buffer (max_pending, 64 MiB). */
const PULL_MAX_BYTES = 32 * 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class IngestConsumer {
  private stopping = false;
  private messages: ConsumerMessages | null = null;
  private done: Promise<void> | null = null;
  private readonly m;

  constructor(
    private readonly consumer: Consumer,
    private readonly js: JetStreamClient,
    private readonly deps: ApplyDeps,
    private readonly opts: ConsumerOptions,
    private readonly log: Logger,
    metrics: Metrics,
  ) {
    this.m = {
      reports: metrics.counter('worker_reports_total', 'Reports applied', ['kind']),
      batches: metrics.histogram('worker_batch_seconds', 'Time to apply one batch', [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]),
      batchReports: metrics.histogram('worker_batch_reports', 'Reports per applied batch', [1, 10, 100, 1000, 5000, 10000, 50000]),
      retries: metrics.counter('worker_retries_total', 'Batches or messages nak-ed for a retry', ['reason']),
      deadLettered: metrics.counter('worker_dead_lettered_total', 'Messages moved to the dead-letter stream'),
      lagMs: metrics.gauge('worker_last_report_lag_ms', 'Receive-to-commit time of the newest report of the last batch'),
    };
  }

  start(): void {
    this.done = this.run();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    // Stop pulling; what was already pulled and not acked is redelivered to another worker.
    this.messages?.stop();
    await this.done;
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      try {
        // Bounded by bytes, not messages: a backlog of full gateway messages (up to 512 KiB each)
        // pulled by count overflowed the server's 64 MiB per-client buffer, and NATS cut the worker
        // off as a slow consumer again and again (a 1,000,000-report drain ran at 17k/s, idle).
        this.messages = await this.consumer.consume({ max_bytes: Math.min(this.opts.batchMaxBytes * (this.opts.concurrency + 1), PULL_MAX_BYTES) });
        await this.loop(this.messages);
      } catch (e) {
        if (this.stopping) break;
        this.log.error({ err: e }, 'consumer failed; reconnecting in 1 s');
        await sleep(1000);
      }
    }
  }

  private async loop(messages: ConsumerMessages): Promise<void> {
    const it = messages[Symbol.asyncIterator]();
    let next = it.next();
    while (!this.stopping) {
      const first = await next;
      if (first.done) break;
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
        if (r === TIMEOUT) break;
        if (r.done) break;
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

  private readonly inflight = new Set<Promise<void>>();

  private decode(msg: JsMsg): Decoded {
    if (msg.subject === this.opts.rejectionsSubject) {
      let rec: RejectionRecord;
      try {
        rec = msg.json<RejectionRecord>();
      } catch (e) {
        throw new DecodeError(`rejection record is not JSON: ${(e as Error).message}`);
      }
      return { msg, reports: [], rejections: [rec] };
    }
    return { msg, reports: decodeBatch(msg.data).r, rejections: [] };
  }

  async handle(batch: JsMsg[]): Promise<void> {
    const decoded: Decoded[] = [];
    for (const msg of batch) {
      try {
        decoded.push(this.decode(msg));
      } catch (e) {
        await this.deadLetter(msg, e, null);
      }
    }
    if (decoded.length === 0) return;
    const started = Date.now();
    try {
      await this.apply(decoded);
      for (const d of decoded) d.msg.ack();
      this.observe(decoded, started);
      return;
    } catch (e) {
      if (isTransient(e)) {
        this.m.retries.labels('transient').inc(decoded.length);
        this.log.warn({ err: e, messages: decoded.length }, 'batch failed: a server is unavailable; retrying');
        for (const d of decoded) d.msg.nak(2000);
        await sleep(1000);
        return;
      }
      this.log.warn({ err: e, messages: decoded.length }, 'batch failed; retrying message by message');
    }
    // Isolate the message(s) at fault.
    for (const d of decoded) {
      const t0 = Date.now();
      try {
        await this.apply([d]);
        d.msg.ack();
        this.observe([d], t0);
      } catch (e) {
        if (isTransient(e)) {
          this.m.retries.labels('transient').inc();
          d.msg.nak(2000);
        } else if (d.msg.info.redeliveryCount >= this.opts.maxDeliver) {
          await this.deadLetter(d.msg, e, d);
        } else {
          this.m.retries.labels('data').inc();
          this.log.warn({ err: e, deliveries: d.msg.info.redeliveryCount, seq: d.msg.seq }, 'message failed; will retry');
          d.msg.nak(1000 * d.msg.info.redeliveryCount);
        }
      }
    }
  }

  private async apply(decoded: Decoded[]): Promise<void> {
    const reports = decoded.flatMap((d) => d.reports);
    const rejections = decoded.flatMap((d) => d.rejections);
    await applyBatch(this.deps, reports, rejections);
  }

  private observe(decoded: Decoded[], started: number): void {
    const now = Date.now();
    let n = 0;
    let newest = 0;
    for (const d of decoded) {
      for (const r of d.reports) {
        this.m.reports.labels(r.k).inc();
        if (r.at > newest) newest = r.at;
      }
      n += d.reports.length;
    }
    this.m.batches.observe((now - started) / 1000);
    this.m.batchReports.observe(n);
    if (newest) this.m.lagMs.set(now - newest);
  }

  /** Moves a message to the dead-letter stream byte for byte, logs it, and lets the stream move on. */
  private async deadLetter(msg: JsMsg, err: unknown, decoded: Decoded | null): Promise<void> {
    const reason = `${(err as Error)?.message ?? err}`.slice(0, 1000);
    this.log.error({ err, seq: msg.seq, deliveries: msg.info.redeliveryCount }, 'dead-lettering message');
    try {
      const h = headers();
      h.set('Fleet-Error', reason.replace(/[\r\n]/g, ' '));
      h.set('Fleet-Deliveries', String(msg.info.redeliveryCount));
      h.set('Fleet-Subject', msg.subject);
      h.set('Fleet-Stream-Seq', String(msg.seq));
      await this.js.publish(this.opts.deadLetterSubject, msg.data, { headers: h, msgID: `dlq-${msg.info.stream}-${msg.seq}` });
    } catch (e) {
      // Without a copy in the dead-letter stream the message must stay where it is.
      this.log.error({ err: e }, 'dead-letter publish failed; leaving the message for redelivery');
      msg.nak(5000);
      return;
    }
    const now = Date.now();
    const rows = (decoded?.reports.length ? decoded.reports : [null]).map((r) => ({
      received_at: chTime(now),
      received_ms: now,
      id: randomUUID(),
      customer_id: r?.c ?? '',
      customer: r?.cs ?? '',
      token_id: r?.t ?? '',
      method: 'QUEUE',
      path: r ? `/api/ingest/${r.cs}/${r.m}/${r.s}/${r.k}` : msg.subject,
      status: 500,
      detail: `dead-lettered after ${msg.info.redeliveryCount} deliveries: ${reason}`,
      body_size: msg.data.length,
      remote: '',
      dropped: 0,
    }));
    await insertRows(this.deps.ch, 'ingest_rejections', rows).catch((e) => this.log.warn({ err: e }, 'rejection-log row for a dead letter failed'));
    this.m.deadLettered.inc();
    msg.term();
  }
}

const NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED', 'UND_ERR_SOCKET']);
// ClickHouse server codes that say "not now" rather than "not this": memory limit, too many
// parts, too many simultaneous queries, timeouts, table read-only (replica), network errors.
const CH_TRANSIENT = new Set(['241', '252', '202', '159', '160', '209', '210', '242', '425', '999']);

export function isTransient(e: unknown): boolean {
  if (e instanceof DecodeError) return false;
  const err = e as { code?: string | number; message?: string; cause?: unknown };
  if (isTransientPgError(e)) return true;
  if (err?.code !== undefined && NET_CODES.has(String(err.code))) return true;
  if (err?.code !== undefined && CH_TRANSIENT.has(String(err.code))) return true;
  const msg = err?.message ?? '';
  if (/connect ECONNREFUSED|socket hang up|Connection terminated|Timeout error|timeout exceeded|read ECONNRESET|Client has encountered a connection error|Connection is closed|MaxRetriesPerRequest|the database system is (starting up|shutting down)/i.test(msg)) {
    return true;
  }
  if (err?.cause) return isTransient(err.cause);
  return false;
}
