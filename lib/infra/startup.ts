// Start-up steps that wait for a server (NATS, Postgres, Redis, ClickHouse): retried with a growing
// pause until they succeed, and each attempt given at most `attemptMs`. A step that neither
// succeeds nor fails (a JetStream request whose answer never came while a clustered stream was
// electing its leader: a gateway in a CI run of the cluster tests waited on one for good, never
// listening) is abandoned and tried again. Used by the gateway's and the workers' entry files.

export interface StartupOptions {
  /**
   * Most time one attempt may take (ms); none when not given. Only for steps that are safe to make
   * again while an abandoned attempt may still be running (a JetStream request, not a long SQL
   * statement that would then run twice at once).
   */
  attemptMs?: number;
  /** Called before each retry: what failed, and the attempt that failed. */
  onRetry?: (err: unknown, attempt: number) => void;
  /** Give up (throw the last error) when this says so: the process is shutting down. */
  stop?: () => boolean;
  /** The pause after attempt n (ms); default 500·n, at most 10 s. */
  pauseMs?: (attempt: number) => number;
}

/** An attempt that took longer than its limit. */
export class StartupTimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`start-up: ${what} did not finish within ${ms} ms`);
    this.name = 'StartupTimeoutError';
  }
}

/** A JetStream request at start-up: abandoned and made again after this long. */
export const JETSTREAM_ATTEMPT_MS = 20_000;

/** `fn` until it resolves; each attempt at most `attemptMs` when given. */
export async function startupStep<T>(what: string, fn: () => Promise<T>, o: StartupOptions = {}): Promise<T> {
  const attemptMs = o.attemptMs;
  const pause = o.pauseMs ?? ((n: number) => Math.min(500 * n, 10_000));
  for (let attempt = 1; ; attempt++) {
    let timer: NodeJS.Timeout | undefined;
    const attemptP = fn();
    try {
      if (attemptMs === undefined) return await attemptP;
      return await Promise.race([
        attemptP,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new StartupTimeoutError(what, attemptMs)), attemptMs);
        }),
      ]);
    } catch (e) {
      // An abandoned attempt that fails later is no unhandled rejection: the race handles it.
      if (o.stop?.()) throw e;
      o.onRetry?.(e, attempt);
      await new Promise((r) => setTimeout(r, pause(attempt)));
    } finally {
      clearTimeout(timer);
    }
  }
}
