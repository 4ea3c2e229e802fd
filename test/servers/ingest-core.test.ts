// The gateway's ingest core (gateway/ingest.ts, gateway/batch.ts) with no HTTP server at all: its
// parts are built in-process over this file's own Postgres database, streams and Redis prefix, and
// each request is a plain object (`Call`). What it answered 200 is read back from JetStream (no
// worker runs: the stream keeps every message) and decoded with the queue's codec. What the uWS
// routes answer (test/stack/*) is what the core decides: this shows the core stands on its own.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';
import { loadConfig } from '../../lib/infra/config.js';
import { createLogger } from '../../lib/infra/log.js';
import { createMetrics } from '../../lib/infra/metrics.js';
import { subjects, heartbeatStream, decodeBatch, toReport, partitionOf, type Report } from '../../lib/contract/messages.js';
import { HttpError } from '../../lib/contract/errors.js';
import { ArtifactStore } from '../../lib/store/artifacts.js';
import { QuotaCache } from '../../lib/store/quotas.js';
import { ArtifactUsage } from '../../lib/store/artifact-usage.js';
import { TokenCache } from '../../gateway/token-cache.js';
import { HelpCoverage } from '../../gateway/help-coverage.js';
import { LicenceGate } from '../../gateway/licence-gate.js';
import { PendingCommands } from '../../gateway/pending-commands.js';
import { IdempotencyRegister } from '../../gateway/idempotency.js';
import { RejectionLog } from '../../gateway/rejection-log.js';
import { BatchPublisher, IngestPublisher } from '../../gateway/publisher.js';
import { Ingest, isRefusal } from '../../gateway/ingest.js';
import { BatchIngest } from '../../gateway/batch.js';
import type { Answer, Call, GatewayDeps, IngestPath, JsonKind, Outcome } from '../../gateway/types.js';

const s = await testStack(t, 'ingestcore', { gateway: false, worker: false, api: false });
const cfg = loadConfig({ ...process.env, ...s.env });
const log = createLogger('gateway', 'warn');
const metrics = createMetrics('gateway');
const HOUR = 3_600_000;
const fail = (e: unknown) => t.fail(String(e));

const tokens = new TokenCache(s.pool, HOUR, fail);
const help = new HelpCoverage(s.pool, HOUR, fail);
const licences = new LicenceGate(s.pool, HOUR, fail);
const quotas = new QuotaCache(s.pool, cfg, HOUR, fail);
const subj = subjects(cfg.subjectPrefix);
const commands = new PendingCommands({ pool: s.pool, nc: s.nc, subject: subj.control('commands'), resyncMs: HOUR, onError: fail });
await Promise.all([tokens.start(), help.start(), licences.start(), quotas.start(), commands.start()]);
const js = s.nc.jetstream();
const lane = { timeoutMs: 5000, maxReports: 512, maxBytes: 512 * 1024, maxInflight: 4 };
const stats = { published: () => {}, failed: (_n: number, reason: string) => t.fail(`publish failed: ${reason}`) };
const publisher = new IngestPublisher([{
  reports: new BatchPublisher(s.nc, js, { ...lane, subject: subj.reports, streamName: cfg.streamName }, stats),
  heartbeats: new BatchPublisher(s.nc, js, { ...lane, subject: subj.heartbeats, streamName: heartbeatStream(cfg.streamName) }, stats),
}]);
publisher.connected = true;
const deps: GatewayDeps = {
  cfg,
  log,
  metrics,
  tokens,
  publisher,
  rejections: new RejectionLog(s.nc, subj.rejections, 100, 100, () => true),
  help,
  licences,
  redis: s.redis,
  artifacts: await ArtifactStore.open(s.nc, cfg),
  quotas,
  artifactUsage: new ArtifactUsage(s.redis, cfg.redisPrefix),
  commands,
  idempotency: new IdempotencyRegister(s.redis, cfg.redisPrefix, cfg.idempotencyTtlS),
  isReady: () => true,
  isClosing: () => false,
};
t.teardown(async () => {
  tokens.stop();
  help.stop();
  licences.stop();
  quotas.stop();
  commands.stop();
  await publisher.idle();
});

const core = new Ingest(deps);
const batch = new BatchIngest(core);

/** A request as the core sees it: no socket, errors fail the test. */
const call = (): Call => ({ aborted: false, reportId: '', guard: (fn) => fn, fail });
const outcome = (f: (done: (o: Outcome) => void) => void) => new Promise<Outcome>((resolve) => f(resolve));
const text = (a: Answer) => (typeof a.body === 'string' ? a.body : Buffer.from(a.body).toString());

