// The operator's dead-letter tools against the real servers and processes: reports the database
// refuses are dead-lettered by the worker (a customer Postgres does not know yet), listed and
// filtered, shown (an undecodable one, and one nested thousands deep, without harm), counted per
// customer by the worker's gauge; after the cause is fixed (the customer created), replayed through
// the api (twice at once) and the CLI, stored once (raw ClickHouse rows, merges stopped); replayed
// again, nothing doubles. The api's routes are for system administrators only.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { headers } from 'nats';
import { testStack, get, post, eventually, chRows } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { ROOT } from '../../deploy/service-process.js';
import { subjects, deadLetterStream, encodeBatch, encodeReport, type Report } from '../../lib/contract/messages.js';
import { deadLetterOf, HEADERS, NO_CUSTOMER } from '../../lib/store/dead-letters.js';

const s = await testStack(t, 'dltools', { worker: false });
const workerPort = await freePort();
await s.startWorker({ WORKER_HTTP_PORT: String(workerPort) });
const admin = await s.newUser(null, { systemAdmin: true });
const owner = await s.newUser('owner');
const subj = subjects(s.env.SUBJECT_PREFIX!);
const js = s.nc.jetstream();
const jsm = await s.nc.jetstreamManager();
const DLQ = deadLetterStream(s.env.STREAM_NAME!);
const API = `${s.apiUrl}/api/admin/dead-letters`;
const REPLAY = `${s.apiUrl}/api/admin/dead-letter-replays`;

