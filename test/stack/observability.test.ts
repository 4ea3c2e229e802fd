// Metrics, alert rules and the Grafana dashboard against the processes that export the metrics:
// promtool (Debian's `prometheus` package; deploy/bootstrap.mjs installs it) checks and
// unit-tests deploy/prometheus/alerts.yml and lints every /metrics; the catalogue (lib/infra/metrics.ts
// METRICS) follows the naming conventions and is the table in docs/operations.md; every metric the
// rules, the dashboard and the autoscaler name is exported, with the type they expect, by a real
// gateway, worker and api after some traffic; the dashboard's ClickHouse queries run on the schema.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { testStack, post, get, eventually, chRows } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { ROOT } from '../../deploy/service-process.js';
import { METRICS, type MetricName } from '../../lib/infra/metrics.js';
import { deadLetterOf } from '../../lib/store/dead-letters.js';
import { subjects, encodeBatch, encodeReport } from '../../lib/contract/messages.js';
import { randomUUID } from 'node:crypto';

type Obj = Record<string, any>;
const PROM = join(ROOT, 'deploy', 'prometheus');
const RULES = join(PROM, 'alerts.yml');
const DASHBOARD = join(ROOT, 'deploy', 'grafana', 'fleet-ingest.json');
const catalogue = METRICS as Record<string, { type: string; services: readonly string[]; labels?: readonly string[] }>;

