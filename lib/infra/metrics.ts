// Prometheus metrics (prom-client): every metric of every process is declared here, once, in
// `METRICS` (name, type, help, labels, buckets, which processes export it); docs/operations.md
// ("Metrics and alerts") lists the same, and test/stack/observability.test.ts holds the two together and
// scrapes the running processes. Conventions: one `fleet_` prefix (Node's default process metrics
// too), base units (seconds, bytes), counters and only counters end in `_total`
// (`promtool check metrics` finds nothing to say about any process's /metrics).
//
// One registry per process, made by createMetrics(service): it registers every metric declared for
// that service at once (so /metrics names all of them from the start, and counters with known
// label values start at 0, which `increase()` in an alert needs to see the first event), and hands
// out the instances by name: `metrics.counter('fleet_worker_reports_total')` is typed by its labels.
import client from 'prom-client';
import { DEPENDENCIES } from './storage-errors.js';

export type Service = 'gateway' | 'worker' | 'api';
type Type = 'counter' | 'gauge' | 'histogram';

interface Def {
  type: Type;
  help: string;
  services: readonly Service[];
  labels?: readonly string[];
  buckets?: readonly number[];
  /** Label values that exist from the start (counters at 0), in the order of `labels`. */
  init?: readonly (readonly string[])[];
  /** A histogram observed on a hot path: a HotHistogram (below) instead of prom-client's. */
  hot?: true;
}

/** Seconds: request durations (the gateway answers in about a millisecond; a live stream lasts hours). */
const HTTP_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Seconds from the gateway's receive time to the worker's commit: milliseconds normally, minutes in a backlog. */
const AGE_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];
export const LIGHTS = ['green', 'yellow', 'late', 'red', 'grey'] as const;

