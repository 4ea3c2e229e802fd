// Fuzzing of raw request bodies on every ingest route, against the real gateway and worker:
// heartbeat, diagnostics, status, help, host metrics, artifact-init, command ack and batch. Bodies
// are generated with fast-check as text, not as values, and biased to what once ended a gateway or
// stalled a worker: nesting at and far past JSON_MAX_DEPTH, width at JSON_MAX_NODES, number forms
// (9e20, 1e309, -0, 30 digits), long strings, unicode (astral, escaped lone surrogates, NUL),
// invalid UTF-8, truncated JSON, and valid bodies with one subtree replaced by any of these.
// The properties: no process restarts; every answer is 2xx or 4xx (never 5xx); every 2xx is stored;
// no dead letters. The seed is printed; FC_SEED=<seed> repeats a run, FC_RUNS=<n> changes its size.
import t from 'tap';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { testStack, eventually, chRows, request, get } from '../helpers/stack.js';
import { idempotentReportId } from '../../lib/contract/ids.js';
import { deadLetterStream } from '../../lib/contract/messages.js';

const s = await testStack(t, 'fuzz', {
  env: { RATE_LIMIT_PER_S: '100000', RATE_LIMIT_BURST: '100000' },
});
await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [s.customer.id]);
const seed = Number(process.env.FC_SEED ?? Math.floor(Math.random() * 2 ** 31));
const runs = Number(process.env.FC_RUNS ?? 400);
t.comment(`fast-check seed ${seed}, ${runs} requests (FC_SEED=${seed} repeats this run)`);
const procs = s.procs.map((p) => ({ p, pid: p.child.pid }));

type Route = 'heartbeat' | 'diagnostics' | 'status' | 'help' | 'metrics' | 'artifact-init' | 'command_ack' | 'batch';
const ROUTES: Route[] = ['heartbeat', 'diagnostics', 'status', 'help', 'metrics', 'artifact-init', 'command_ack', 'batch'];

// ---- text generators ----
const NUMBERS = ['0', '-0', '9e20', '1e309', '-1e309', '1E+2', '0.1e-400', '123456789012345678901234567890', '2147483648', '-2147483649', '9007199254740993', '1.7976931348623157e308', '5e-324'];
const STRINGS = ['""', '"\\u0000"', '"\\ud800"', '"\\udfff\\ud800"', '"😀😀"', '"é\\u00e9İ"', '"\\"\\\\/\\b\\f\\n\\r\\t"', '"‮rtl"'];
const scalar = fc.oneof(
  fc.constantFrom(...NUMBERS, ...STRINGS, 'true', 'false', 'null'),
  fc.double().map((d) => (Number.isFinite(d) ? String(d) : '1e309')),
  fc.string({ unit: 'binary', maxLength: 40 }).map((x) => JSON.stringify(x)),
  fc.integer({ min: 1, max: 300_000 }).map((n) => JSON.stringify('x'.repeat(n))),
);
/** Nesting: at the limit, just past it, far past it. */
const depth = fc.oneof(fc.integer({ min: 0, max: 8 }), fc.integer({ min: 60, max: 70 }), fc.integer({ min: 125, max: 135 }), fc.constantFrom(1000, 20_000));
const nestedValue = fc.tuple(depth, scalar, fc.boolean()).map(([d, leaf, objects]) => (objects ? `${'{"k":'.repeat(d)}${leaf}${'}'.repeat(d)}` : `${'['.repeat(d)}${leaf}${']'.repeat(d)}`));
/** Width: around JSON_MAX_NODES (100,000). */
const wideValue = fc.constantFrom(10, 1000, 99_990, 100_010, 200_000).map((n) => `[${'0,'.repeat(n - 1)}0]`);
const anyValue = fc.oneof({ weight: 4, arbitrary: scalar }, { weight: 3, arbitrary: nestedValue }, { weight: 1, arbitrary: wideValue });