/** One report the way a route takes it: admit before the body, then ingest the body. */
async function send(kind: JsonKind, path: IngestPath, body: string, opts: { bearer?: string; idemKey?: string } = {}): Promise<Outcome> {
  const gate = core.admit(path, `Bearer ${opts.bearer ?? s.token}`);
  if (isRefusal(gate)) return gate.refused;
  const tok = gate.known ?? (await core.resolve(gate.bearer, path));
  if (isRefusal(tok)) return tok.refused;
  const c = call();
  return outcome((done) => core.ingest(c, kind, tok, path, Buffer.from(body), { idemKey: opts.idemKey ?? '' }, done));
}

const path = (machine: string, software = 'agent'): IngestPath => ({ customer: s.customer.slug, machine, software });

/** Every report in both ingest streams (nothing consumes them here), decoded as a worker would. */
async function queued(): Promise<Report[]> {
  const jsm = await s.nc.jetstreamManager();
  const out: Report[] = [];
  for (const stream of [cfg.streamName, heartbeatStream(cfg.streamName)]) {
    const { state } = await jsm.streams.info(stream);
    for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq });
      out.push(...decodeBatch(m.data).r.map(toReport));
    }
  }
  return out;
}
const bodyOf = (r: Report) => (typeof r.body === 'string' ? r.body : JSON.stringify(r.body));

t.test('a heartbeat through the core alone: 200 once JetStream has it, and it is in the heartbeat lane', async (t) => {
  const o = await send('heartbeat', path('core-m1'), '{"uptime_seconds":42}');
  t.notOk(o instanceof HttpError, 'accepted');
  t.equal((o as Answer).status, 200);
  t.same(JSON.parse(text(o as Answer)), { ok: true });
  const mine = (await queued()).filter((r) => r.machine === 'core-m1');
  t.equal(mine.length, 1, 'one report queued');
  t.match(mine[0], { kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, software: 'agent' });
  t.same(JSON.parse(bodyOf(mine[0]!)), { uptime_seconds: 42 }, 'its body as sent');
  const { state } = await (await s.nc.jetstreamManager()).streams.info(heartbeatStream(cfg.streamName));
  t.ok(state.messages >= 1, 'in the heartbeat lane\'s stream');
});

t.test('refusals are decided by the core, before and after the body', async (t) => {
  const before = core.admit(path('core-m2'), 'Bearer not-a-token-of-anyone');
  t.notOk(isRefusal(before), 'an unknown bearer is looked up, not refused from the copy');
  if (!isRefusal(before)) {
    const r = await core.resolve(before.bearer, path('core-m2'));
    t.ok(isRefusal(r) && r.refused.status === 403, 'an unknown token: 403');
  }
  const noBearer = core.admit(path('core-m2'), '');
  t.ok(isRefusal(noBearer) && noBearer.refused.status === 403 && noBearer.customer === s.customer.slug, 'no bearer: 403, counted against the path\'s customer');
  const badSlug = core.admit({ customer: s.customer.slug, machine: 'Not A Slug', software: 'agent' }, `Bearer ${s.token}`);
  t.ok(isRefusal(badSlug) && badSlug.refused.status === 400, 'a machine that is not a slug: 400');
  const other = await s.newCustomer(`core-other-${randomUUID().slice(0, 6)}`);
  await tokens.refresh();
  const foreign = core.admit(path('core-m2'), `Bearer ${other.token}`);
  t.ok(isRefusal(foreign) && foreign.refused.status === 403, 'another customer\'s token on this customer\'s path: 403');

  const notJson = await send('heartbeat', path('core-m2'), '{"a":');
  t.ok(notJson instanceof HttpError && notJson.status === 400, 'a body that is not JSON: 400');
  const schema = await send('status', path('core-m2'), '{"status":"purple"}');
  t.ok(schema instanceof HttpError && schema.status === 422 && (schema.errors?.length ?? 0) > 0, 'a status outside the schema: 422 with errors');
});

t.test('an Idempotency-Key: the same body is one report, another body is 422', async (t) => {
  const key = `core-${randomUUID()}`;
  const body = '{"status":"running","message":"once"}';
  const a = await send('status', path('core-m3'), body, { idemKey: key });
  const b = await send('status', path('core-m3'), body, { idemKey: key });
  t.equal((a as Answer).status, 200);
  t.equal((b as Answer).status, 200, 'the retry is answered as the first');
  const c = await send('status', path('core-m3'), '{"status":"running","message":"another"}', { idemKey: key });
  t.ok(c instanceof HttpError && c.status === 422, 'the key with another body: 422');
  const mine = (await queued()).filter((r) => r.machine === 'core-m3');
  t.equal(mine.length, 2, 'the first and its retry queued (a worker stores one: the id is the same)');
  t.equal(mine[0]!.id, mine[1]!.id, 'one report id, derived from customer and key');
  t.equal(mine[0]!.idempotencyKey, key);
  t.ok(mine.every((r) => JSON.parse(bodyOf(r)).message === 'once'), 'the refused body was not queued');
});

