// Several workers, all listening for expiry events and all running the sweep: each change of colour
// is recorded exactly once. 5,000 instances falling silent together each get exactly one red
// event, while instances that keep heartbeating never turn red.
import t from 'tap';
import { testStack, post, eventually, chRows, drained } from '../helpers/stack.js';
import { events, publishHeartbeats } from '../helpers/lights.js';

const s = await testStack(t, 'replicas', { env: { HEARTBEAT_TIMEOUT_S: '2', LIGHT_SWEEP_INTERVAL_MS: '1000' } });
await s.startWorker(); // two workers
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const countWhere = async (where: string) => (await s.pool.query(`SELECT count(*)::int AS n FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id WHERE ${where}`)).rows[0].n as number;

t.test('two workers: one event per transition (green, red, green, red)', async (t) => {
  const machines = Array.from({ length: 50 }, (_, i) => `r-${i}`);
  const beatAll = async () => {
    const rs = await Promise.all(machines.map((m) => s.report(m, 'heartbeat')));
    t.same([...new Set(rs.map((r) => r.status))], [200]);
  };
  const all = (light: string) => eventually(async () => (await countWhere(`m.slug LIKE 'r-%' AND il.light = '${light}'`)) === 50, 15_000, `all 50 ${light}`);
  await beatAll();
  await all('green');
  await all('red');
  await beatAll();
  await all('green');
  await all('red');
  // The marker: a third round of heartbeats turns every instance green again (its fifth change).
  // Every change takes the next light_seq of its instance in the transaction that records it, so a
  // duplicate recorded before it (by either worker, on any path) would make it the sixth. And a
  // copy of a recorded change can only come from delivering its outbox row twice: once the
  // instances' outbox rows are gone, every delivery of changes 1 to 4 has been made.
  await beatAll();
  const fifth = await eventually(async () => {
    const e = (await events(s, `machine LIKE 'r-%' AND to_light = 'green' AND from_light = 'red'`)).filter((x) => x.seq >= 5);
    return e.length >= 50 ? e : null;
  }, 15_000, 'the marker: the fifth change of all 50 in ClickHouse');
  t.same([...new Set(fifth.map((e) => e.seq))], [5], 'the marker is the fifth change of every instance: no change recorded twice before it');
  await eventually(
    async () => (await s.pool.query(`SELECT count(*)::int AS n FROM light_outbox_changes WHERE machine LIKE 'r-%' AND seq <= 4`)).rows[0].n === 0,
    15_000,
    'changes 1 to 4 out of the outbox',
  );
  const ev = await events(s, `machine LIKE 'r-%' AND seq <= 4`);
  t.equal(ev.length, 200, '4 events x 50 instances');
  const byInstance = new Map<string, string[]>();
  for (const e of ev) byInstance.set(e.instance_id, [...(byInstance.get(e.instance_id) ?? []), `${e.seq}:${e.from_light}>${e.to_light}`]);
  t.equal(byInstance.size, 50);
  t.ok(
    [...byInstance.values()].every((l) => l.join(' ') === '1:grey>green 2:green>red 3:red>green 4:green>red'),
    'every instance: the same four changes, numbered 1 to 4',
  );
  const raw = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM light_events WHERE machine LIKE 'r-%' AND seq <= 4`);
  t.equal(Number(raw[0]!.n), 200, 'no copy even before ClickHouse merges');
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
  const silent = Array.from({ length: 5000 }, (_, i) => `bulk-${i}`);
  try {
    await eventually(async () => (await countWhere(`m.slug LIKE 'alive-%' AND il.light = 'green'`)) === 100, 15_000, 'the 100 live ones green');
    // 5,000 instances heartbeat once, all with the same receive time, straight onto the stream.
    const at = Date.now();
    await publishHeartbeats(s, silent, at);
    // Generous: a loaded 2-core machine may take a while; what must be exact are the counts.
    await eventually(async () => (await countWhere(`m.slug LIKE 'bulk-%' AND il.light = 'red'`)) === 5000, 60_000, 'all 5,000 red').catch(async (e: unknown) => {
      const r = await s.pool.query(`SELECT il.light, count(*)::int AS n, min(i.deadline) AS d0, max(i.deadline) AS d1, min(il.light_judged_at) AS j0, max(i.last_heartbeat_at) AS h FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id WHERE m.slug LIKE 'bulk-%' GROUP BY 1`);
      const logs = s.procs.flatMap((p) => p.lines.filter((l) => Number(l.level) >= 40).slice(-5).map((l) => JSON.stringify(l).slice(0, 600)));
      throw new Error(`${String(e)}: ${JSON.stringify(r.rows)} now ${new Date().toISOString()}; warnings: ${logs.join(' | ')}`);
    });
    allRed = Date.now();
    t.pass(`all 5,000 red ${allRed - at - 2000} ms after their timeout`);
    // The live ones go on through what the 5,000 reds set off: two more full rounds.
    const r0 = rounds;
    await eventually(async () => rounds >= r0 + 2, 30_000, 'two more rounds of the live ones');
  } finally {
    beating = false;
    await beat;
  }
  t.ok(rounds >= 3 && lastRound >= allRed, `the live ones kept heartbeating all along (${rounds} rounds)`);
  const stillGreen = await countWhere(`m.slug LIKE 'alive-%' AND il.light = 'green' OR m.slug LIKE 'alive-%' AND i.last_heartbeat_at < now() - interval '2 s'`);
  t.equal(stillGreen, 100, 'every heartbeating one green now, unless its last heartbeat is older than the timeout');

  // Markers: every change takes the next light_seq of its instance, in the transaction that records
  // it (whichever worker, whichever path), so a change recorded before a marker numbers it higher.
  // The silent ones: a second heartbeat turns each green again, its third change; a second red
  // before it would make it the fourth.
  await publishHeartbeats(s, silent, Date.now());
  const greens = await eventually(async () => {
    const r = await chRows<{ seq: string; n: string }>(s.ch, `SELECT seq, count() AS n FROM light_events FINAL WHERE machine LIKE 'bulk-%' AND from_light = 'red' AND to_light = 'green' GROUP BY seq`);
    return r.reduce((a, x) => a + Number(x.n), 0) === 5000 ? r : null;
  }, 60_000, 'the marker: all 5,000 green again').catch((e: unknown) => {
    const logs = s.procs.flatMap((p) => p.lines.filter((l) => Number(l.level) >= 40).slice(-6).map((l) => JSON.stringify(l).slice(0, 700)));
    throw new Error(`${String(e)}; warnings: ${logs.join(' | ')}`);
  });
  t.same(greens.map((x) => [Number(x.seq), Number(x.n)]), [[3, 5000]], 'the marker is the third change of every silent instance: no second red before it');
  // The live ones: red after the test stopped heartbeating is each one's last change. Once it is
  // recorded and every change up to it is in ClickHouse, any red recorded while it heartbeat is there.
  await eventually(async () => {
    const pg = await s.pool.query<{ id: string; light: string; light_seq: string }>(
      `SELECT i.id, il.light, il.light_seq FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id WHERE m.slug LIKE 'alive-%'`,
    );
    const ch = new Map(
      (await chRows<{ instance_id: string; n: string; top: string }>(s.ch, `SELECT instance_id, count() AS n, max(seq) AS top FROM light_events FINAL WHERE machine LIKE 'alive-%' GROUP BY instance_id`)).map(
        (r) => [r.instance_id, r],
      ),
    );
    return pg.rows.length === 100 && pg.rows.every((i) => i.light === 'red' && Number(ch.get(i.id)?.n) === Number(i.light_seq) && Number(ch.get(i.id)?.top) === Number(i.light_seq));
  }, 30_000, 'the marker: every live one red after the test stopped, with its whole history in ClickHouse');
  // Every heartbeat the live ones sent was answered: in ClickHouse once the stream is drained.
  await drained(s);

  const reds = await chRows<{ instances: string; events: string; most: string }>(
    s.ch,
    `SELECT count() AS instances, sum(c) AS events, max(c) AS most
       FROM (SELECT instance_id, countIf(to_light = 'red' AND seq <= 2) AS c FROM light_events FINAL WHERE machine LIKE 'bulk-%' GROUP BY instance_id)`,
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
  const causes = await chRows<{ cause: string; n: string }>(s.ch, `SELECT cause, count() AS n FROM light_events FINAL WHERE machine LIKE 'bulk-%' AND to_light = 'red' AND seq = 2 GROUP BY cause ORDER BY cause`);
  t.comment(`red recorded by: ${causes.map((c) => `${c.cause} ${c.n}`).join(', ')}`);
  // The silent ones turn red again after the marker: the outbox empties once that is delivered too.
  await eventually(async () => (await s.pool.query('SELECT count(*)::int AS n FROM light_outbox')).rows[0].n === 0, 60_000, 'outbox empty: everything delivered');
});
