// Property: every report the gateway answers 200 (or 202) is stored — Postgres and ClickHouse —
// and none is dead-lettered. Payloads are generated from the TypeBox schemas (test/helpers/
// arbitraries.ts), biased to the boundaries; a 4xx is a fine answer (invalid values are generated
// on purpose), a 5xx is not. Any value the gateway accepts and storage refuses fails the test.
// The seed is printed; FC_SEED=<seed> repeats a run, FC_RUNS=<n> changes its size.
import t from 'tap';
import fc from 'fast-check';
import { testStack, eventually, chRows, consumed } from '../helpers/stack.js';
import { arbitraryOf, toJson, nested, Raw } from '../helpers/arbitraries.js';
import { Heartbeat, Status, diagnosticsSchema, helpSchema } from '../../lib/contract/schemas/ingest.js';
import { MetricsBody } from '../../lib/contract/schemas/metrics.js';
import { idempotentReportId } from '../../lib/contract/ids.js';
import { deadLetterStream } from '../../lib/contract/messages.js';

const s = await testStack(t, 'prop');
await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [s.customer.id]);
const seed = Number(process.env.FC_SEED ?? Math.floor(Math.random() * 2 ** 31));
const runs = Number(process.env.FC_RUNS ?? 300);
t.comment(`fast-check seed ${seed}, ${runs} payloads (FC_SEED=${seed} repeats this run)`);

type Kind = 'heartbeat' | 'diagnostics' | 'status' | 'help' | 'metrics';
interface Case {
  kind: Kind;
  body: unknown;
}
const schemas: Record<Kind, unknown> = {
  heartbeat: Heartbeat,
  diagnostics: diagnosticsSchema(1000),
  status: Status,
  help: helpSchema(1000),
  metrics: MetricsBody,
};
// Two in three payloads keep to their schema (at its boundaries); one in three is hostile.
const payload = (hostile: boolean) =>
  fc.oneof(...(Object.keys(schemas) as Kind[]).map((kind) => arbitraryOf(schemas[kind], { hostile, longArrays: kind === 'diagnostics' ? 0.05 : 0.02 }).map((body) => ({ kind, body }) as Case)));
const generated = fc.sample(fc.oneof({ weight: 2, arbitrary: payload(false) }, { weight: 1, arbitrary: payload(true) }), { seed, numRuns: runs });

