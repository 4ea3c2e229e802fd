// A customer's share of an ingest stream while the stream fills up (docs/architecture.md
// "A customer's share of a queue").
//
// A partition's streams are shared by every customer whose machines hash into it. While the
// workers keep up they stay nearly empty; when they fall behind (stopped, slow, an outage) the
// streams fill, and once one is full every report for it is refused (503 queue full), whoever sent
// it. Without a share, one customer sending fast could fill the stream and cost every other
// customer of its partition their reports.
//
// So each gateway counts, per stream, the bytes it queued for each customer over the last
// WINDOW_MS (two buckets, the older one weighted down as it ages). Once a stream is at least
// QUEUE_SHARE_FROM_PERCENT full (its state polled every POLL_MS), a customer whose reports are
// more than QUEUE_SHARE_PERCENT of what this gateway queued there in the window is refused with
// 429 and Retry-After: the customer that fills the stream waits, the others go on until the stream
// is full. Every gateway decides from its own traffic (no shared state; behind a balancer each
// sees a like sample). A refused report is not counted, so a refused customer's share falls while
// the others send, and it is let in again: under pressure the stream's room is split between the
// senders rather than taken by the fastest one.
import type { JetStreamManager } from 'nats';
import { HttpError } from '../lib/contract/errors.js';

/** The window over which each customer's share of what a gateway queued is counted. */
export const WINDOW_MS = 30_000;
/** How often the gateway reads how full each stream is. */
export const POLL_MS = 1000;
/** Below this many bytes queued to a stream in the window (or a twentieth of the stream, if less), nobody's share is judged: too few to tell. */
const MIN_WINDOW_BYTES = 64 * 1024;

export interface QueueShareOptions {
  /** QUEUE_SHARE_FROM_PERCENT: a stream at least this full applies shares (100: never). */
  fromPercent: number;
  /** QUEUE_SHARE_PERCENT: the most of a full-ish stream's recent bytes one customer may have. */
  sharePercent: number;
}

interface Window {
  start: number;
  cur: Map<string, number>;
  prev: Map<string, number>;
  curTotal: number;
  prevTotal: number;
}

export class QueueShares {
  /** Stream -> how full (0..1), as last read. */
  private readonly fill = new Map<string, number>();
  /** Stream -> its max_bytes, as last read. */
  private readonly max = new Map<string, number>();
  private readonly windows = new Map<string, Window>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly o: QueueShareOptions,
    private readonly onRefused: (stream: string) => void = () => {},
  ) {}

  get enabled(): boolean {
    return this.o.fromPercent < 100;
  }

  private window(stream: string, now: number): Window {
    let w = this.windows.get(stream);
    if (!w) this.windows.set(stream, (w = { start: now, cur: new Map(), prev: new Map(), curTotal: 0, prevTotal: 0 }));
    if (now - w.start >= WINDOW_MS) {
      const old = now - w.start >= 2 * WINDOW_MS;
      w.prev = old ? new Map() : w.cur;
      w.prevTotal = old ? 0 : w.curTotal;
      w.cur = new Map();
      w.curTotal = 0;
      w.start = old ? now : w.start + WINDOW_MS;
    }
    return w;
  }

  /** `bytes` queued to `stream` for `customerId` (called for every report handed to the stream). */
  record(stream: string, customerId: string, bytes: number, now = Date.now()): void {
    if (!this.enabled) return;
    const w = this.window(stream, now);
    w.cur.set(customerId, (w.cur.get(customerId) ?? 0) + bytes);
    w.curTotal += bytes;
  }

  /** The customer's share of what was queued to `stream` in the window (0..1), and the window's bytes. */
  share(stream: string, customerId: string, now = Date.now()): { share: number; bytes: number } {
    const w = this.window(stream, now);
    const age = Math.min(1, (now - w.start) / WINDOW_MS);
    const weight = 1 - age;
    const total = w.curTotal + weight * w.prevTotal;
    if (total <= 0) return { share: 0, bytes: 0 };
    const mine = (w.cur.get(customerId) ?? 0) + weight * (w.prev.get(customerId) ?? 0);
    return { share: mine / total, bytes: total };
  }

  /** 429 when `stream` is full enough and this customer holds more than its share of it; else null. */
  refusal(stream: string, customerId: string, now = Date.now()): HttpError | null {
    if (!this.enabled) return null;
    const fill = this.fill.get(stream) ?? 0;
    if (fill * 100 < this.o.fromPercent) return null;
    const { share, bytes } = this.share(stream, customerId, now);
    const least = Math.min(MIN_WINDOW_BYTES, (this.max.get(stream) ?? Infinity) / 20);
    if (bytes < least || share * 100 <= this.o.sharePercent) return null;
    this.onRefused(stream);
    return new HttpError(
      429,
      `queue share: the workers are behind and this report's queue is ${Math.round(fill * 100)} % full; this customer's reports are ${Math.round(share * 100)} % of what fills it, over its share of ${this.o.sharePercent} %, so other customers keep their room; retry later`,
      { retryAfterS: 5 },
    );
  }

  /** Sets how full a stream is (a poll, or a test). */
  setFill(stream: string, fill: number, maxBytes?: number): void {
    this.fill.set(stream, fill);
    if (maxBytes !== undefined) this.max.set(stream, maxBytes);
  }

  /** Reads how full each stream is every POLL_MS. A stream that cannot be read keeps its last value. */
  start(jsm: JetStreamManager, streams: string[]): void {
    if (!this.enabled || this.timer) return;
    const poll = async () => {
      await Promise.all(
        streams.map(async (name) => {
          try {
            const info = await jsm.streams.info(name);
            const max = info.config.max_bytes;
            this.setFill(name, max > 0 ? info.state.bytes / max : 0, max > 0 ? max : undefined);
          } catch {
            /* the publish itself says what is wrong with the stream */
          }
        }),
      );
    };
    void poll();
    this.timer = setInterval(() => void poll(), POLL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
