// The ingest rejection log, gateway side: every rejected request becomes a RejectionRecord on
// `${prefix}.rejections` of an ingest partition (stored by JetStream, written to ClickHouse by the workers). Never the
// token or the body. A flood must not become a flood of rows: each source (remote address) may log
// REJECTION_LOG_RATE_PER_S records (burst REJECTION_LOG_BURST), the gateway as a whole ten times
// that; past that, rejections are counted, and every 5 s one record per source carries the count
// (`dropped`) of those not written.
import { randomUUID } from 'node:crypto';
import type { NatsConnection } from 'nats';
import type { RejectionRecord } from '../lib/contract/messages.js';
import { encodeJson } from '../lib/contract/messages.js';
import { RateLimiter } from './rate-limiter.js';

export type Rejection = Omit<RejectionRecord, 'id' | 'dropped'>;

const BUFFER_MAX = 1000;

export class RejectionLog {
  private perSource: RateLimiter;
  private global: RateLimiter;
  private dropped = new Map<string, { count: number; last: Rejection }>();
  private buffer: RejectionRecord[] = [];
  private timer: NodeJS.Timeout;
  /** Records not written and not even counted per source (buffer overflow while NATS was away). */
  lost = 0;
  written = 0;
  droppedTotal = 0;

  constructor(
    private readonly nc: NatsConnection,
    /** The subject of a record: one, or chosen per record (the gateway's: its ingest partition). */
    private readonly subject: string | ((r: RejectionRecord) => string),
    rate: number,
    burst: number,
    private readonly isConnected: () => boolean,
  ) {
    this.perSource = new RateLimiter(rate, burst, 100_000);
    this.global = new RateLimiter(rate * 10, burst * 10);
    this.timer = setInterval(() => this.flushDropped(), 5000);
    this.timer.unref();
  }

  record(r: Rejection): void {
    const now = r.at;
    if (!this.perSource.take(r.remote, now) || !this.global.take('all', now)) {
      this.droppedTotal++;
      const d = this.dropped.get(r.remote);
      if (d) {
        d.count++;
        d.last = r;
      } else if (this.dropped.size < 10_000) this.dropped.set(r.remote, { count: 1, last: r });
      else this.lost++;
      return;
    }
    this.emit({ ...r, id: randomUUID(), dropped: 0 });
  }

  private subjectOf(rec: RejectionRecord): string {
    return typeof this.subject === 'string' ? this.subject : this.subject(rec);
  }

  private emit(rec: RejectionRecord): void {
    if (!this.isConnected()) {
      if (this.buffer.length < BUFFER_MAX) this.buffer.push(rec);
      else this.lost++;
      return;
    }
    try {
      // Inside the try: the connection may be gone although isConnected() has not noticed yet (a
      // gateway shutting down closes it while requests still arrive on open connections); a throw
      // here would end the process.
      if (this.buffer.length > 0) this.drainBuffer();
      // A plain publish on a stream subject: JetStream stores it; the request is not held up.
      this.nc.publish(this.subjectOf(rec), encodeJson(rec));
      this.written++;
    } catch {
      if (this.buffer.length < BUFFER_MAX) this.buffer.push(rec);
      else this.lost++;
    }
  }

  /** Publishes the buffered records in order; one that cannot be published stays buffered (and throws). */
  private drainBuffer(): void {
    while (this.buffer.length > 0) {
      this.nc.publish(this.subjectOf(this.buffer[0]!), encodeJson(this.buffer[0]!));
      this.buffer.shift();
      this.written++;
    }
  }

  /** One record per source that was limited: its last rejection, with how many were not written. */
  flushDropped(): void {
    if (this.isConnected() && this.buffer.length > 0) {
      try {
        this.drainBuffer();
      } catch {
        /* still away; try at the next tick */
      }
    }
    for (const [source, d] of this.dropped) {
      this.emit({ ...d.last, at: Date.now(), id: randomUUID(), dropped: d.count, detail: `${d.count} rejections not logged (rate limit of the log); last: ${d.last.detail}` });
      this.dropped.delete(source);
    }
  }

  close(): void {
    clearInterval(this.timer);
    this.flushDropped();
  }
}
