// Graceful shutdown that cannot hang: a server that is gone can make a drain, a pool's end or a
// consumer's stop wait forever (seen: workers outliving their stack by an hour after the test
// servers had stopped). Every process sets a deadline when it starts shutting down.
import type { NatsConnection } from 'nats';
import type { Logger } from './log.js';

/** Exits with code 1 if the shutdown has not finished `ms` after it began. */
export function shutdownDeadline(ms: number, log: Logger): void {
  setTimeout(() => {
    log.error({ ms }, 'shutdown did not finish in time; exiting');
    process.exit(1);
  }, ms).unref();
}

/** Drains the connection (flushes what is pending), or closes it after `ms` if NATS is away. */
export async function drainNats(nc: NatsConnection | null, ms = 5000): Promise<void> {
  if (!nc || nc.isClosed()) return;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((r) => (timer = setTimeout(r, ms)));
  await Promise.race([nc.drain().catch(() => {}), timeout]);
  clearTimeout(timer);
  if (!nc.isClosed()) await nc.close().catch(() => {});
}

/**
 * A process's one graceful shutdown: on SIGTERM, SIGINT or, when the stack runner supervises it,
 * the end of its stdin, the function given to onShutdown runs once under a deadline, then the
 * process exits 0. Made first thing, so start-up steps can ask whether it is closing.
 */
export class Lifecycle {
  closing = false;
  private stop: ((why: string) => Promise<void>) | null = null;

  constructor(
    private readonly log: Logger,
    private readonly deadlineMs: number,
  ) {
    process.on('SIGTERM', () => void this.shutdown('SIGTERM'));
    process.on('SIGINT', () => void this.shutdown('SIGINT'));
    // Supervised by the stack runner: its death closes our stdin.
    if (process.env.FLEET_SUPERVISED === '1') process.stdin.on('end', () => void this.shutdown('supervisor gone')).resume();
  }

  onShutdown(stop: (why: string) => Promise<void>): void {
    this.stop = stop;
  }

  async shutdown(why: string): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    shutdownDeadline(this.deadlineMs, this.log);
    if (this.stop) await this.stop(why);
    else this.log.info({ why }, 'shutting down during start-up');
    this.log.info('stopped');
    process.exit(0);
  }
}
