// BullMQ queues: one queue per purpose, all under `${REDIS_PREFIX}bull` so that two deployments (or
// two test files) on one Redis never see each other's jobs. BullMQ refuses ':' in queue names, so
// the Redis prefix goes into BullMQ's own `prefix` option rather than into the name.
export const QUEUES = {
  /** The traffic-light sweep: a repeatable job, run by one worker at a time. */
  lightSweep: 'light-sweep',
  /** Webhook deliveries of traffic-light changes, retried with exponential backoff. */
  webhooks: 'light-webhooks',
} as const;

export function bullPrefix(redisPrefix: string): string {
  return `${redisPrefix}bull`;
}