// The extremes, every run: the deepest and the largest snapshot, 1,000 items, the largest body.
const big = (n: number) => 'x'.repeat(n);
const extremes: Case[] = [
  { kind: 'status', body: { status: 'running', snapshot: nested(32) } },
  { kind: 'status', body: { status: 'running', snapshot: nested(33) } },
  { kind: 'status', body: { status: 'running', snapshot: { blob: big(256 * 1024 - 16) } } },
  { kind: 'status', body: { status: 'running', snapshot: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, { value: i, type: 'integer' }])) } },
  { kind: 'diagnostics', body: { items: Array.from({ length: 1000 }, (_, i) => ({ code: i - 500, severity: i % 3, message: big(1000) })) } },
  { kind: 'diagnostics', body: { items: Array.from({ length: 1000 }, (_, i) => ({ code: 2147483647 - i, severity: 0, message: '\u{1F600}'.repeat(4096) })).slice(0, 60) } },
  { kind: 'heartbeat', body: { ts: '1970-01-01T00:00:00Z', uptime_seconds: Number.MAX_SAFE_INTEGER, pid: 0, group_priority: '-999999999999999', sort_priority: -Number.MAX_SAFE_INTEGER } },
  { kind: 'heartbeat', body: { ts: '9999-12-31T23:59:59Z', uptime_seconds: new Raw('1e309') } },
  { kind: 'help', body: { items: Array.from({ length: 15 }, (_, i) => ({ code: i, lang: i % 2 ? 'de' : 'en', title: big(256), text: big(65536) })) } },
  { kind: 'metrics', body: { items: Array.from({ length: 1000 }, (_, i) => ({ client_metric_id: `edge-${seed}-${i}`, values: { v: i === 0 ? 1.7976931348623157e308 : -i } })) } },
];
// And a sweep: a full, valid payload of each kind with one leaf at a time replaced by each value
// at or past a boundary (every field meets every hostile value once; nothing else masks it).
const now = new Date().toISOString();
const full: Record<Kind, unknown> = {
  heartbeat: { ts: now, version: '1.2.3', uptime_seconds: 10, pid: 42, ip_addresses: ['10.0.0.1'], group: 'g', location: 'l', group_priority: 1, sort_priority: '2' },
  diagnostics: { items: [{ code: 1, message: 'm', severity: 1 }] },
  status: { status: 'running', message: 'm', snapshot: { a: { value: 1, type: 'integer', unit: 'u' }, b: 'x', c: [1.5, true] } },
  help: { items: [{ code: 1, lang: 'en', title: 't', text: 'x' }] },
  metrics: { items: [{ client_metric_id: 'id', ts: now, values: { v: 1 }, labels: { l: 'x' } }] },
};
const HOSTILE: unknown[] = [
  new Raw('1e308'), new Raw('1e309'), new Raw('-1e309'), new Raw('10000000000000000000'), new Raw('9007199254740993'), new Raw('-9007199254740992'),
  Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 2147483648, -1, new Raw('-0'), 0.5,
  '\u0000', 'a\ud800b', '\udfff', '\u{1F600}'.repeat(300), 'x'.repeat(70_000), '',
  '1969-12-31T23:59:59Z', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59Z', '2016-12-31T23:59:60Z',
  null, true, [], {},
];
function leaves(v: unknown, path: string[] = []): string[][] {
  if (v === null || typeof v !== 'object') return [path];
  const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
  return entries.flatMap(([k, x]) => leaves(x, [...path, k]));
}
function replaced(v: unknown, path: string[], value: unknown): unknown {
  if (path.length === 0) return value;
  const copy: any = Array.isArray(v) ? [...v] : { ...(v as object) };
  copy[path[0]!] = replaced(copy[path[0]!], path.slice(1), value);
  return copy;
}
const sweep: Case[] = (Object.keys(full) as Kind[]).flatMap((kind) =>
  leaves(full[kind]).flatMap((path) => HOSTILE.map((value) => ({ kind, body: replaced(full[kind], path, value) }))),
);
t.comment(`${generated.length} generated payloads, ${extremes.length} extremes, ${sweep.length} boundary mutations`);
const cases = [...generated, ...extremes, ...sweep];

const machineOf = (i: number) => `m${i % 25}`;
const softwareOf = (c: Case, i: number) => (c.kind === 'metrics' ? 'logcollector' : `sw${i % 3}`);
const key = (i: number) => `prop-${seed}-${i}`;
const reportId = (i: number, c: Case) => idempotentReportId(s.customer.id, c.kind, machineOf(i), softwareOf(c, i), key(i));

interface Sent {
  i: number;
  c: Case;
  status: number;
  text: string;
  body: string;
}

