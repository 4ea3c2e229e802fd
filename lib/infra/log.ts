// Structured JSON logs (pino): one line per event, machine-readable, cheap on the hot path.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(name: string, level = process.env.LOG_LEVEL || 'info'): Logger {
  return pino({ name, level, base: { name, pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime });
}
