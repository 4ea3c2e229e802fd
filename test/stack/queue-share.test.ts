// Two customers on one partition while the workers are stopped (gateway/queue-share.ts): the one
// that floods the heartbeat stream is refused (429, Retry-After, in its rejection log) once the
// stream is half full and its reports are over half of what fills it; the other customer's
// heartbeats are taken all along. Once a worker runs, everything acknowledged is stored once and
// nothing refused is stored.
import t from 'tap';
import { testStack, chRows, eventually, post } from '../helpers/stack.js';
import { storedOnce } from '../helpers/stored-once.js';

// A small heartbeat stream (100 KB), no worker: it fills as the reports arrive.
const s = await testStack(t, 'qshare', { worker: false, api: false, env: { STREAM_HEARTBEAT_MAX_BYTES: '100000' } });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test("a customer flooding a filling stream is refused its excess; another customer's heartbeats are taken", async (t) => {
  const b = await s.newCustomer('qshare-b');
  const hb = (customer: string, token: string, machine: string, version: string) =>
    post(s.ingestUrl(machine, 'heartbeat', { customer }), token, { version });

  // Customer A floods: heartbeats of ~600 bytes in the stream until it is refused.
  const ackedA: string[] = [];
  let refusedA: Awaited<ReturnType<typeof hb>> | null = null;
  for (let i = 0; i < 1000 && !refusedA; i++) {
    const version = `qa-${i}-`.padEnd(250, 'x');
    const r = await hb(s.customer.slug, s.token, `flood-${i % 20}`, version);
    if (r.status === 200) ackedA.push(version);
    else refusedA = r;
    // The gateway reads the stream's fill once a second: let it see the stream fill.
    if (i % 20 === 19) await sleep(1100);
  }
  t.ok(refusedA, `A refused after ${ackedA.length} heartbeats`);
  t.equal(refusedA!.status, 429, '429, not the 503 of a full stream');
  t.match(refusedA!.body.detail, /queue share: .* % full; this customer's reports are \d+ % of what fills it/);
  t.ok(Number(refusedA!.headers.get('retry-after')) > 0, 'with Retry-After');
  const info = await (await s.nc.jetstreamManager()).streams.info(`${s.env.STREAM_NAME}_HB`);
  t.ok(info.state.bytes >= 45_000 && info.state.bytes < 80_000, `refused at about half the stream (${info.state.bytes} of 100,000 bytes, ${ackedA.length} heartbeats)`);

  // B, on the same stream (one partition), is taken: its share is small.
  const ackedB: string[] = [];
  const answersB: number[] = [];
  for (let i = 0; i < 40; i++) {
    const version = `qb-${i}-`.padEnd(250, 'y');
    const r = await hb(b.customer.slug, b.token, `calm-${i % 4}`, version);
    answersB.push(r.status);
    if (r.status === 200) ackedB.push(version);
  }
  t.same([...new Set(answersB)], [200], "every one of B's 40 heartbeats taken while A is refused");
  const again = await hb(s.customer.slug, s.token, 'flood-0', 'qa-again'.padEnd(250, 'x'));
  t.equal(again.status, 429, 'A is still over its share');

  // A worker drains the stream: what was taken is stored once, what was refused is not.
  await s.startWorker();
  const refusedVersions = ['qa-again'.padEnd(250, 'x')];
  await eventually(async () => (await storedOnce(s.ch, 'heartbeats', 'version', [...ackedA, ...ackedB])).missing.length === 0, 60_000, 'every acknowledged heartbeat stored');
  const stored = await storedOnce(s.ch, 'heartbeats', 'version', [...ackedA, ...ackedB, ...refusedVersions]);
  t.same(stored.missing, refusedVersions, 'the refused one, and only it, is not stored');
  t.same(stored.split, [], 'none as two reports');
  // The refusals are in A's rejection log (written by the worker), none in B's.
  const rows = await eventually(async () => {
    const r = await chRows<{ status: number; customer_id: string; detail: string }>(s.ch, `SELECT status, customer_id, detail FROM ingest_rejections FINAL WHERE status = 429 AND detail LIKE 'queue share%'`);
    return r.length >= 2 && r;
  }, 30_000, 'the refusals recorded');
  t.same([...new Set(rows.map((r) => r.customer_id))], [s.customer.id], "only A's");

  // Drained: A is taken again.
  await eventually(async () => (await hb(s.customer.slug, s.token, 'flood-0', 'qa-after')).status === 200, 30_000, 'A taken again once the stream drained');
});