async function send(c: Case, i: number): Promise<Sent> {
  const body = toJson(c.body);
  const path = c.kind === 'metrics' ? `${machineOf(i)}/logcollector/metrics` : `${machineOf(i)}/${softwareOf(c, i)}/${c.kind}`;
  try {
    const r = await fetch(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/${path}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${s.token}`, 'Idempotency-Key': key(i) },
      body,
    });
    return { i, c, status: r.status, text: await r.text(), body };
  } catch (e) {
    // Over the body limit the gateway answers 413 and closes at once; a client still writing
    // may see the connection go (EPIPE) before it reads the answer.
    if (Buffer.byteLength(body) > 1024 * 1024) return { i, c, status: 413, text: '{"detail":"closed while sending"}', body };
    throw e;
  }
}

const sent: Sent[] = [];
// A little ordinary traffic first: the boundaries arrive after it, as in production.
for (let i = 0; i < 50; i++) sent.push(await send({ kind: 'heartbeat', body: { version: '1.0' } }, 100_000 + i));
for (let i = 0; i < cases.length; i += 16) sent.push(...(await Promise.all(cases.slice(i, i + 16).map((c, j) => send(c, i + j)))));

const accepted = sent.filter((x) => x.status === 200 || x.status === 202);
const byStatus = new Map<number, number>();
for (const x of sent) byStatus.set(x.status, (byStatus.get(x.status) ?? 0) + 1);
t.comment(`answers: ${[...byStatus.entries()].map(([k, v]) => `${k}×${v}`).join(', ')}`);

t.test('no payload gets a 5xx, and every refusal says why', async (t) => {
  for (const x of sent) {
    if (x.status >= 500) t.fail(`5xx for ${x.c.kind} ${x.body.slice(0, 300)}: ${x.text}`);
    else if (x.status >= 400 && !JSON.parse(x.text).detail) t.fail(`${x.status} without a detail: ${x.text}`);
  }
  t.ok(accepted.length > sent.length / 4, `a good share is accepted (${accepted.length} of ${sent.length})`);
});

const parsed = (x: Sent) => JSON.parse(x.body) as Record<string, any>;
const ids = (kind: Kind) => accepted.filter((x) => x.c.kind === kind && x.i < 100_000).map((x) => ({ x, id: reportId(x.i, x.c) }));
const inList = (xs: { id: string }[]) => xs.map((x) => `'${x.id}'`).join(',') || "''";

t.test('every accepted report is stored: heartbeats, diagnostics, status, help, metrics', async (t) => {
  const hb = ids('heartbeat');
  const dg = ids('diagnostics');
  const st = ids('status');
  const expectDiag = new Map(dg.map(({ x, id }) => [id, parsed(x).items.length as number]));
  await eventually(
    async () => {
      const [h, d, sh] = await Promise.all([
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE report_id IN (${inList(hb)})`),
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM diagnostics FINAL WHERE report_id IN (${inList(dg)})`),
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM status_history FINAL WHERE report_id IN (${inList(st)})`),
      ]);
      const wantDiag = [...expectDiag.values()].reduce((a, b) => a + b, 0);
      return Number(h[0]!.n) === hb.length && Number(d[0]!.n) === wantDiag && Number(sh[0]!.n) === st.length;
    },
    90_000,
    'every accepted heartbeat, diagnostic item and status stored',
  ).catch((e) => t.fail(String(e)));

  // Heartbeats: fields as sent; the agent's ts where plausible, else the receive time and the flag.
  const hrows = await chRows<{ report_id: string; version: string; ts_ms: string; received_ms: string; clock_skew: number; agent_ts: string; group_name: string; uptime_seconds: string | null }>(
    s.ch,
    `SELECT report_id, version, ts_ms, received_ms, clock_skew, agent_ts, group_name, uptime_seconds FROM heartbeats FINAL WHERE report_id IN (${inList(hb)})`,
  );
  const hmap = new Map(hrows.map((r) => [r.report_id, r]));
  for (const { x, id } of hb) {
    const b = parsed(x);
    const row = hmap.get(id);
    if (!row) {
      t.fail(`heartbeat not stored: ${x.body.slice(0, 300)}`);
      continue;
    }
    if (typeof b.version === 'string' && row.version !== b.version) t.fail(`version changed: ${JSON.stringify(b.version)} -> ${JSON.stringify(row.version)}`);
    if (typeof b.group === 'string' && row.group_name !== b.group) t.fail(`group changed: ${JSON.stringify(b.group)}`);
    if (typeof b.uptime_seconds === 'number' && Number(row.uptime_seconds) !== b.uptime_seconds) t.fail(`uptime changed: ${b.uptime_seconds} -> ${row.uptime_seconds}`);
    if (typeof b.ts === 'string') {
      const ms = Date.parse(b.ts);
      const plausible = Number.isFinite(ms) && ms >= Number(row.received_ms) - 30 * 86_400_000 && ms <= Number(row.received_ms) + 86_400_000;
      if (plausible !== (row.clock_skew === 0)) t.fail(`clock skew flag wrong for ts ${b.ts}: ${row.clock_skew}`);
      if (Number(row.ts_ms) !== (plausible ? ms : Number(row.received_ms))) t.fail(`ts_ms ${row.ts_ms} for ts ${b.ts}`);
      if (row.agent_ts !== b.ts) t.fail(`agent_ts ${row.agent_ts} for ${b.ts}`);
    }
  }
  // Status: the snapshot as sent (as JSON values), newest in Postgres.
  const srows = await chRows<{ report_id: string; status: string; snapshot: string }>(s.ch, `SELECT report_id, status, snapshot FROM status_history FINAL WHERE report_id IN (${inList(st)})`);
  const smap = new Map(srows.map((r) => [r.report_id, r]));
  for (const { x, id } of st) {
    const b = parsed(x);
    const row = smap.get(id);
    if (!row) {
      t.fail(`status not stored: ${x.body.slice(0, 300)}`);
      continue;
    }
    if (row.status !== b.status) t.fail('status changed');
    const want = b.snapshot === undefined ? '' : JSON.stringify(b.snapshot);
    if (row.snapshot !== want) t.fail(`snapshot changed: ${want.slice(0, 200)} -> ${row.snapshot.slice(0, 200)}`);
  }
  // Postgres: one instance per machine and software that sent an accepted report.
  const want = new Set(accepted.filter((x) => x.c.kind !== 'help' && x.c.kind !== 'metrics').map((x) => `${machineOf(x.i)}/${softwareOf(x.c, x.i)}`));
  const inst = await s.pool.query<{ k: string }>(`SELECT m.slug || '/' || i.software AS k FROM instances i JOIN machines m ON m.id = i.machine_id WHERE i.customer_id = $1`, [s.customer.id]);
  const have = new Set(inst.rows.map((r) => r.k));
  for (const k of want) if (!have.has(k)) t.fail(`no instance ${k} in Postgres`);

  // Help texts: every accepted (software, code, lang) is there.
  const help = accepted.filter((x) => x.c.kind === 'help');
  const rows = await s.pool.query<{ k: string }>(`SELECT software || '/' || code || '/' || lang AS k FROM help_texts WHERE customer_id = $1`, [s.customer.id]);
  const helpHave = new Set(rows.rows.map((r) => r.k));
  for (const x of help) for (const it of parsed(x).items) if (!helpHave.has(`${softwareOf(x.c, x.i)}/${it.code}/${it.lang}`)) t.fail(`help text ${it.code}/${it.lang} not stored`);

  // Host metrics: every record of an accepted request, under its client_metric_id.
  const metricIds = new Set<string>();
  for (const x of accepted.filter((y) => y.c.kind === 'metrics')) {
    const b = parsed(x);
    for (const r of b.items ?? [b]) metricIds.add(r.client_metric_id);
  }
  if (metricIds.size > 0) {
    const list = [...metricIds].map((m) => `'${m.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`).join(',');
    const got = await eventually(async () => {
      const r = await chRows<{ id: string }>(s.ch, `SELECT DISTINCT client_metric_id AS id FROM host_metrics FINAL WHERE customer_id = '${s.customer.id}' AND client_metric_id IN (${list})`);
      return r.length === metricIds.size ? r : null;
    }, 30_000, 'every accepted metric record stored').catch(() => null);
    t.ok(got, `${metricIds.size} metric records stored`);
  }
  t.pass(`${accepted.length} accepted reports checked`);
});

t.test('nothing was dead-lettered', async (t) => {
  const jsm = await s.nc.jetstreamManager();
  await consumed(s, 30_000);
  const dlq = await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!));
  t.equal(dlq.state.messages, 0, 'dead-letter stream empty');
  const q = await chRows<{ detail: string }>(s.ch, `SELECT detail FROM ingest_rejections FINAL WHERE method = 'QUEUE'`);
  t.same(q, [], 'no dead-letter rows in the rejection log');
});
