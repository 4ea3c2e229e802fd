// Prometheus metrics (prom-client): one registry per process, default process metrics included.
import client from 'prom-client';

export function createMetrics(service: string) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ service });
  client.collectDefaultMetrics({ register: registry });
  const scrapeHooks: (() => void)[] = [];
  return {
    registry,
    counter: (name: string, help: string, labelNames: string[] = []) =>
      new client.Counter({ name, help, labelNames, registers: [registry] }),
    gauge: (name: string, help: string, labelNames: string[] = []) => new client.Gauge({ name, help, labelNames, registers: [registry] }),
    histogram: (name: string, help: string, buckets: number[], labelNames: string[] = []) =>
      new client.Histogram({ name, help, buckets, labelNames, registers: [registry] }),
    /** Runs `fn` before every scrape (to move hot-path tallies into metrics). */
    onScrape: (fn: () => void) => void scrapeHooks.push(fn),
    text: () => {
      for (const fn of scrapeHooks) fn();
      return registry.metrics();
    },
    contentType: registry.contentType,
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
