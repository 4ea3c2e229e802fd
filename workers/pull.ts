// How a worker takes messages from the durable consumer: one pull of at most `maxMessages` at a
// time, the next only when the worker asks for more (so an apply that is slow holds the pulling
// back instead of piling messages up in memory while their ack_wait runs out).
//
// Why not nats.js `consume()`: it refills in the background whether the worker keeps up or not,
// and refilled by bytes (`max_bytes`, how it was used here before) its refill pulls ask for the
// bytes left in the window; a message larger than that is refused by the server ("409 Message
// Size Exceeds MaxBytes"), the client asks again, forever, and nothing behind that message is
// ever delivered (nats-server issue 5888). One report of 200 KB after 1,000 small ones stopped
// every worker for every customer. A pull by count cannot refuse a message for its size, and
// `maxMessages` × the largest message the gateways publish stays under the server's per-client
// buffer (workers/main.ts computes it). test/stack/stall.test.ts replays that sequence against the real
// nats-server.
//
// A pull that stops delivering for another reason (the server lost it, a client bug) is what the
// watchdog in workers/ingest-consumer.ts catches: `restart()` abandons it and the next one starts.
import type { Consumer, ConsumerMessages, JsMsg } from 'nats';
import type { Logger } from '../lib/infra/log.js';

export interface PullOptions {
  /** Messages per pull. */
  maxMessages: number;
  /** A pull the server has not filled ends after this long, and the next one starts. */
  expiresMs: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class MessagePuller implements AsyncIterable<JsMsg> {
  /** When the last message was handed to the worker (or when pulling started). */
  lastDeliveryAt = Date.now();
  /** Since when the worker has been waiting for a message, or null while it is not. */
  waitingSince: number | null = null;
  private current: ConsumerMessages | null = null;
  private stopped = false;

  constructor(
    private readonly consumer: Consumer,
    private readonly opts: PullOptions,
    private readonly log: Logger,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<JsMsg> {
    while (!this.stopped) {
      let pull: ConsumerMessages;
      try {
        pull = await this.consumer.fetch({ max_messages: this.opts.maxMessages, expires: this.opts.expiresMs });
      } catch (e) {
        this.log.warn({ err: e }, 'pull request failed; retrying in 1 s');
        await sleep(1000);
        continue;
      }
      if (this.stopped) {
        pull.stop();
        break;
      }
      this.current = pull;
      const it = pull[Symbol.asyncIterator]();
      try {
        for (;;) {
          this.waitingSince ??= Date.now();
          const r = await it.next();
          if (r.done) break;
          this.waitingSince = null;
          this.lastDeliveryAt = Date.now();
          yield r.value;
        }
      } catch (e) {
        if (!this.stopped) {
          this.log.warn({ err: e }, 'pull ended with an error; pulling again');
          await sleep(250);
        }
      } finally {
        this.current = null;
      }
    }
    this.waitingSince = null;
  }

  /** Abandons the pull in progress; the next one starts at once (the watchdog, after a stall). */
  restart(): void {
    this.current?.stop();
  }

  /** Stops pulling; messages pulled and not yet handed out are redelivered after their ack_wait. */
  stop(): void {
    this.stopped = true;
    this.current?.stop();
  }
}
