// Hints on core NATS (`${SUBJECT_PREFIX}.control.<topic>`, lib/contract/messages.ts): "this control
// data changed", published after a commit so that other replicas refresh their caches at once
// instead of at their next poll. Best effort by design: not stored, not acknowledged, dropped while
// there is no connection; every reader also re-reads on a timer, so a lost hint only delays.
import type { NatsConnection, Subscription } from 'nats';

/** Publishes hints of type `T` on one subject; `encode` turns one into its messages (none: nothing to say). */
export class HintPublisher<T> {
  private nc: NatsConnection | null = null;

  constructor(
    readonly subject: string,
    private readonly encode: (hint: T) => (string | Uint8Array)[],
    private readonly onError: (e: unknown) => void = () => {},
  ) {}

  /** The connection to publish on, once there is one. */
  attach(nc: NatsConnection): void {
    this.nc = nc;
  }

  publish(hint: T): void {
    if (this.nc === null || this.nc.isClosed()) return;
    try {
      for (const m of this.encode(hint)) this.nc.publish(this.subject, m);
    } catch (e) {
      this.onError(e);
    }
  }
}

/** Calls `handle` with each hint on `subject` that `decode` can read (null: ignored). */
export function listenHints<T>(nc: NatsConnection, subject: string, decode: (data: Uint8Array) => T | null, handle: (hint: T) => void): Subscription {
  return nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) return;
      const hint = decode(msg.data);
      if (hint !== null) handle(hint);
    },
  });
}
