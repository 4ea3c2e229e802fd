// Prometheus metrics (prom-client): one registry per process, default process metrics included.
import client from 'prom-client';

export function createMetrics(service: string) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ service });
  client.collectDefaultMetrics({ register: registry });
  return {
    registry,
    counter: (name: string, help: string, labelNames: string[] = []) =>
      new client.Counter({ name, help, labelNames, registers: [registry] }),
    gauge: (name: string, help: string, labelNames: string[] = []) => new client.Gauge({ name, help, labelNames, registers: [registry] }),
    histogram: (name: string, help: string, buckets: number[], labelNames: string[] = []) =>
      new client.Histogram({ name, help, buckets, labelNames, registers: [registry] }),
    text: () => registry.metrics(),
    contentType: registry.contentType,
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