export const METRICS = {
  // Both HTTP processes.
  fleet_http_request_duration_seconds: {
    type: 'histogram',
    hot: true,
    services: ['gateway', 'api'],
    labels: ['route', 'status_class'],
    buckets: HTTP_BUCKETS,
    help: 'Time from a request to its answer, by route (its operationId in lib/contract/routes.ts; unmatched: 404 and 405) and status class (2xx, 4xx, 5xx)',
  },

  // Quotas per customer (lib/store/quotas.ts), in the process that enforces each.
  fleet_quota_refusals_total: {
    type: 'counter',
    services: ['gateway', 'api'],
    labels: ['quota'],
    init: [['artifact_bytes'], ['artifact_max_bytes'], ['stream_connections'], ['webhooks'], ['whitelist_rules'], ['timeout_rules'], ['ingest_requests_per_s'], ['ingest_bytes_per_s'], ['maintenance_windows']],
    help: 'Requests refused because a customer is at one of its quotas, by quota: artifact_bytes and artifact_max_bytes (gateway, artifact-init), ingest_requests_per_s (batch entries one each) and ingest_bytes_per_s (gateway, 429), stream_connections, webhooks, whitelist_rules, timeout_rules, maintenance_windows (api)',
  },

  // API tokens' last_used_at (lib/store/token-usage.ts), written in the background by both HTTP processes.
  fleet_token_last_used_updates_total: {
    type: 'counter',
    services: ['gateway', 'api'],
    labels: ['result'],
    init: [['written'], ['skipped']],
    help: "Token uses flushed to api_tokens.last_used_at, by result: written, or skipped (the row had a use less than a minute older: a token is written at most once a minute)",
  },

  // Gateway.
  fleet_gateway_responses_total: {
    type: 'counter',
    services: ['gateway'],
    labels: ['kind', 'status'],
    help: 'Ingest answers by report kind and HTTP status (refusals included: 4xx; 503 when the report could not be queued)',
  },
  fleet_gateway_publish_duration_seconds: {
    type: 'histogram',
    services: ['gateway'],
    buckets: [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    help: 'JetStream publish round trip (publish to PubAck) per group of reports',
  },
  fleet_gateway_publish_group_reports: {
    type: 'histogram',
    services: ['gateway'],
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500],
    help: 'Reports per JetStream publish',
  },
  fleet_gateway_publish_failed_reports_total: {
    type: 'counter',
    services: ['gateway'],
    help: 'Reports answered 503 because their publish failed (NATS away, stream missing or full, no PubAck in time)',
  },
  fleet_gateway_queue_share_refusals_total: {
    type: 'counter',
    services: ['gateway'],
    labels: ['stream'],
    help: "Reports answered 429 because their stream is filling up and their customer's reports are over its share of it (QUEUE_SHARE_PERCENT)",
  },
  fleet_gateway_rejection_log_dropped_total: {
    type: 'counter',
    services: ['gateway'],
    help: 'Refusals the rejection log did not write one by one (its rate limit per source address); they are counted in summary rows',
  },
  fleet_gateway_ready: {
    type: 'gauge',
    services: ['gateway'],
    help: '1 while NATS is connected and the stream exists (/readyz 200), else 0',
  },
  fleet_gateway_artifact_inflight_bytes: {
    type: 'gauge',
    services: ['gateway'],
    help: 'Artifact chunk bodies this gateway holds in memory now (bounded by ARTIFACT_INFLIGHT_BYTES)',
  },
  fleet_gateway_artifact_chunk_bytes_total: {
    type: 'counter',
    services: ['gateway'],
    help: 'Artifact chunk bytes stored (repeats of a stored chunk not counted)',
  },
  fleet_gateway_commands_open: {
    type: 'gauge',
    services: ['gateway'],
    help: 'Open agent commands (queued or delivered) this gateway holds in memory',
  },
  fleet_gateway_commands_offered_total: {
    type: 'counter',
    services: ['gateway'],
    help: 'Agent commands handed out in answers to heartbeats and status reports (every offer counts)',
  },
  fleet_gateway_host_metric_records_total: {
    type: 'counter',
    services: ['gateway'],
    labels: ['result'],
    init: [['accepted'], ['duplicate']],
    help: 'Host-metric records by outcome: accepted (queued) or duplicate (its client_metric_id seen within METRIC_DEDUP_TTL_S)',
  },

  fleet_gateway_internal_errors_total: {
    type: 'counter',
    services: ['gateway'],
    labels: ['route'],
    init: [['process']],
    help: 'Requests a bug failed (the route answered 500 and the process went on serving); route "process": an error no route caught. Any is a bug to report',
  },
  fleet_gateway_batch_entries_total: {
    type: 'counter',
    services: ['gateway'],
    labels: ['kind', 'status'],
    help: 'Batch ingest entries by report kind (invalid: refused before its kind was known) and the status of its result (200/202 accepted, else the refusal)',
  },

  // Worker.
  fleet_worker_reports_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['kind'],
    help: 'Reports applied (committed and acked), by kind',
  },
  fleet_worker_report_age_seconds: {
    type: 'histogram',
    hot: true,
    services: ['worker'],
    labels: ['kind'],
    buckets: AGE_BUCKETS,
    help: "Age of each report when it was applied: from the gateway's receive time to the worker's commit",
  },
  fleet_worker_batch_duration_seconds: {
    type: 'histogram',
    services: ['worker'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    help: 'Time to apply one batch: every write committed, isolation of failing reports included, until the acks',
  },
  fleet_worker_batch_reports: {
    type: 'histogram',
    services: ['worker'],
    buckets: [1, 10, 100, 1000, 5000, 10000, 50000],
    help: 'Reports per applied batch',
  },
  fleet_worker_retries_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['dependency'],
    init: DEPENDENCIES.map((d) => [d]),
    help: "Messages nak'ed to be tried again later, by what they wait for: postgres, clickhouse, redis, nats (the dead-letter stream refused a publish) or worker (an error of the worker's own, or one nothing names)",
  },
  fleet_worker_outage: {
    type: 'gauge',
    services: ['worker'],
    labels: ['dependency'],
    init: DEPENDENCIES.map((d) => [d]),
    help: 'Whether this worker has messages waiting for this dependency (an outage: nothing is dead-lettered for it; /readyz 503 names it): 1 or 0',
  },
  fleet_worker_dead_letters_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['failure'],
    init: [['data'], ['decode']],
    help: 'Reports moved to the dead-letter stream, by failure: data (a code of the server, or the worker\'s own check, proves its values at fault), decode (a message that is not a batch)',
  },
  fleet_worker_dead_letter_messages: {
    type: 'gauge',
    services: ['worker'],
    labels: ['customer'],
    help: "Dead letters waiting in the dead-letter stream, by customer slug (_none: no customer known), from the stream's per-subject counts every 5 s (every worker reports the same numbers)",
  },
  fleet_worker_isolations_total: {
    type: 'counter',
    services: ['worker'],
    help: 'Batches storage refused, split to find the reports at fault',
  },
  fleet_worker_consumer_pending: {
    type: 'gauge',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: 'Messages in the stream not yet delivered to any worker (the durable consumer of lane `reports`, the main stream, or `heartbeats`, the heartbeat lane; every worker reports the same number)',
  },
  fleet_worker_consumer_ack_pending: {
    type: 'gauge',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: 'Messages delivered to workers and not yet acked (the durable consumer)',
  },
  fleet_worker_consumer_stalls_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: 'Stalls the watchdog found (messages pending, none delivered for WORKER_STALL_TIMEOUT_MS); each restarts the pull',
  },
  fleet_worker_last_delivery_age_seconds: {
    type: 'gauge',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: 'Seconds since this worker last received a message',
  },
  fleet_worker_stream_bytes: {
    type: 'gauge',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: 'Bytes held by the stream of the lane (reports queued and not yet applied); ingest answers 503 when it reaches fleet_worker_stream_max_bytes',
  },
  fleet_worker_stream_max_bytes: {
    type: 'gauge',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: "The lane's stream size limit (STREAM_MAX_BYTES as the stream has it)",
  },
  fleet_worker_stream_messages: {
    type: 'gauge',
    services: ['worker'],
    labels: ['lane', 'partition'],
    init: [['reports', '0'], ['heartbeats', '0']],
    help: 'Messages held by the stream of the lane',
  },
  fleet_worker_heartbeat_updates_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['to'],
    init: [['postgres'], ['skipped']],
    help: "Instances' heartbeat updates by where they went: postgres (written at once: a new instance, a change, or the interval passed) or skipped (waits in Redis, written later by the flusher)",
  },
  fleet_worker_redis_unreplicated_total: {
    type: 'counter',
    services: ['worker'],
    help: 'Times a Redis primary confirmed skipped heartbeats on fewer replicas than REDIS_WAIT_REPLICAS within 250 ms (WAIT); the batch was acknowledged all the same, and that primary is not waited for during the next 10 s',
  },
  fleet_worker_heartbeats_flushed_total: {
    type: 'counter',
    services: ['worker'],
    help: 'Instances whose waiting heartbeat the flusher wrote to Postgres (at most PG_HEARTBEAT_INTERVAL_S after it arrived)',
  },
  fleet_worker_light_changes_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['cause', 'to'],
    help: 'Traffic-light changes this worker recorded, by cause (report, expiry, sweep) and new colour',
  },
  fleet_worker_light_horizon_lag_seconds: {
    type: 'gauge',
    services: ['worker'],
    help: "How far behind the wall clock this worker last judged silence (the age of the oldest report still queued); updated when it judges",
  },
  fleet_worker_instances: {
    type: 'gauge',
    services: ['worker'],
    labels: ['light'],
    help: 'Instances by stored traffic-light colour, all customers (counted by one worker every LIGHT_CENSUS_INTERVAL_MS; every worker reports the same numbers)',
  },
  fleet_worker_webhook_deliveries_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['outcome'],
    init: [['delivered'], ['retrying'], ['failed'], ['skipped']],
    help: 'Webhook delivery attempts by outcome: delivered (2xx), retrying (failed, attempts left), failed (the last attempt failed), skipped (webhook deleted or event delivered before)',
  },
  fleet_worker_mail_digests_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['outcome'],
    init: [['sent'], ['logged'], ['failed'], ['dropped']],
    help: 'Digest e-mails of traffic-light changes by outcome: sent (the SMTP server took it), logged (SMTP_HOST empty: written to the log), failed (tried again later, nothing lost), dropped (the user is no longer a member)',
  },
  fleet_worker_retention_rows_deleted_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['table'],
    init: [['webhook_deliveries'], ['commands'], ['command_events'], ['invitations'], ['sessions'], ['password_resets']],
    help: 'Postgres rows the retention job deleted as past their age, by table (command_events: those that went with their commands)',
  },
  fleet_worker_retention_partitions_dropped_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['table'],
    init: [['heartbeats'], ['diagnostics'], ['status_history'], ['light_events'], ['host_metrics'], ['ingest_rejections']],
    help: 'ClickHouse partitions (months) the retention job dropped as wholly past their age, by table',
  },
  fleet_worker_retention_failures_total: {
    type: 'counter',
    services: ['worker'],
    labels: ['store'],
    init: [['postgres'], ['clickhouse']],
    help: 'Retention runs that could not finish on a store: postgres, or clickhouse (a partition not dropped, e.g. above max_partition_size_to_drop); the next run tries again',
  },
  fleet_worker_ready: {
    type: 'gauge',
    services: ['worker'],
    help: '1 while the worker can do its job (/readyz 200: Postgres, ClickHouse, Redis and NATS answer, no stall, no saturated consumer, no message waiting for an outage), else 0',
  },

  // Api.
  fleet_api_login_attempts_total: {
    type: 'counter',
    services: ['api'],
    labels: ['result'],
    init: [['ok'], ['wrong'], ['address_limit'], ['pair_limit'], ['account_slowed'], ['busy']],
    help: 'Login attempts by result (api/login-guard.ts): ok, wrong (401), address_limit, pair_limit and account_slowed (429, never checked), busy (503: the password-check queue was full)',
  },
  fleet_api_login_checks_waiting: {
    type: 'gauge',
    services: ['api'],
    help: 'Login attempts waiting for a password check (at most LOGIN_HASH_QUEUE; LOGIN_HASH_CONCURRENCY run at once)',
  },
  fleet_api_light_stream_events_total: {
    type: 'counter',
    services: ['api'],
    help: 'Traffic-light events written to live streams (Server-Sent Events), one per stream they went to',
  },
  fleet_api_principal_lookups_total: {
    type: 'counter',
    services: ['api'],
    labels: ['result'],
    init: [['hit'], ['miss'], ['off']],
    help: "Requests' credentials (API token or session) resolved, by result: hit (from the api's copy in memory), miss (read from Postgres and kept), off (read from Postgres: the copy is off, or its LISTEN connection is down; api/principal-cache.ts)",
  },
  fleet_api_principal_cache_listening: {
    type: 'gauge',
    services: ['api'],
    help: "1 while the api's LISTEN connection for changes to tokens, sessions and memberships is up (the principal copy is used), 0 while it is down or migration 0027's triggers are missing (every request reads Postgres), -1 when the copy is off (API_PRINCIPAL_CACHE_MS=0)",
  },
} as const satisfies Record<string, Def>;

