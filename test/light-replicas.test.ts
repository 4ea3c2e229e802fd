// Several workers, all listening for expiry events and all running the sweep: each change of colour
// is recorded exactly once. 5,000 instances falling silent together each get exactly one red
// event, while instances that keep heartbeating never turn red.
import t from 'tap';
import { testStack, post, eventually, chRows } from './helpers/stack.js';
import { events, publishHeartbeats } from './helpers/lights.js';

const s = await testStack(t, 'replicas', { env: { HEARTBEAT_TIMEOUT_S: '2', LIGHT_SWEEP_INTERVAL_MS: '1000' } });
await s.startWorker(); // two workers
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const countWhere = async (where: string) => (await s.pool.query(`SELECT count(*)::int AS n FROM instances i JOIN machines m ON m.id = i.machine_id WHERE ${where}`)).rows[0].n as number;

t.test('two workers: one event per transition (green, red, green, red)', async (t) => {
  const machines = Array.from({ length: 50 }, (_, i) => `r-${i}`);
  const beatAll = async () => {
    const rs = await Promise.all(machines.map((m) => s.report(m, 'heartbeat')));
    t.same([...new Set(rs.map((r) => r.status))], [200]);
  };
  const all = (light: string) => eventually(async () => (await countWhere(`m.slug LIKE 'r-%' AND i.light = '${light}'`)) === 50, 15_000, `all 50 ${light}`);
  await beatAll();
  await all('green');
  await all('red');
  await beatAll();
  await all('green');
  await all('red');
  await sleep(1500); // a late duplicate would have arrived by now
  const ev = await events(s, `machine LIKE 'r-%'`);
  t.equal(ev.length, 200, '4 events x 50 instances');
  const byInstance = new Map<string, string[]>();
  for (const e of ev) byInstance.set(e.instance_id, [...(byInstance.get(e.instance_id) ?? []), `${e.seq}:${e.from_light}>${e.to_light}`]);
  t.equal(byInstance.size, 50);
  t.ok(
    [...byInstance.values()].every((l) => l.join(' ') === '1:grey>green 2:green>red 3:red>green 4:green>red'),
    'every instance: the same four changes, numbered 1 to 4',
  );
  const raw = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM light_events WHERE machine LIKE 'r-%'`);
  t.equal(Number(raw[0]!.n), 200, 'no copy even before ClickHouse merges');
  const seqs = await s.pool.query(`SELECT DISTINCT light_seq FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.slug LIKE 'r-%'`);
  t.same(seqs.rows.map((r) => Number(r.light_seq)), [4], 'Postgres counted four changes each');
});

t.test('5,000 instances falling silent together: each exactly one red event; heartbeating ones never red', async (t) => {
  // 100 instances keep heartbeating through the gateway, every 300 ms (timeout 2 s).
  const alive = Array.from({ length: 100 }, (_, i) => `alive-${i}`);
  let beating = true;
  let rounds = 0;
  let lastRound = 0;
  const beat = (async () => {
    while (beating) {
      const rs = await Promise.all(alive.map((m) => post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/${m}/agent/heartbeat`, s.token, {})));
      if (rs.every((r) => r.status === 200)) {
        rounds++;
        lastRound = Date.now();
      }
      await sleep(300);
    }
  })();
  let allRed = 0;
  try {
    await eventually(async () => (await countWhere(`m.slug LIKE 'alive-%' AND i.light = 'green'`)) === 100, 15_000, 'the 100 live ones green');
    // 5,000 instances heartbeat once, all with the same receive time, straight onto the stream.
    const silent = Array.from({ length: 5000 }, (_, i) => `bulk-${i}`);
    const at = Date.now();
    await publishHeartbeats(s, silent, at);
    // Generous: a loaded 2-core machine may take a while; what must be exact are the counts.
    await eventually(async () => (await countWhere(`m.slug LIKE 'bulk-%' AND i.light = 'red'`)) === 5000, 60_000, 'all 5,000 red');
    allRed = Date.now();
    t.pass(`all 5,000 red ${allRed - at - 2000} ms after their timeout`);
    await sleep(2000); // let anything late (a duplicate, a wrong red) arrive
  } finally {
    beating = false;
    await beat;
  }
  t.ok(rounds >= 3 && lastRound >= allRed, `the live ones kept heartbeating all along (${rounds} rounds)`);
  const reds = await chRows<{ instances: string; events: string; most: string }>(
    s.ch,
    `SELECT count() AS instances, sum(c) AS events, max(c) AS most
       FROM (SELECT instance_id, countIf(to_light = 'red') AS c FROM light_events FINAL WHERE machine LIKE 'bulk-%' GROUP BY instance_id)`,
  );
  t.equal(Number(reds[0]!.instances), 5000, 'every silent instance has events');
  t.equal(Number(reds[0]!.events), 5000, '5,000 red events');
  t.equal(Number(reds[0]!.most), 1, 'none twice');
  // A heartbeating instance turns red only where its heartbeats, as received, left a gap longer than
  // the timeout (a loaded machine may delay a round of requests that long): then exactly once per gap.
  const received = await chRows<{ machine: string; ms: string[] }>(
    s.ch,
    `SELECT machine, groupArray(received_ms) AS ms FROM (SELECT machine, received_ms FROM heartbeats FINAL WHERE machine LIKE 'alive-%' ORDER BY received_ms) GROUP BY machine`,
  );
  // Gaps longer than the timeout; those longer by a second more must have made it red (a shorter one
  // may end before the expiry is handled: judged after the next heartbeat arrived, it is not red).
  const gaps = new Map<string, { any: number; long: number }>();
  for (const r of received) {
    const ms = r.ms.map(Number);
    const d = ms.slice(1).map((x, i) => x - ms[i]!);
    gaps.set(r.machine, { any: d.filter((x) => x > 2000).length, long: d.filter((x) => x > 3000).length });
  }
  // Red events while it was heartbeating (the trailing silence after the test stopped is not one).
  const last = new Map(received.map((r) => [r.machine, Math.max(...r.ms.map(Number))]));
  const redEvents = await chRows<{ machine: string; at_ms: string }>(s.ch, `SELECT machine, at_ms FROM light_events FINAL WHERE machine LIKE 'alive-%' AND to_light = 'red'`);
  const aliveReds = new Map<string, number>();
  for (const e of redEvents) if (Number(e.at_ms) <= (last.get(e.machine) ?? 0)) aliveReds.set(e.machine, (aliveReds.get(e.machine) ?? 0) + 1);
  const wrong = alive
    .map((m) => ({ m, red: aliveReds.get(m) ?? 0, g: gaps.get(m) ?? { any: 0, long: 0 } }))
    .filter((x) => x.red > x.g.any || x.red < x.g.long)
    .map((x) => `${x.m}: ${x.red} red, ${x.g.any} gaps (${x.g.long} long)`);
  t.same(wrong, [], 'a heartbeating instance turned red only after a gap longer than the timeout, at most once per gap');
  const total = [...gaps.values()].reduce((a, b) => a + b.any, 0);
  t.comment(`gaps longer than the timeout (a slow round): ${total}`);
  const stillGreen = await countWhere(`m.slug LIKE 'alive-%' AND i.light = 'green' OR m.slug LIKE 'alive-%' AND i.last_heartbeat_at < now() - interval '2 s'`);
  t.equal(stillGreen, 100, 'every heartbeating one green now, unless its last heartbeat is older than the timeout');
  const causes = await chRows<{ cause: string; n: string }>(s.ch, `SELECT cause, count() AS n FROM light_events FINAL WHERE machine LIKE 'bulk-%' AND to_light = 'red' GROUP BY cause ORDER BY cause`);
  t.comment(`red recorded by: ${causes.map((c) => `${c.cause} ${c.n}`).join(', ')}`);
  t.equal((await s.pool.query('SELECT count(*)::int AS n FROM light_outbox')).rows[0].n, 0, 'outbox empty: everything delivered');
});