function fleet(...args: string[]) {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), 'dead-letters', ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** The worker's gauge, by customer. */
async function gauge(): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${workerPort}/metrics`)).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^fleet_worker_dead_letter_messages\{[^}]*customer="([^"]*)"[^}]*\} (\d+)$/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

// A customer Postgres does not know yet: the worker's instance upsert fails on the foreign key, so
// its reports are dead-lettered the way a real refusal is; creating the customer fixes the cause.
const late = { id: randomUUID(), slug: `late-${s.id}` };
const reportOf = (machine: string, id = randomUUID()): Report => ({ id, kind: 'heartbeat', customerId: late.id, customer: late.slug, machine, software: 'agent', tokenId: randomUUID(), receivedAt: Date.now(), body: null });
const body = Buffer.from('{"version":"5.1.0","uptime_seconds":60}');
const refused = [0, 1, 2].map((i) => reportOf(`m-${i}`));
await js.publish(subj.reports, encodeBatch(refused.map((r) => encodeReport(r, body))));
// Not a batch at all: dead-lettered with no customer.
await js.publish(subj.reports, Buffer.from([0xff, 0xfe, 0x00, 0x7b]));
// A dead letter from before customers were in the subject: on the bare subject, the reason only.
const older = reportOf('m-old');
const oldHeaders = headers();
oldHeaders.set('Fleet-Error', 'Postgres refused a value (23503 foreign_key_violation)');
oldHeaders.set('Fleet-Error-Kind', 'data');
await js.publish(subj.deadLetter, encodeBatch([encodeReport(older, body)]), { headers: oldHeaders });
// A body nested 5,000 deep, dead-lettered through the same function the worker uses.
const deep: Report = { id: randomUUID(), kind: 'status', customerId: randomUUID(), customer: `deep-${s.id}`, machine: 'deep', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now(), body: null };
const deepDl = deadLetterOf({
  base: subj.deadLetter,
  failure: { kind: 'data', reason: 'not storable: schema violation: /snapshot nested too deep' },
  failureClass: 'data',
  source: { stream: s.env.STREAM_NAME!, seq: 999_999, subject: subj.reports, deliveries: 1 },
  report: deep,
});
await js.publish(deepDl.subject, encodeBatch([encodeReport(deep, Buffer.from(`{"snapshot":${'['.repeat(5000)}${']'.repeat(5000)}}`))]), { headers: deepDl.headers, msgID: deepDl.msgID });

await eventually(async () => (await jsm.streams.info(DLQ)).state.messages === 6, 30_000, 'six dead letters (three refused, one undecodable, one old, one deep)');
const list = async (q = '', token = admin.jwt) => get(`${API}${q}`, token);

t.test("the worker's dead letters: a customer's subject, the headers filtering needs; the gauge per customer", async (t) => {
  const mine = (await list(`?customer=${late.slug}`)).body.items as { seq: number; subject: string }[];
  const fromWorker = [];
  for (const d of mine) {
    const m = await jsm.streams.getMessage(DLQ, { seq: d.seq });
    if (m.subject === `${subj.deadLetter}.${late.slug}`) fromWorker.push(m);
  }
  t.equal(fromWorker.length, 3, 'three on the customer subject');
  const h = fromWorker[0]!.header;
  t.equal(h.get(HEADERS.customer), late.slug);
  t.equal(h.get(HEADERS.customerId), late.id);
  t.equal(h.get(HEADERS.kind), 'heartbeat');
  t.equal(h.get(HEADERS.software), 'agent');
  t.match(h.get(HEADERS.machine), /^m-[012]$/);
  t.equal(h.get(HEADERS.failure), 'data');
  t.equal(h.get(HEADERS.error), 'Postgres refused a value (23503 foreign_key_violation)');
  t.ok(Math.abs(Date.parse(h.get(HEADERS.at)) - Date.now()) < 3_600_000, 'the time it was dead-lettered');
  t.ok(refused.some((r) => r.id === h.get(HEADERS.reportId)));
  const counts = await eventually(async () => {
    const g = await gauge();
    return g.get(late.slug) === 3 ? g : null;
  }, 20_000, 'the gauge counts them');
  t.equal(counts.get(`deep-${s.id}`), 1);
  t.equal(counts.get(NO_CUSTOMER), 2, 'the undecodable and the old one (bare subject)');
});

t.test('list: everything, by customer (old ones too), by reason, since, in pages', async (t) => {
  const all = await list();
  t.equal(all.status, 200);
  t.equal(all.body.items.length, 6);
  t.equal(all.body.next_seq, null, 'the end of the stream');
  const seqs = all.body.items.map((d: { seq: number }) => d.seq);
  t.same(seqs, [...seqs].sort((a: number, b: number) => a - b), 'oldest first');

  const late3 = (await list(`?customer=${late.slug}`)).body.items;
  t.equal(late3.length, 4, 'the three new ones and the old one on the bare subject');
  t.same(late3.map((d: { machine: string }) => d.machine).sort(), ['m-0', 'm-1', 'm-2', 'm-old']);
  t.ok(late3.every((d: { customer: string; kind: string; content: string }) => d.customer === late.slug && d.kind === 'heartbeat' && d.content === 'reports'));
  const none = (await list(`?customer=${NO_CUSTOMER}`)).body.items;
  t.equal(none.length, 1, 'no customer: the undecodable one only (the old one is late’s)');
  t.match(none[0], { customer: null, content: 'undecodable', failure: 'decode', error: 'queue message cannot be decoded', size: 4 });

  t.equal((await list('?reason=FOREIGN_key')).body.items.length, 4, 'reason text, any case');
  t.equal((await list('?reason=nested%20too%20deep')).body.items.length, 1);
  t.equal((await list('?reason=decode')).body.items.length, 1, 'the class counts as reason text');
  t.equal((await list('?since=1h')).body.items.length, 6);
  t.equal((await list(`?since=${encodeURIComponent(new Date(Date.now() + 3_600_000).toISOString())}`)).body.items.length, 0, 'nothing since a time to come');

  const page1 = (await list('?limit=4')).body;
  t.equal(page1.items.length, 4);
  t.equal(page1.next_seq, page1.items[3].seq);
  const page2 = (await list(`?limit=4&after_seq=${page1.next_seq}`)).body;
  t.same([...page1.items, ...page2.items].map((d: { seq: number }) => d.seq), seqs, 'two pages: every one once');

  const bad = await list('?since=yesterday');
  t.equal(bad.status, 400);
  t.match(bad.body.detail, /since: "yesterday" is neither an ISO 8601 time/);
  t.equal((await list('?customer=Not%20a%20slug')).status, 400);
  t.equal((await list('?limit=0')).status, 400);

  const cli = fleet('list', '--customer', late.slug, '--json');
  t.equal(cli.code, 0, cli.err);
  t.same(JSON.parse(cli.out).items, late3, 'the CLI lists what the api lists');
  const text = fleet('list', '--reason', 'foreign');
  t.equal(text.code, 0, text.err);
  t.equal(text.out.trim().split('\n').length, 4, 'one line each');
  t.match(text.out, new RegExp(`\\t${late.slug}\\theartbeat\\tm-0/agent\\tdata\\t`));
  t.match(text.err, /^4 dead letters \(\d+ examined\)$/m);
  const badCli = fleet('list', '--since', 'soon');
  t.equal(badCli.code, 1);
  t.match(badCli.err, /--since: "soon" is neither/);
});

t.test('show: the headers and the report, pretty-printed; undecodable bytes and deep nesting without harm', async (t) => {
  // One the worker wrote (the old one on the bare subject has the reason only).
  const first = (await list(`?customer=${late.slug}&reason=23503`)).body.items.find((d: { failure: string | null }) => d.failure === 'data');
  const one = await get(`${API}/${first.seq}`, admin.jwt);
  t.equal(one.status, 200);
  t.equal(one.body.dead_letter.seq, first.seq);
  t.equal(one.body.headers['Fleet-Error-Kind'], 'data');
  t.equal(one.body.reports.length, 1);
  const r = one.body.reports[0];
  t.match(r, { kind: 'heartbeat', customer: late.slug, customer_id: late.id, software: 'agent' });
  t.same(r.body, { format: 'json', bytes: body.length, text: '{\n  "version": "5.1.0",\n  "uptime_seconds": 60\n}', truncated: false });
  t.equal(one.body.raw, null);

  const undecodable = (await list(`?customer=${NO_CUSTOMER}`)).body.items[0];
  const u = await get(`${API}/${undecodable.seq}`, admin.jwt);
  t.equal(u.status, 200);
  t.same(u.body.reports, []);
  t.equal(u.body.raw.format, 'hex');
  t.match(u.body.raw.text, /^00000000  ff fe 00 7b/);

  const deepOne = (await list(`?customer=deep-${s.id}`)).body.items[0];
  const d = await get(`${API}/${deepOne.seq}`, admin.jwt);
  t.equal(d.status, 200, 'a body nested 5,000 deep is shown');
  t.equal(d.body.reports[0].body.truncated, true);
  t.match(d.body.reports[0].body.text, /\[… 1 items\]/);
  t.ok(JSON.stringify(d.body).length < 100_000, 'and bounded');

  t.equal((await get(`${API}/999999999`, admin.jwt)).status, 404);
  t.equal((await get(`${API}/0`, admin.jwt)).status, 400);

  const cli = fleet('show', String(first.seq));
  t.equal(cli.code, 0, cli.err);
  t.match(cli.out, new RegExp(`^dead letter ${first.seq}, `));
  t.match(cli.out, /Fleet-Customer: late-/);
  t.match(cli.out, /"version": "5\.1\.0"/);
  const cliDeep = fleet('show', String(deepOne.seq), '--json');
  t.equal(cliDeep.code, 0, cliDeep.err);
  t.equal(JSON.parse(cliDeep.out).reports[0].body.truncated, true);
  const cliU = fleet('show', String(undecodable.seq));
  t.match(cliU.out, /content \(hex, 4 bytes\)/);
  t.equal(fleet('show', '999999999').code, 1);
});

t.test('only system administrators: an owner and an API token get 403, nobody 401', async (t) => {
  const first = (await list()).body.items[0];
  for (const [who, token] of [['owner', owner.jwt], ['read token', s.token]] as const) {
    t.equal((await list('', token)).status, 403, `${who}: list`);
    t.equal((await get(`${API}/${first.seq}`, token)).status, 403, `${who}: show`);
    const r = await post(REPLAY, token, { seqs: [first.seq] });
    t.equal(r.status, 403, `${who}: replay`);
    t.match(r.body.detail, /system administrators only|dashboard users/);
  }
  t.equal((await list('', null as unknown as string)).status, 401);
  t.equal((await jsm.streams.info(DLQ)).state.messages, 6, 'nothing replayed by them');
});

t.test('replay: a dry run changes nothing; after the fix each report is stored once, however often replayed', async (t) => {
  await s.ch.command({ query: `SYSTEM STOP MERGES ${s.env.CLICKHOUSE_DB}.heartbeats` });
  t.teardown(() => s.ch.command({ query: `SYSTEM START MERGES ${s.env.CLICKHOUSE_DB}.heartbeats` }).catch(() => {}));
  const raw = async (where: string) =>
    (await chRows<{ n: string; u: string }>(s.ch, `SELECT count() AS n, uniqExact(report_id) AS u FROM heartbeats WHERE customer_id = '${late.id}' AND ${where}`)).map((x) => ({ rows: Number(x.n), reports: Number(x.u) }))[0]!;

  const none = await post(REPLAY, admin.jwt, {});
  t.equal(none.status, 400, 'no selection: refused');
  t.match(none.body.detail, /say which dead letters/);
  const dry = await post(REPLAY, admin.jwt, { customer: late.slug, dry_run: true });
  t.equal(dry.status, 200);
  t.match(dry.body.summary, { selected: 4, would_replay: 4, replayed: 0 });
  t.ok(dry.body.items.every((i: { result: string }) => i.result === 'would-replay'));
  t.equal((await jsm.streams.info(DLQ)).state.messages, 6, 'the dry run changed nothing');

  // The cause: the customer did not exist. Now it does.
  await s.pool.query('INSERT INTO customers (id, slug, name) VALUES ($1, $2, $2)', [late.id, late.slug]);

  // The measure sees a doubled row: one report applied twice, merges stopped.
  const control = reportOf('control');
  await js.publish(subj.reports, encodeBatch([encodeReport(control, body)]));
  await js.publish(subj.reports, encodeBatch([encodeReport(control, body)]));
  const doubled = await eventually(async () => {
    const c = await raw("machine = 'control'");
    return c.rows === 2 ? c : null;
  }, 20_000, 'the control report applied twice');
  t.same(doubled, { rows: 2, reports: 1 }, 'count() sees the copy that uniqExact() and FINAL hide');

  // One dead letter replayed by two admins at once, through the api.
  const [m0] = (await list(`?customer=${late.slug}&limit=1`)).body.items;
  const both = await Promise.all([post(REPLAY, admin.jwt, { seqs: [m0.seq] }), post(REPLAY, admin.jwt, { seqs: [m0.seq] })]);
  t.same(both.map((b) => b.status), [200, 200]);
  const results = both.map((b) => b.body.items[0].result).sort();
  t.ok(results.includes('replayed'), `at least one replayed it (${results.join(', ')})`);
  t.ok(results.every((x) => x === 'replayed' || x === 'gone'), 'the other replayed the same message (deduplicated) or found it gone');
  // Whichever request replayed it names the report it republished (the other, when it found the
  // message gone, names none: the order of the two answers is not the order they ran in).
  const replayer = both.find((b) => b.body.items[0].result === 'replayed')!;
  t.same(replayer.body.items[0].report_ids, [m0.report_ids[0]], 'the replay names the report it republished');

  // The rest through the CLI, by customer.
  const cli = fleet('replay', '--customer', late.slug);
  t.equal(cli.code, 0, cli.err);
  const lines = cli.out.trim().split('\n');
  t.equal(lines.length, 3, 'three left for the customer (the old one too)');
  t.ok(lines.every((l) => /^\d+\treplayed\tlate-[a-z0-9]+\theartbeat\t[0-9a-f-]{36}\t/.test(l)), cli.out);
  t.match(cli.err, /^3 selected: 3 replayed, 0 skipped \(undecodable\), 0 failed, 0 gone$/m);

  const all = [...refused, older];
  const stored = await eventually(async () => {
    const c = await raw(`report_id IN (${all.map((r) => `'${r.id}'`).join(',')})`);
    return c.reports === 4 ? c : null;
  }, 30_000, 'the four replayed reports stored');
  t.same(stored, { rows: 4, reports: 4 }, 'each stored once: no raw row twice');
  t.same((await list(`?customer=${late.slug}`)).body.items, [], 'gone from the dead-letter stream');
  t.equal((await chRows(s.ch, `SELECT 1 FROM ingest_rejections FINAL WHERE customer_id = '${late.id}'`)).length, 3, "the refusals stay in the customer's rejection log");

  // Again: nothing is selected, nothing published. A report sent after it, once applied, proves the
  // workers have seen everything before it.
  const again = fleet('replay', '--customer', late.slug);
  t.equal(again.code, 0, again.err);
  t.equal(again.out, '');
  t.match(again.err, /^0 selected: 0 replayed/m);
  const gone = await post(REPLAY, admin.jwt, { seqs: [m0.seq] });
  t.match(gone.body.items[0], { seq: m0.seq, result: 'gone' });
  const marker = reportOf('marker');
  await js.publish(subj.reports, encodeBatch([encodeReport(marker, body)]));
  await eventually(async () => (await raw("machine = 'marker'")).rows === 1, 20_000, 'the marker applied');
  t.same(await raw(`report_id IN (${all.map((r) => `'${r.id}'`).join(',')})`), { rows: 4, reports: 4 }, 'still once each');

  // The undecodable one is skipped and kept; the deep one stays for its customer.
  const skipped = fleet('replay', '--customer', NO_CUSTOMER, '--json');
  t.equal(skipped.code, 0, skipped.err);
  const sk = JSON.parse(skipped.out);
  t.match(sk.summary, { selected: 1, skipped: 1, replayed: 0 });
  t.match(sk.items[0], { result: 'skipped', detail: /undecodable/ });
  t.equal((await list(`?customer=${NO_CUSTOMER}`)).body.items.length, 1, 'kept');
  t.equal(fleet('replay').code, 1, 'the CLI too wants a selection');

  const counts = await eventually(async () => {
    const g = await gauge();
    return g.has(late.slug) ? null : g;
  }, 20_000, "the customer's series leaves the gauge");
  t.equal(counts.get(`deep-${s.id}`), 1);
  t.equal(counts.get(NO_CUSTOMER), 1, 'the undecodable one');
});
