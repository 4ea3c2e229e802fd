// The soak: for a minute (`--seconds`), several customers send a mix of valid reports, reports at
// the boundaries (largest integers, longest strings, unicode, 1,000 items, large snapshots, broken
// agent clocks) and invalid ones (what no column holds), generated from the TypeBox schemas, to one
// gateway and one worker. Then: every report answered 200/202 must be stored exactly once, counted
// as inserted rows by a view that never merges (bench/insert-ledger.ts: FINAL and uniqExact would
// show a report inserted twice as once, and merges stopped for the whole soak would make
// ClickHouse refuse inserts with "too many parts"), nothing may be dead-lettered, and no answer
// may be a 5xx.
// Prints one JSON object (bench/run.ts).
// Run alone: `npm run bench -- --only soak`.
import fc from 'fast-check';
import { Pool as HttpPool } from 'undici';
import { loadConfig } from '../lib/infra/config.js';
import { queryRows } from '../lib/infra/clickhouse.js';
import { deadLetterStream } from '../lib/contract/messages.js';
import { soakServers, backlog } from './fixtures.js';
import { createCustomer, createToken } from '../lib/store/customers.js';
import { idempotentReportId } from '../lib/contract/ids.js';
import { Proc } from '../deploy/service-process.js';
import { Heartbeat, Status, diagnosticsSchema } from '../lib/contract/schemas/ingest.js';
import { MetricsBody } from '../lib/contract/schemas/metrics.js';
import { arbitraryOf, toJson } from '../test/helpers/arbitraries.js';
import { insertLedger } from './insert-ledger.js';