const now = () => new Date().toISOString();
/** A valid body of each route, with `hole` where a subtree may be replaced. */
const TEMPLATES: Record<Route, (id: string, hole: string) => string> = {
  heartbeat: (_id, h) => `{"ts":"${now()}","version":"1.0","group":"g","extra":${h}}`,
  diagnostics: (_id, h) => `{"items":[{"code":1,"severity":1,"message":"m"},{"code":2,"severity":0,"message":"n","extra":${h}}]}`,
  status: (_id, h) => `{"status":"running","message":"m","snapshot":{"a":{"value":1,"type":"integer"},"b":${h}}}`,
  help: (_id, h) => `{"items":[{"code":1,"lang":"en","title":"t","text":"x","extra":${h}}]}`,
  metrics: (id, h) => `{"items":[{"client_metric_id":"${id}-0","values":{"v":1}},{"client_metric_id":"${id}-1","values":{"v":2},"labels":{"l":"x"},"extra":${h}}]}`,
  'artifact-init': (_id, h) => `{"filename":"f.bin","size":10,"extra":${h}}`,
  command_ack: (_id, h) => `{"result":"success","message":"m","output":${h}}`,
  batch: (id, h) =>
    `{"entries":[{"machine":"bm","software":"agent","kind":"heartbeat","idempotency_key":"${id}-0"},` +
    `{"machine":"bm","software":"agent","kind":"status","idempotency_key":"${id}-1","body":{"status":"running","snapshot":${h}}}]}`,
};
/** What the template's own hole is when nothing replaces it. */
const PLAIN = '1';

type Body = { text: string } | { bytes: Buffer };
const bodyOf = (route: Route, id: string) =>
  fc.oneof(
    { weight: 3, arbitrary: anyValue.map((h) => ({ text: TEMPLATES[route](id, h) }) as Body) },
    { weight: 1, arbitrary: fc.constant({ text: TEMPLATES[route](id, PLAIN) } as Body) },
    { weight: 1, arbitrary: anyValue.map((v) => ({ text: v }) as Body) },
    // Truncated, with a byte order mark, or not UTF-8.
    { weight: 1, arbitrary: fc.nat().map((n) => { const x = TEMPLATES[route](id, PLAIN); return { text: x.slice(0, n % x.length) } as Body; }) },
    { weight: 1, arbitrary: fc.constant({ text: `\uFEFF${TEMPLATES[route](id, PLAIN)}` } as Body) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => ({ bytes: Buffer.concat([Buffer.from('{"a":"'), Buffer.from(b), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]) }) as Body) },
  );

interface Sent {
  route: Route;
  machine: string;
  id: string;
  status: number;
  answer: any;
}

const gw = s.gatewayUrl;
function urlOf(route: Route, machine: string): string {
  const base = `${gw}/api/ingest/${s.customer.slug}`;
  if (route === 'batch') return `${base}/batch`;
  if (route === 'metrics') return `${base}/${machine}/logcollector/metrics`;
  if (route === 'command_ack') return `${base}/${machine}/agent/commands/${randomUUID()}/ack`;
  return `${base}/${machine}/agent/${route}`;
}

const cases = fc.sample(fc.tuple(fc.constantFrom(...ROUTES), fc.nat()), { seed, numRuns: runs });
const sent: Sent[] = [];