function promtool(args: string[], input?: string, cwd = ROOT) {
  const r = spawnSync('promtool', args, { cwd, input, encoding: 'utf8' });
  if (r.error) throw new Error(`promtool: ${r.error.message} (Debian package prometheus; npm test installs it)`);
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

/** Metric names a PromQL expression reads (recording-rule names, with a colon, and strings left out). */
function metricsIn(expr: string): string[] {
  const bare = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  return [...bare.matchAll(/(?<![\w:])fleet_[a-z0-9_]+(?![\w:])/g)].map((m) => m[0]);
}

/** The catalogue metric behind a series name (a histogram's _bucket, _sum, _count). */
function declared(series: string): MetricName | null {
  if (series in catalogue) return series as MetricName;
  const base = series.replace(/_(bucket|sum|count)$/, '');
  return base !== series && catalogue[base]?.type === 'histogram' ? (base as MetricName) : null;
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Prometheus text exposition: the TYPE of each metric and every sample. */
function parseExposition(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return { types, samples };
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}

const rules = parse(readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: Obj[] }[] };
const allRules = rules.groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Obj;
const panels = (dashboard.panels as Obj[]).flatMap((p) => [p, ...((p.panels as Obj[] | undefined) ?? [])]);
const dsType = (p: Obj, target: Obj) => (target.datasource ?? p.datasource)?.type as string | undefined;
const promQueries = panels.flatMap((p) => ((p.targets as Obj[] | undefined) ?? []).filter((x) => dsType(p, x) === 'prometheus').map((x) => ({ panel: p.title as string, expr: x.expr as string })));
const chQueries = panels.flatMap((p) => ((p.targets as Obj[] | undefined) ?? []).filter((x) => dsType(p, x) === 'grafana-clickhouse-datasource').map((x) => ({ panel: p.title as string, sql: x.rawSql as string })));
const adapter = parseAllDocuments(readFileSync(join(ROOT, 'deploy', 'helm-values', 'prometheus-adapter.yaml'), 'utf8'))[0]!.toJS() as Obj;

/** Every metric something outside the code relies on, and who. */
const used = new Map<string, Set<string>>();
const use = (name: string, by: string) => (used.get(name) ?? used.set(name, new Set()).get(name)!).add(by);
for (const r of allRules) for (const n of metricsIn(r.expr)) use(n, `rule ${r.alert ?? r.record}`);
for (const q of promQueries) for (const n of metricsIn(q.expr)) use(n, `panel "${q.panel}"`);
for (const r of adapter.rules.external as Obj[]) for (const n of metricsIn(r.seriesQuery)) use(n, 'prometheus-adapter');

t.test('promtool: the rules are valid, and their unit tests (deploy/prometheus/alerts.test.yml) pass', async (t) => {
  const check = promtool(['check', 'rules', RULES]);
  t.equal(check.code, 0, check.out);
  t.match(check.out, new RegExp(`SUCCESS: ${allRules.length} rules found`));
  const unit = promtool(['test', 'rules', 'alerts.test.yml'], undefined, PROM);
  t.equal(unit.code, 0, unit.out);
  t.match(unit.out, /SUCCESS/);
  // Every alert has a unit test that expects it to fire.
  const tests = parse(readFileSync(join(PROM, 'alerts.test.yml'), 'utf8')) as { tests: Obj[] };
  const fired = new Set(tests.tests.flatMap((x) => ((x.alert_rule_test as Obj[] | undefined) ?? []).filter((a) => a.exp_alerts?.length).map((a) => a.alertname as string)));
  for (const r of allRules.filter((r) => r.alert)) t.ok(fired.has(r.alert), `${r.alert} is tested firing`);
  for (const r of allRules.filter((r) => r.alert)) {
    t.match(r.annotations?.runbook, /^docs\/operations\.md#metrics-and-alerts$/, `${r.alert} points at its runbook`);
    t.match(r.labels?.severity, /^(warning|critical)$/, `${r.alert} has a severity`);
  }

  // The checks can fail: a broken expression, and a unit test expecting what does not happen.
  const dir = mkdtempSync(join(tmpdir(), 'fleet-rules-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'bad.yml'), 'groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: sum by (namespace (fleet_worker_ready)\n');
  t.not(promtool(['check', 'rules', join(dir, 'bad.yml')]).code, 0, 'promtool refuses a broken expression');
  writeFileSync(join(dir, 'alerts.yml'), readFileSync(RULES));
  writeFileSync(
    join(dir, 'wrong.test.yml'),
    'rule_files: [alerts.yml]\ntests:\n  - interval: 1m\n    input_series:\n      - series: \'fleet_worker_ready{instance="w1"}\'\n        values: \'1x20\'\n    alert_rule_test:\n      - eval_time: 10m\n        alertname: FleetWorkerNotReady\n        exp_alerts: [{ exp_labels: { severity: warning, instance: w1 } }]\n',
  );
  t.not(promtool(['test', 'rules', 'wrong.test.yml'], undefined, dir).code, 0, 'promtool fails a unit test whose alert does not fire');
});

t.test('the catalogue follows the conventions, and docs/operations.md lists exactly it', async (t) => {
  const ops = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');
  const section = ops.slice(ops.indexOf('## Metrics and alerts'), ops.indexOf('\n## ', ops.indexOf('## Metrics and alerts') + 5));
  const tableRows = new Map([...section.matchAll(/^\| `(fleet_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \| ([^|]*) \|/gm)].map((m) => [m[1]!, { type: m[2]!, labels: m[3]!, services: m[4]! }]));
  for (const [name, def] of Object.entries(catalogue)) {
    t.match(name, /^fleet_[a-z][a-z0-9_]*$/, `${name}: one prefix`);
    if (def.type === 'counter') t.match(name, /_total$/, `${name}: a counter ends in _total`);
    else t.notMatch(name, /_total$/, `${name}: only counters end in _total`);
    t.notMatch(name, /_(ms|milliseconds|kb|mb|minutes|hours)(_|$)/, `${name}: base units`);
    if (def.type === 'histogram' && !/_reports$/.test(name)) t.match(name, /_(seconds|bytes)$/, `${name}: a histogram names its unit`);
    const row = tableRows.get(name);
    t.ok(row, `${name} is in the docs table`);
    if (!row) continue;
    t.equal(row.type, def.type, `${name}: the docs give its type`);
    t.same([...row.labels.matchAll(/`(\w+)`/g)].map((m) => m[1]), def.labels ?? [], `${name}: the docs give its labels`);
    t.same(row.services.split(',').map((s) => s.trim()), def.services, `${name}: the docs give its processes`);
  }
  for (const name of tableRows.keys()) t.ok(name in catalogue, `docs table: ${name} is declared in lib/infra/metrics.ts`);
  for (const r of allRules.filter((r) => r.alert)) t.match(section, `\`${r.alert}\``, `the docs explain ${r.alert}`);
});

t.test('the dashboard: two data sources chosen at import, every panel with a query', async (t) => {
  t.same((dashboard.templating.list as Obj[]).filter((v) => v.type === 'datasource').map((v) => v.query).sort(), ['grafana-clickhouse-datasource', 'prometheus']);
  const ids = panels.map((p) => p.id);
  t.equal(new Set(ids).size, ids.length, 'panel ids are unique');
  for (const p of panels.filter((p) => p.type !== 'row')) {
    t.ok(p.targets?.length > 0, `"${p.title}" has a query`);
    for (const x of p.targets ?? []) t.match((x.datasource ?? p.datasource)?.uid, /^\$\{(prometheus|clickhouse)\}$/, `"${p.title}": its data source is a dashboard variable`);
  }
  t.ok(promQueries.length >= 10 && chQueries.length >= 4, `${promQueries.length} Prometheus and ${chQueries.length} ClickHouse queries`);
  for (const [name, by] of used) t.ok(declared(name), `${name} (${[...by].join(', ')}) is declared in lib/infra/metrics.ts`);
});

// The running processes: a worker whose /metrics listens on every address (WORKER_HTTP_HOST, as in
// a container), and a light census every half second so fleet_worker_instances has numbers.
const workerPort = await freePort();
const s = await testStack(t, 'observability', {
  worker: false,
  env: { LIGHT_CENSUS_INTERVAL_MS: '500', WORKER_HTTP_HOST: '0.0.0.0', WORKER_HTTP_PORT: String(workerPort) },
});
const workerProc = await s.startWorker();
const workerUrl = `http://127.0.0.1:${workerPort}`;

async function scrape(url: string) {
  const r = await fetch(`${url}/metrics`);
  if (r.status !== 200) throw new Error(`${url}/metrics: ${r.status}`);
  const type = r.headers.get('content-type') ?? '';
  if (!type.startsWith('text/plain; version=0.0.4')) throw new Error(`${url}/metrics: Content-Type ${type}`);
  const text = await r.text();
  return { text, ...parseExposition(text) };
}

t.test('after traffic, every process exports its metrics, and everything the rules and dashboard name', async (t) => {
  // Traffic: the three report kinds, a refusal, the api, a dead letter's zero.
  t.equal((await s.report('obs-1', 'heartbeat', {})).status, 200);
  t.equal((await s.report('obs-1', 'status', { status: 'running' })).status, 200);
  t.equal((await s.report('obs-1', 'diagnostics', { items: [{ code: 4711, message: 'disk almost full', severity: 1 }] })).status, 202);
  t.equal((await s.report('obs-2', 'heartbeat', {}, { token: 'not-a-token' })).status, 403);
  t.equal((await post(`${s.gatewayUrl}/api/ingest/nowhere`, s.token, {})).status, 404);
  await eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=obs-1`, s.token)).body.items?.[0]?.light === 'yellow', 10_000, 'the reports applied');
  // The same heartbeat again changes nothing: it waits in Redis (PG_HEARTBEAT_INTERVAL_S), not written to Postgres.
  t.equal((await s.report('obs-1', 'heartbeat', {})).status, 200);
  t.equal((await get(`${s.apiUrl}/api/instances`, s.token)).status, 200);
  t.equal((await get(`${s.apiUrl}/api/instances`, 'not-a-token')).status, 401);
  t.equal((await fetch(`${workerUrl}/healthz`)).status, 200, `the worker answers on ${workerUrl}`);
  t.ok(workerProc.output.includes('"host":"0.0.0.0"'), 'on every address (WORKER_HTTP_HOST)');
  // A dead letter waiting, written as a worker writes one (the worker's dead-letter counter stays at 0).
  const subj = subjects(s.env.SUBJECT_PREFIX!);
  const report = { id: randomUUID(), kind: 'heartbeat' as const, customerId: s.customer.id, customer: s.customer.slug, machine: 'obs-dl', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now(), body: null };
  const dl = deadLetterOf({ base: subj.deadLetter, failure: { kind: 'data', reason: 'test' }, failureClass: 'data', source: { stream: s.env.STREAM_NAME!, seq: 1, subject: subj.reports, deliveries: 1 }, report });
  await s.nc.jetstream().publish(dl.subject, encodeBatch([encodeReport(report, Buffer.from('{}'))]), { headers: dl.headers, msgID: dl.msgID });

  const [gateway, api] = [await scrape(s.gatewayUrl), await scrape(s.apiUrl)];
  // The census runs on a schedule: wait until the worker serves its counts.
  const worker = await eventually(async () => {
    const w = await scrape(workerUrl);
    const counted = value(w.samples, 'fleet_worker_instances', { light: 'yellow' }) >= 1 && value(w.samples, 'fleet_worker_reports_total') >= 4;
    const waiting = value(w.samples, 'fleet_worker_dead_letter_messages', { customer: s.customer.slug }) === 1;
    return counted && waiting && value(w.samples, 'fleet_worker_ready') === 1 ? w : null;
  }, 20_000, 'the worker counted the applied reports, the instances and the dead letter waiting, and is ready');
  const byService = { gateway, worker, api };

  for (const [service, m] of Object.entries(byService)) {
    const lint = promtool(['check', 'metrics'], m.text);
    t.equal(lint.code, 0, `${service}: promtool check metrics: ${lint.out.trim() || 'nothing to say'}`);
    t.equal(lint.out.trim(), '', `${service}: no lint findings`);
    for (const [name, def] of Object.entries(catalogue)) {
      if (def.services.includes(service)) t.equal(m.types.get(name), def.type, `${service} exports ${name} (${def.type})`);
    }
    for (const name of m.types.keys()) t.match(name, /^fleet_/, `${service}: ${name} has the prefix`);
    t.ok(m.samples.every((x) => x.labels.service === service), `${service}: every series says service="${service}"`);
  }
  for (const [name, by] of used) {
    const metric = declared(name);
    if (!metric) continue; // reported by the dashboard test
    const from = catalogue[metric]!.services;
    t.ok(from.every((svc) => byService[svc as keyof typeof byService].samples.some((x) => x.name === name)), `${name} has series in ${from.join(', ')} (${[...by].join(', ')})`);
  }

  // The numbers say what happened.
  const g = gateway.samples;
  t.ok(value(g, 'fleet_http_request_duration_seconds_count', { route: 'ingest_heartbeat', status_class: '2xx' }) >= 1, 'gateway: a heartbeat timed 2xx');
  t.ok(value(g, 'fleet_http_request_duration_seconds_count', { route: 'ingest_heartbeat', status_class: '4xx' }) >= 1, 'gateway: the refused heartbeat timed 4xx');
  t.ok(value(g, 'fleet_http_request_duration_seconds_count', { route: 'unmatched', status_class: '4xx' }) >= 1, 'gateway: the unknown path timed as unmatched');
  t.ok(value(g, 'fleet_http_request_duration_seconds_bucket', { route: 'ingest_heartbeat', status_class: '2xx', le: '+Inf' }) >= 1);
  t.equal(value(g, 'fleet_gateway_responses_total', { kind: 'diagnostics', status: '202' }), 1, 'gateway: the diagnostics answer counted');
  t.equal(value(g, 'fleet_gateway_ready'), 1);
  const a = api.samples;
  t.ok(value(a, 'fleet_http_request_duration_seconds_count', { route: 'list_instances', status_class: '2xx' }) >= 2, 'api: list_instances timed 2xx');
  t.equal(value(a, 'fleet_http_request_duration_seconds_count', { route: 'list_instances', status_class: '4xx' }), 1, 'api: the refusal timed 4xx');
  const w = worker.samples;
  for (const kind of ['heartbeat', 'status', 'diagnostics']) {
    const n = kind === 'heartbeat' ? 2 : 1;
    t.equal(value(w, 'fleet_worker_reports_total', { kind }), n, `worker: ${n} ${kind} applied`);
    t.equal(value(w, 'fleet_worker_report_age_seconds_count', { kind }), n, `worker: the age at its commit observed for each ${kind}`);
  }
  t.ok(value(w, 'fleet_worker_report_age_seconds_sum', { kind: 'heartbeat' }) > 0, 'a report is older than zero when it is committed');
  t.ok(value(w, 'fleet_worker_batch_duration_seconds_count') >= 1);
  t.equal(value(w, 'fleet_worker_dead_letters_total'), 0, 'no dead letters (the counter is there, at 0)');
  t.ok(value(w, 'fleet_worker_stream_max_bytes') > 0, 'the stream limit is known');
  t.equal(value(w, 'fleet_worker_instances', { light: 'yellow' }), 1, 'the census: one yellow instance');
  t.equal(value(w, 'fleet_worker_instances', { light: 'red' }), 0);
  t.ok(value(w, 'fleet_worker_heartbeat_updates_total', { to: 'postgres' }) >= 1, "a new instance's heartbeat written to Postgres at once");
  t.equal(value(w, 'fleet_worker_heartbeat_updates_total', { to: 'skipped' }), 1, 'the repeated heartbeat deferred');
});

t.test("the dashboard's ClickHouse queries run on the schema and find the traffic", async (t) => {
  // Grafana's ClickHouse macros, as the plugin expands them.
  const expand = (sql: string) =>
    sql
      .replace(/\$__timeFilter\((\w+)\)/g, '$1 >= now() - INTERVAL 1 HOUR AND $1 <= now() + INTERVAL 1 MINUTE')
      .replace(/\$__interval_s/g, '60');
  await eventually(async () => (await chRows(s.ch, 'SELECT 1 FROM ingest_rejections LIMIT 1')).length > 0, 10_000, 'the refusals in the rejection log');
  for (const q of chQueries) {
    const sql = expand(q.sql);
    t.notMatch(sql, /\$/, `"${q.panel}": every macro expanded`);
    const rows = await chRows(s.ch, sql);
    t.ok(Array.isArray(rows), `"${q.panel}" runs`);
    if (/customer|diagnostic|rejection/i.test(q.panel)) t.ok(rows.length > 0, `"${q.panel}" finds the traffic (${JSON.stringify(rows[0])})`);
  }
});