t.test('a batch through the core: one result per entry, the refused ones returned for the log', async (t) => {
  const tok = tokens.peek(s.token)!;
  const raw = Buffer.from(
    JSON.stringify({
      entries: [
        { kind: 'heartbeat', machine: 'core-b1', software: 'agent', body: {} },
        { kind: 'status', machine: 'core-b1', software: 'agent', body: { status: 'purple' } },
        { kind: 'heartbeat', machine: 'Bad Slug', software: 'agent', body: {} },
      ],
    }),
  );
  const c = call();
  const [o, refused] = await new Promise<[Outcome, { index: number; err: HttpError }[]]>((resolve) => batch.ingest(c, tok, s.customer.slug, raw, (o, r) => resolve([o, r])));
  t.notOk(o instanceof HttpError);
  const answer = JSON.parse(text(o as Answer));
  t.equal(answer.accepted, 1);
  t.same(answer.results.map((r: { status: number }) => r.status), [200, 422, 400], 'in order');
  t.same(refused.map((r) => [r.index, r.err.status]), [[1, 422], [2, 400]], 'the refused entries, for the rejection log');
  const mine = (await queued()).filter((r) => r.machine === 'core-b1');
  t.same(mine.map((r) => [r.kind, r.id]), [['heartbeat', answer.results[0].id]], 'the accepted entry queued under the id its result names; the refused one not');
});

// The batch route builds an entry's result, and the `kind machine/software` of its rejection-log
// row, only once its publish is settled (gateway/batch.ts: nothing per entry is kept for the
// answer before then). Here some entries' publish fails: a second partition whose publisher is
// not connected, so the entries of the machines hashed to it are 503 in their results, the others
// 200 and queued, each result in its entry's place.
t.test('a batch whose entries are settled apart: the refused ones 503 with their names, the others queued under their ids, in order', async (t) => {
  const tok = tokens.peek(s.token)!;
  const down = new BatchPublisher(s.nc, js, { ...lane, subject: `${subj.reports}.down`, streamName: cfg.streamName }, { published: () => {}, failed: () => {} });
  const split = new IngestPublisher([
    { reports: publisher['partitions'][0]!.reports, heartbeats: publisher['partitions'][0]!.heartbeats },
    { reports: down, heartbeats: down },
  ]);
  const machines = Array.from({ length: 24 }, (_, i) => `core-split-${i}`);
  const up = machines.map((m) => partitionOf(tok.customerId, m, 2) === 0);
  t.ok(up.includes(true) && up.includes(false), 'both partitions have machines of the batch');
  // The core reads its publisher at each use (one Ingest per process: its schemas are compiled once).
  deps.publisher = split;
  t.teardown(() => {
    deps.publisher = publisher;
  });
  const raw = Buffer.from(JSON.stringify({ entries: machines.map((machine) => ({ kind: 'heartbeat', machine, software: 'agent', body: { n: machine } })) }));
  const [o, refused] = await new Promise<[Outcome, { index: number; err: HttpError; what: string }[]]>((resolve) => batch.ingest(call(), tok, s.customer.slug, raw, (o, r) => resolve([o, r])));
  t.notOk(o instanceof HttpError);
  const answer = JSON.parse(text(o as Answer));
  t.same(answer.results.map((r: { status: number }) => r.status), up.map((u) => (u ? 200 : 503)), 'each result in its place: 200 where queued, 503 where not');
  t.equal(answer.accepted, up.filter(Boolean).length);
  t.same(
    refused.map((r) => [r.index, r.err.status, r.what]),
    machines.flatMap((m, i) => (up[i] ? [] : [[i, 503, `heartbeat ${m}/agent`]])),
    'the refused entries, in order, named for the rejection log',
  );
  const mine = new Map((await queued()).filter((r) => r.machine.startsWith('core-split-')).map((r) => [r.machine, r]));
  t.same([...mine.keys()].sort(), machines.filter((_, i) => up[i]).sort(), 'exactly the accepted entries queued');
  for (const [i, m] of machines.entries()) if (up[i]) t.equal(mine.get(m)?.id, answer.results[i].id, `${m}: queued under the id its result names`);
});