t.test('every ingest route answers raw hostile bodies with 2xx or 4xx, and no process restarts', async (t) => {
  let i = 0;
  const statuses = new Map<string, number>();
  for (const [route, n] of cases) {
    const id = `fz-${seed}-${i++}`;
    const machine = `fz${n % 20}`;
    const [body] = fc.sample(bodyOf(route, id), { seed: seed + i, numRuns: 1 });
    const payload = 'bytes' in body! ? body.bytes : body!.text;
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    if (route !== 'batch' && route !== 'metrics') headers['Idempotency-Key'] = id;
    const r = await fetch(urlOf(route, machine), { method: 'POST', headers: { ...headers, Authorization: `Bearer ${s.token}` }, body: payload });
    const text = await r.text();
    let answer: any = text;
    try {
      answer = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    statuses.set(`${route} ${r.status}`, (statuses.get(`${route} ${r.status}`) ?? 0) + 1);
    if (r.status >= 500) t.fail(`${route}: ${r.status} ${text.slice(0, 300)}; body ${String(payload).slice(0, 200)}`);
    if (r.status >= 400 && typeof answer?.detail !== 'string') t.fail(`${route}: ${r.status} without a detail: ${text.slice(0, 200)}`);
    sent.push({ route, machine, id, status: r.status, answer });
  }
  t.comment([...statuses].sort().map(([k, v]) => `${k}: ${v}`).join(', '));
  for (const { p, pid } of procs) t.ok(p.running && p.child.pid === pid, `${p.name} (pid ${pid}) never restarted`);
  t.equal((await get(`${gw}/healthz`, null)).status, 200);
  const ok = sent.filter((x) => x.status < 300).length;
  t.ok(ok > runs / 10 && ok < runs, `both accepted and refused bodies were sent (${ok} of ${runs} accepted)`);
});

t.test('every 2xx is stored, and nothing is dead-lettered', async (t) => {
  const accepted = sent.filter((x) => x.status < 300);
  const reportIds = (route: Route) =>
    accepted.filter((x) => x.route === route).map((x) => `'${idempotentReportId(s.customer.id, route, x.machine, 'agent', x.id)}'`);
  const batchIds = accepted
    .filter((x) => x.route === 'batch')
    .flatMap((x) => (x.answer.results as { status: number; id?: string }[]).filter((r) => r.status < 300).map((r) => `'${r.id}'`));
  const want = { heartbeats: reportIds('heartbeat'), diagnostics: reportIds('diagnostics'), status_history: reportIds('status') };
  // A marker after everything (its lane's reports before it are applied once it is stored); then
  // each table is waited for until it holds every accepted report.
  t.equal((await s.report('fz-marker', 'heartbeat', {})).status, 200);
  await eventually(async () => (await chRows(s.ch, `SELECT 1 FROM heartbeats FINAL WHERE machine = 'fz-marker'`)).length === 1, 60_000, 'marker stored');
  for (const [table, ids] of Object.entries(want)) {
    if (ids.length === 0) continue;
    await eventually(
      async () => Number((await chRows<{ n: string }>(s.ch, `SELECT uniqExact(report_id) AS n FROM ${table} WHERE report_id IN (${ids.join(',')})`))[0]!.n) === ids.length,
      60_000,
      `${table}: every accepted report stored (${ids.length})`,
    );
  }
  // A batch entry is a heartbeat or a status report: each accepted id is in one of the two tables.
  // (Waited for: the marker heartbeat's lane says nothing of the status reports' lane.)
  const batchStored = async () =>
    Number(
      (await chRows<{ n: string }>(s.ch, `SELECT uniqExact(report_id) AS n FROM (SELECT report_id FROM heartbeats WHERE report_id IN (${batchIds.join(',') || "''"}) UNION ALL SELECT report_id FROM status_history WHERE report_id IN (${batchIds.join(',') || "''"}))`))[0]!.n,
    );
  await eventually(async () => (await batchStored()) === batchIds.length, 60_000, `every accepted batch entry stored (${batchIds.length})`);
  t.equal(await batchStored(), batchIds.length, `every accepted batch entry stored (${batchIds.length})`);
  const metricIds = accepted.filter((x) => x.route === 'metrics').reduce((n, x) => n + Number(x.answer.accepted), 0);
  const metricPrefixes = accepted.filter((x) => x.route === 'metrics').map((x) => `startsWith(client_metric_id, '${x.id}-')`);
  if (metricIds > 0) {
    await eventually(
      async () => Number((await chRows<{ n: string }>(s.ch, `SELECT uniqExact(client_metric_id) AS n FROM host_metrics WHERE ${metricPrefixes.join(' OR ')}`))[0]!.n) === metricIds,
      60_000,
      `every accepted metric record stored (${metricIds})`,
    );
  }
  for (const x of accepted.filter((x) => x.route === 'artifact-init')) {
    const st = await request('GET', `${gw}/api/ingest/${s.customer.slug}/${x.machine}/agent/artifact-status/${x.answer.upload_id}`, s.token);
    if (st.status !== 200) t.fail(`artifact-init answered ${x.status} but its upload is ${st.status}`);
  }
  const helps = accepted.filter((x) => x.route === 'help').length;
  if (helps > 0) {
    const r = await s.pool.query(`SELECT count(*)::int AS n FROM help_texts WHERE customer_id = $1 AND software = 'agent' AND code = 1 AND lang = 'en'`, [s.customer.id]);
    t.equal(r.rows[0].n, 1, 'accepted help texts stored');
  }
  const jsm = await s.nc.jetstreamManager();
  const dlq = await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!));
  t.equal(dlq.state.messages, 0, 'no dead letters');
  for (const { p, pid } of procs) t.ok(p.running && p.child.pid === pid, `${p.name} (pid ${pid}) never restarted`);
});