const arg = (name: string, dflt: number) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : dflt);
const seconds = arg('--seconds', 60);
const customersN = arg('--customers', 5);
const rate = arg('--rate', 800);
const seed = arg('--seed', Math.floor(Math.random() * 2 ** 31));
const log = (m: string) => process.stderr.write(`[soak] ${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Kind = 'heartbeat' | 'diagnostics' | 'status' | 'metrics';
const schemas: Record<Kind, unknown> = { heartbeat: Heartbeat, diagnostics: diagnosticsSchema(1000), status: Status, metrics: MetricsBody };
const kinds = Object.keys(schemas) as Kind[];

const cfg = loadConfig();
const { pool, ch, nc, jsm } = await soakServers(cfg, 'soak', 2);

const run = Date.now().toString(36);
const customers: { id: string; slug: string; token: string }[] = [];
for (let i = 0; i < customersN; i++) {
  const c = await createCustomer(pool, `soak-${i}-${run}`);
  const { token } = await createToken(pool, c.id, 'soak');
  customers.push({ id: c.id, slug: c.slug, token });
}
await pool.query(`UPDATE licences SET device_limit = 1000000 WHERE customer_id = ANY($1::uuid[])`, [customers.map((c) => c.id)]);

// Before anything is inserted: every insert into the report tables is counted, whatever merges do.
const ledger = await insertLedger(ch, ['heartbeats', 'diagnostics', 'status_history'], `soak${Date.now()}`);

const env = { LOG_LEVEL: 'warn', GATEWAY_PORT: '0' };
const worker = new Proc('worker', 'workers/main.js', { ...env, LOG_LEVEL: 'info' });
await worker.waitFor((l) => l.msg === 'consuming', 60_000);
const gateway = new Proc('gateway', 'gateway/main.js', { ...env, LOG_LEVEL: 'info' });
const port = Number((await gateway.waitFor((l) => l.msg === 'listening', 60_000)).port);
const http = new HttpPool(`http://127.0.0.1:${port}`, { connections: 32 });

// Mostly valid reports (a fifth of them at the schema's boundaries), one in eight hostile.
const plain = (kind: Kind) => fc.constant({ kind, body: kind === 'heartbeat' ? { version: '5.10.2', uptime_seconds: 3600 } : kind === 'diagnostics' ? { items: [{ code: 1, severity: 0, message: 'ok' }] } : kind === 'status' ? { status: 'running', snapshot: { cpu: { value: 12.5, type: 'percent' } } } : { client_metric_id: 'x', values: { cpu: 1 } } });
const mixed = fc.oneof(
  { weight: 56, arbitrary: fc.oneof(...kinds.map(plain)) },
  { weight: 16, arbitrary: fc.oneof(...kinds.map((kind) => arbitraryOf(schemas[kind], { longArrays: 0.02 }).map((body) => ({ kind, body })))) },
  { weight: 8, arbitrary: fc.oneof(...kinds.map((kind) => arbitraryOf(schemas[kind], { hostile: true }).map((body) => ({ kind, body })))) },
);
const payloads = fc.sample(mixed, { seed, numRuns: 4000 });

interface Acked {
  kind: Kind;
  customer: number;
  id: string;
  items: number;
  metricIds: string[];
}
const acked: Acked[] = [];
const answers = new Map<number, number>();
let n = 0;
let sentBytes = 0;
const started = Date.now();
const deadline = started + seconds * 1000;

async function client(): Promise<void> {
  while (Date.now() < deadline) {
    const i = n++;
    // Paced: request i leaves no earlier than i / rate seconds after the start.
    const due = started + (i * 1000) / rate;
    if (due > Date.now()) await sleep(due - Date.now());
    const p = payloads[i % payloads.length]!;
    const ci = i % customers.length;
    const c = customers[ci]!;
    let body = p.body as Record<string, unknown>;
    // Host metrics: fresh client_metric_ids per request (a repeat is a duplicate, correctly not stored twice).
    const metricIds: string[] = [];
    if (p.kind === 'metrics') {
      const recs = Array.isArray((body as { items?: unknown[] }).items) ? ((body as { items: Record<string, unknown>[] }).items) : [body];
      const fresh = recs.map((r, j) => ({ ...r, client_metric_id: `soak-${run}-${i}-${j}` }));
      for (const r of fresh) metricIds.push(r.client_metric_id);
      body = Array.isArray((body as { items?: unknown[] }).items) ? { ...body, items: fresh } : fresh[0]!;
    }
    const key = `soak-${run}-${i}`;
    const text = toJson(body);
    sentBytes += text.length;
    const path = p.kind === 'metrics' ? `/api/ingest/${c.slug}/m${i % 50}/logcollector/metrics` : `/api/ingest/${c.slug}/m${i % 50}/sw${i % 3}/${p.kind}`;
    let status = 0;
    try {
      const r = await http.request({ method: 'POST', path, headers: { 'content-type': 'application/json', authorization: `Bearer ${c.token}`, 'idempotency-key': key }, body: text });
      status = r.statusCode;
      await r.body.dump();
    } catch {
      status = text.length > cfg.gateway.bodyLimit ? 413 : -1; // over the limit the gateway may close before the client finished sending
    }
    answers.set(status, (answers.get(status) ?? 0) + 1);
    if (status === 200 || status === 202) {
      const items = p.kind === 'diagnostics' ? ((body as { items: unknown[] }).items.length) : 1;
      acked.push({ kind: p.kind, customer: ci, id: idempotentReportId(c.id, p.kind, `m${i % 50}`, p.kind === 'metrics' ? 'logcollector' : `sw${i % 3}`, key), items, metricIds });
    }
  }
}

log(`soak: ${seconds} s at ${rate} requests/s offered, ${customersN} customers, seed ${seed}`);
await Promise.all(Array.from({ length: 32 }, client));
const sendSeconds = (Date.now() - started) / 1000;
log(`sent ${n} requests in ${sendSeconds.toFixed(1)} s; waiting for the stream to drain`);
const drainStart = Date.now();
for (;;) {
  if ((await backlog(jsm, cfg)) === 0) break;
  if (Date.now() - drainStart > 300_000) break;
  await sleep(200);
}
const drainS = (Date.now() - drainStart) / 1000;

const ids = customers.map((c) => `'${c.id}'`).join(',');
// Rows inserted per report (a report stored twice: twice its rows).
const rowsPer = (table: string) => ledger.inserted(table, customers.map((c) => c.id));
const [hb, dg, st] = await Promise.all([rowsPer('heartbeats'), rowsPer('diagnostics'), rowsPer('status_history')]);
await ledger.drop();
const metricRows = await queryRows<{ id: string }>(ch, `SELECT DISTINCT client_metric_id AS id FROM host_metrics FINAL WHERE customer_id IN (${ids})`);
const metricsStored = new Set(metricRows.map((r) => r.id));
let missing = 0;
// Acknowledged reports with more raw rows than they hold items (stored twice), and the rows too many.
let doubled = 0;
let extraRows = 0;
const missingExamples: string[] = [];
for (const a of acked) {
  if (a.kind === 'metrics') {
    for (const m of a.metricIds) if (!metricsStored.has(m)) missing++;
    continue;
  }
  const got = (a.kind === 'heartbeat' ? hb : a.kind === 'diagnostics' ? dg : st).get(a.id) ?? 0;
  if (got < a.items) {
    missing++;
    if (missingExamples.length < 5) missingExamples.push(`${a.kind} ${a.id}`);
  } else if (got > a.items) {
    doubled++;
    extraRows += got - a.items;
  }
}
// Rows that no 200 accounts for: a report stored without an acknowledgement is allowed (the client
// may have timed out after the PubAck), but counted.
const ackedIds = new Set(acked.map((a) => a.id));
const unacknowledged = [...hb.keys(), ...dg.keys(), ...st.keys()].filter((id) => !ackedIds.has(id)).length;
const dlq = await jsm.streams.info(deadLetterStream(cfg.streamName));

const result = {
  seconds,
  seed,
  customers: customersN,
  offered_rate: rate,
  requests: n,
  achieved_rate: Math.round(n / sendSeconds),
  mb_sent: Math.round(sentBytes / 1e5) / 10,
  answers: Object.fromEntries([...answers.entries()].sort((a, b) => a[0] - b[0])),
  acknowledged: acked.length,
  stored_exactly_once: acked.length - missing - doubled,
  missing,
  missing_examples: missingExamples,
  doubled,
  doubled_extra_rows: extraRows,
  stored_without_ack: unacknowledged,
  dead_letters: dlq.state.messages,
  server_errors: [...answers.entries()].filter(([s]) => s >= 500 || s < 0).reduce((a, [, v]) => a + v, 0),
  drain_after_send_s: drainS,
  ok: missing === 0 && doubled === 0 && dlq.state.messages === 0 && ![...answers.keys()].some((s) => s >= 500 || s < 0),
};
log(`soak: ${result.acknowledged} acknowledged, ${result.stored_exactly_once} stored exactly once, ${missing} missing, ${doubled} doubled, ${result.dead_letters} dead letters, ${result.server_errors} 5xx: ${result.ok ? 'OK' : 'FAILED'}`);
await http.close();
await gateway.stop();
await worker.stop();
await nc.close();
await pool.end();
await ch.close();
process.stdout.write(JSON.stringify(result) + '\n');
process.exit(result.ok ? 0 : 1);
