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
