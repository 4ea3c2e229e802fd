// lib/infra/metrics.ts's HotHistogram (a histogram for hot paths) against prom-client's own Histogram:
// the same observations give the same exposition text, so Prometheus cannot tell them apart.
import t from 'tap';
import client from 'prom-client';
import { HotHistogram, routeTimer, createMetrics, METRICS } from '../../lib/infra/metrics.js';

const BUCKETS = [0.001, 0.01, 0.1, 1];
const SAMPLES: [string, string, number][] = [
  ['ingest_heartbeat', '2xx', 0.0004],
  ['ingest_heartbeat', '2xx', 0.001], // on a bound: counted in that bucket (le is "less or equal")
  ['ingest_heartbeat', '2xx', 0.05],
  ['ingest_heartbeat', '4xx', 7], // above every bound: only +Inf
  ['list_instances', '5xx', 0.02],
];

t.test('the same exposition as prom-client for the same observations', async (t) => {
  const theirs = new client.Registry();
  const ours = new client.Registry();
  const h = new client.Histogram({ name: 'x_seconds', help: 'h', labelNames: ['route', 'status_class'], buckets: BUCKETS, registers: [theirs] });
  const hot = new HotHistogram('x_seconds', 'h', ['route', 'status_class'], BUCKETS);
  ours.registerMetric(hot as unknown as client.Metric);
  for (const [route, cls, v] of SAMPLES) {
    h.labels(route, cls).observe(v);
    hot.observer(route, cls)(v);
  }
  t.equal(await ours.metrics(), await theirs.metrics());
  t.match(await ours.metrics(), /x_seconds_bucket\{le="0.001",route="ingest_heartbeat",status_class="2xx"\} 2/, 'a value on a bound is in that bucket');
  hot.reset();
  t.equal(await ours.metrics(), '# HELP x_seconds h\n# TYPE x_seconds histogram\n', 'reset forgets every series');
});

t.test('routeTimer: one series per status class', async (t) => {
  const reg = new client.Registry();
  const hot = new HotHistogram<'route' | 'status_class'>('d_seconds', 'd', ['route', 'status_class'], BUCKETS);
  reg.registerMetric(hot as unknown as client.Metric);
  const timer = routeTimer(hot, 'r');
  timer(200, 0.0001);
  timer(204, 0.0001);
  timer(503, 2);
  const text = await reg.metrics();
  t.match(text, /d_seconds_count\{route="r",status_class="2xx"\} 2/);
  t.match(text, /d_seconds_count\{route="r",status_class="5xx"\} 1/);
  t.notMatch(text, /status_class="4xx"/, 'no series for a class never answered');
  t.throws(() => hot.observer('only-one'), /2 label values expected/);
});

t.test('createMetrics: every declared metric of the process, and only those', async (t) => {
  for (const service of ['gateway', 'worker', 'api'] as const) {
    const m = createMetrics(service);
    const text = await m.text();
    const typed = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((x) => x[1]!));
    for (const [name, def] of Object.entries(METRICS)) {
      t.equal(typed.has(name), (def.services as readonly string[]).includes(service), `${service}: ${name}`);
    }
    for (const name of typed) t.match(name, /^fleet_/, `${service}: ${name} has the prefix`);
  }
  const w = createMetrics('worker');
  t.match(await w.text(), /fleet_worker_dead_letters_total\{failure="data",service="worker"\} 0/, 'counters with known labels start at 0');
  t.throws(() => (w.counter as (n: string) => unknown)('fleet_gateway_responses_total'), /not declared for worker/);
});
