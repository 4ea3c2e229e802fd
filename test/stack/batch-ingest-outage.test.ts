// Batch ingest while NATS goes away and comes back: no entry is answered accepted that is not
// stored. Batches keep arriving while the test's own nats-server is stopped and started again; the
// gateway publishes each batch in several JetStream messages one after another (small
// PUBLISH_MAX_REPORTS, one publish in flight), so a batch can be cut in the middle: its first entries
// acknowledged, the rest not. Every entry answered 200 must be in ClickHouse afterwards; the others
// were answered 503 (per entry, or the whole batch), with Retry-After.
import t from 'tap';
import { testStack, post, eventually, chRows } from '../helpers/stack.js';
import { OwnNats, freePort } from '../helpers/nats-server.js';

const nats = new OwnNats(await freePort());
await nats.start();
t.teardown(() => nats.destroy());
const s = await testStack(t, 'batchout', {
  natsUrl: nats.url,
  api: false,
  // The rate out of the way: every entry counts, and two lanes of 40-entry batches exceed 1000/s on a fast machine.
  env: { ACK_WAIT_S: '3', PUBLISH_MAX_REPORTS: '5', PUBLISH_MAX_INFLIGHT: '1', PUBLISH_TIMEOUT_MS: '1000', RATE_LIMIT_PER_S: '1000000', RATE_LIMIT_BURST: '1000000' },
});
await s.pool.query(`UPDATE licences SET device_limit = 100000 WHERE customer_id = $1`, [s.customer.id]);
const url = `${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`;

interface Outcome {
  status: number;
  id?: string;
  retry_after?: number;
}

t.test('NATS stopped and started while batches arrive: every entry answered accepted is stored', async (t) => {
  const accepted: string[] = [];
  const refused: Outcome[] = [];
  let wholeRefusals = 0;
  let partial = 0;
  let n = 0;
  let stop = false;
  let down = false;
  const sendLoop = async (lane: number) => {
    while (!stop) {
      const b = n++;
      const entries = Array.from({ length: 40 }, (_, i) => ({ machine: `out-${lane}-${i % 8}`, software: 'agent', kind: i % 4 === 3 ? 'status' : 'heartbeat', body: i % 4 === 3 ? { status: 'running', message: `b${b}` } : { version: `b${b}-${i}` } }));
      const r = await post(url, s.token, { entries }).catch(() => null);
      if (r === null) continue;
      if (r.status === 200) {
        const results = r.body.results as Outcome[];
        for (const x of results) (x.status === 200 ? accepted.push(x.id!) : refused.push(x));
        if (results.some((x) => x.status === 200) && results.some((x) => x.status !== 200)) {
          partial++;
          t.ok(Number(r.headers.get('retry-after')) >= 1, 'a partly refused batch carries Retry-After');
        }
      } else {
        t.equal(r.status, 503, `a batch refused whole while NATS is away: 503 (${r.body?.detail})`);
        t.ok(Number(r.headers.get('retry-after')) >= 1, 'with Retry-After');
        wholeRefusals++;
      }
      if (down) await new Promise((res) => setTimeout(res, 50));
    }
  };
  const lanes = [sendLoop(0), sendLoop(1)];
  await eventually(async () => accepted.length >= 200, 30_000, 'batches accepted before the outage');
  await nats.stop();
  down = true;
  await eventually(async () => wholeRefusals + refused.length > 0, 20_000, 'refusals while NATS is away');
  await new Promise((res) => setTimeout(res, 1500));
  await nats.start();
  down = false;
  const before = accepted.length;
  await eventually(async () => accepted.length >= before + 200, 60_000, 'accepting again once NATS is back');
  stop = true;
  await Promise.all(lanes);
  t.comment(`${accepted.length} entries accepted, ${refused.length} refused per entry, ${wholeRefusals} batches refused whole, ${partial} batches cut in the middle`);
  t.ok(refused.every((x) => x.status === 503 && (x.retry_after ?? 0) >= 1), 'every refused entry: 503 with retry_after');
  t.equal(new Set(accepted).size, accepted.length, 'each accepted entry has its own report id');

  const list = (ids: string[]) => ids.map((id) => `'${id}'`).join(',');
  const stored = async () => {
    let n = 0;
    for (let i = 0; i < accepted.length; i += 2000) {
      const part = list(accepted.slice(i, i + 2000));
      const [h, st] = await Promise.all([
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM heartbeats FINAL WHERE report_id IN (${part})`),
        chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM status_history FINAL WHERE report_id IN (${part})`),
      ]);
      n += Number(h[0]!.n) + Number(st[0]!.n);
    }
    return n;
  };
  const got = await eventually(async () => ((await stored()) === accepted.length ? accepted.length : null), 90_000, 'every accepted entry stored').catch(async () => stored());
  t.equal(got, accepted.length, `every one of the ${accepted.length} accepted entries is stored`);
});