type Catalogue = typeof METRICS;
export type MetricName = keyof Catalogue;
type NameOf<S extends Service, T extends Type, Hot extends boolean = false> = {
  [N in MetricName]: Catalogue[N]['type'] extends T
    ? S extends Catalogue[N]['services'][number]
      ? (Catalogue[N] extends { hot: true } ? true : false) extends Hot
        ? N
        : never
      : never
    : never;
}[MetricName];
type LabelOf<N extends MetricName> = Catalogue[N] extends { labels: readonly (infer L)[] } ? L & string : never;

/**
 * Node's default process metrics (prom-client), under the prefix. Three of its gauges end in
 * `_total` (active handles, requests, resources: counts right now, not counters); they are left
 * out, their label-less twins without the suffix stay.
 */
const DEFAULT_PREFIX = 'fleet_';
const DEFAULTS_DROPPED = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

/**
 * A histogram for hot paths. prom-client's observe() validates and hashes the labels on every
 * call (about 0.45 µs here, a few per cent of a gateway request); an observer of this one is made
 * once per label set and then costs a bucket search and two additions. It is exported through the
 * same registry, in prom-client's format (test/unit/hot-histogram.test.ts compares the two).
 */
export class HotHistogram<L extends string = string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, { labels: Record<string, string>; counts: Float64Array; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly L[],
    private readonly buckets: readonly number[],
  ) {}

  /** The observer of one label set (values in the order of the label names). Keep it. */
  observer(...values: string[]): (v: number) => void {
    if (values.length !== this.labelNames.length) throw new Error(`${this.name}: ${this.labelNames.length} label values expected, got ${values.length}`);
    const key = values.join('\u0000');
    let s = this.series.get(key);
    if (!s) {
      const labels: Record<string, string> = {};
      this.labelNames.forEach((l, i) => (labels[l] = values[i]!));
      s = { labels, counts: new Float64Array(this.buckets.length), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    const series = s;
    const bounds = this.buckets;
    return (v: number) => {
      let i = 0;
      while (i < bounds.length && v > bounds[i]!) i++;
      if (i < bounds.length) series.counts[i]!++;
      series.sum += v;
      series.count++;
    };
  }

  /** prom-client's metric interface: what the registry writes on a scrape. */
  async get() {
    const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
    for (const s of this.series.values()) {
      let acc = 0;
      this.buckets.forEach((le, i) => {
        acc += s.counts[i]!;
        values.push({ labels: { le, ...s.labels }, value: acc, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${this.name}_bucket` });
      values.push({ labels: { ...s.labels }, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { ...s.labels }, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset(): void {
    this.series.clear();
  }
}

/** Observes one route's request durations by status class; the observer of each class is made once. */
export type RouteTimer = (status: number, seconds: number) => void;
export function routeTimer(h: HotHistogram<'route' | 'status_class'>, route: string): RouteTimer {
  const byClass: ((v: number) => void)[] = [];
  return (status, seconds) => {
    const c = Math.floor(status / 100);
    (byClass[c] ??= h.observer(route, `${c}xx`))(seconds);
  };
}

export function createMetrics<S extends Service>(service: S) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ service });
  client.collectDefaultMetrics({ register: registry, prefix: DEFAULT_PREFIX });
  for (const n of DEFAULTS_DROPPED) registry.removeSingleMetric(DEFAULT_PREFIX + n);

  const made = new Map<string, unknown>();
  for (const [name, def] of Object.entries(METRICS) as [MetricName, Def][]) {
    if (!def.services.includes(service)) continue;
    const labelNames = [...(def.labels ?? [])];
    let m: unknown;
    if (def.type === 'counter') {
      const c = new client.Counter({ name, help: def.help, labelNames, registers: [registry] });
      for (const v of def.init ?? []) c.labels(...v).inc(0);
      m = c;
    } else if (def.type === 'gauge') {
      const g = new client.Gauge({ name, help: def.help, labelNames, registers: [registry] });
      for (const v of def.init ?? []) g.labels(...v).set(0);
      m = g;
    } else if (def.hot) {
      const h = new HotHistogram(name, def.help, labelNames, def.buckets ?? []);
      for (const v of def.init ?? []) h.observer(...v);
      registry.registerMetric(h as unknown as client.Metric);
      m = h;
    } else {
      const h = new client.Histogram({ name, help: def.help, labelNames, buckets: [...(def.buckets ?? [])], registers: [registry] });
      for (const v of def.init ?? []) h.zero(Object.fromEntries(labelNames.map((l, i) => [l, v[i]!])));
      m = h;
    }
    made.set(name, m);
  }
  const scrapeHooks: (() => void | Promise<void>)[] = [];
  const get = (name: string) => {
    const m = made.get(name);
    if (!m) throw new Error(`metric ${name} is not declared for ${service} (lib/infra/metrics.ts METRICS)`);
    return m;
  };
  return {
    service,
    registry,
    counter: <N extends NameOf<S, 'counter'>>(name: N) => get(name) as client.Counter<LabelOf<N>>,
    gauge: <N extends NameOf<S, 'gauge'>>(name: N) => get(name) as client.Gauge<LabelOf<N>>,
    histogram: <N extends NameOf<S, 'histogram'>>(name: N) => get(name) as client.Histogram<LabelOf<N>>,
    hotHistogram: <N extends NameOf<S, 'histogram', true>>(name: N) => get(name) as HotHistogram<LabelOf<N>>,
    /** Runs `fn` before every scrape (to move hot-path tallies into metrics, or read shared state). */
    onScrape: (fn: () => void | Promise<void>) => void scrapeHooks.push(fn),
    text: async () => {
      await Promise.all(scrapeHooks.map(async (fn) => fn()));
      return registry.metrics();
    },
    contentType: registry.contentType,
  };
}

export type Metrics<S extends Service = Service> = ReturnType<typeof createMetrics<S>>;
