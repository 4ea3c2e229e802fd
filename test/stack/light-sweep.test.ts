// The sweep alone: with every expiry listener stopped (LIGHT_EXPIRY_LISTENER=0), silent instances
// still turn red, each once, in rounds of 7 (LIGHT_SWEEP_BATCH) whose deliveries overlap the next
// round's judgement, each change delivered once; a warning that ran out turns yellow back into
// green; changes a worker committed but did not deliver (it died) are delivered from the outbox;
// the colour table missing mid-way stops the sweep without losing or doubling a change.
import t from 'tap';
import { testStack, post, eventually, chRows } from '../helpers/stack.js';
import { events, stored } from '../helpers/lights.js';
import { stopMerges } from '../helpers/stored-once.js';
import { deadLetterCount } from '../helpers/outage.js';
import { Horizon, recordTransitions } from '../../workers/traffic-light.js';
import { createLogger } from '../../lib/infra/log.js';
import { ingestStreams, subjects } from '../../lib/contract/messages.js';
import type { LightMessage } from '../../lib/domain/traffic-light.js';

const s = await testStack(t, 'sweep', {
  env: { HEARTBEAT_TIMEOUT_S: '2', WARNING_WINDOW_S: '2', LIGHT_EXPIRY_LISTENER: '0', LIGHT_SWEEP_INTERVAL_MS: '500', LIGHT_SWEEP_BATCH: '7', WORKER_RETRY_MAX_MS: '2000' },
});
const ingest = (m: string, kind: string) => s.ingestUrl(m, kind);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// Raw rows count copies: a change delivered twice is two rows until a merge, and merges stay off.
await stopMerges(s.ch, s.env.CLICKHOUSE_DB!, ['light_events']);
// Every change the workers publish for the live stream, by instance and seq.
const published = new Map<string, number>();
const live = s.nc.subscribe(subjects(s.env.SUBJECT_PREFIX!).control(`light.${s.customer.id}`));
void (async () => {
  for await (const m of live) {
    for (const e of (m.json() as LightMessage).events) published.set(`${e.instance_id}/${e.seq}`, (published.get(`${e.instance_id}/${e.seq}`) ?? 0) + 1);
  }
})();
t.teardown(() => live.unsubscribe());

/** Changes of `where` stored in more than one raw row of light_events (a delivery copied). */
async function copiedRows(where: string): Promise<string[]> {
  const rows = await chRows<{ k: string }>(
    s.ch,
    `SELECT concat(toString(instance_id), '/', toString(seq)) AS k FROM light_events WHERE ${where} GROUP BY instance_id, seq HAVING count() > 1`,
  );
  return rows.map((r) => r.k);
}

t.test('no expiry listener: the sweep turns every silent instance red, once', async (t) => {
  t.ok(s.procs.find((p) => p.name === 'worker')!.lines.some((l) => /expiry listener off/.test(l.msg ?? '')), 'the worker does not listen');
  const machines = Array.from({ length: 20 }, (_, i) => `s-${i}`);
  const rs = await Promise.all(machines.map((m) => post(ingest(m, 'heartbeat'), s.token, {})));
  t.same([...new Set(rs.map((r) => r.status))], [200]);
  await eventually(async () => {
    const r = await s.pool.query(`SELECT count(*)::int AS n FROM instances JOIN instance_lights ON instance_id = id WHERE light = 'red'`);
    return r.rows[0].n === 20;
  }, 15_000, 'all 20 red');
  const ev = await eventually(async () => {
    const e = await events(s, `machine LIKE 's-%'`);
    return e.length === 40 ? e : null;
  }, 5000, '40 events');
  const reds = ev.filter((e) => e.to_light === 'red');
  t.equal(reds.length, 20, 'one red event per instance');
  t.equal(new Set(reds.map((e) => e.instance_id)).size, 20);
  t.ok(reds.every((e) => e.cause === 'sweep' && e.from_light === 'green' && e.seq === 2), 'all recorded by the sweep');
  for (const m of machines.slice(0, 3)) {
    const st = (await stored(s, m))!;
    const e = reds.find((x) => x.machine === m)!;
    t.equal(e.at_ms, st.last_heartbeat_ms! + 2000, `${m}: red since last heartbeat + timeout`);
  }
  const late = Math.max(...reds.map((e) => e.recorded_ms - e.at_ms));
  t.ok(late < 5000, `the last one recorded ${late} ms after its timeout (sweep every 500 ms)`);
  // 20 in rounds of 7: each round's delivery ran beside the next round's judgement. Each change
  // reached ClickHouse and the live stream once.
  t.same(await copiedRows(`machine LIKE 's-%'`), [], 'no change stored twice (raw rows, merges stopped)');
  await eventually(async () => ev.every((e) => published.has(`${e.instance_id}/${e.seq}`)), 5000, 'every change published');
  t.same(ev.filter((e) => published.get(`${e.instance_id}/${e.seq}`) !== 1).map((e) => `${e.machine}/${e.seq}`), [], 'each change published once');
  // A heartbeat turns them green again (reports need no listener).
  await post(ingest('s-0', 'heartbeat'), s.token, {});
  await eventually(async () => (await stored(s, 's-0'))?.light === 'green', 5000, 's-0 green again');
});

t.test('a warning that ran out turns yellow into green, since the end of the window', async (t) => {
  let beating = true;
  const beat = (async () => {
    while (beating) {
      await post(ingest('w1', 'heartbeat'), s.token, {});
      await sleep(300);
    }
  })();
  try {
    await eventually(async () => (await stored(s, 'w1'))?.light === 'green', 5000, 'w1 green');
    t.ok([200, 202].includes((await post(ingest('w1', 'diagnostics'), s.token, { items: [{ code: 1, severity: 2, message: 'bad' }] })).status), 'accepted (202: help texts missing)');
    await eventually(async () => (await stored(s, 'w1'))?.light === 'yellow', 5000, 'w1 yellow');
    await eventually(async () => (await stored(s, 'w1'))?.light === 'green', 8000, 'w1 green after the window');
  } finally {
    beating = false;
    await beat;
  }
  const ev = await eventually(async () => {
    const e = await events(s, `machine = 'w1'`);
    return e.length === 3 ? e : null;
  }, 5000, 'three events');
  t.same(ev.map((e) => [e.from_light, e.to_light]), [
    ['grey', 'green'],
    ['green', 'yellow'],
    ['yellow', 'green'],
  ]);
  // Whoever noticed first, the sweep or the next heartbeat: the same change, recorded once.
  t.ok(['sweep', 'report'].includes(ev[2]!.cause), `recorded by ${ev[2]!.cause}`);
  const warned = await s.pool.query(`SELECT (extract(epoch FROM last_warning_at) * 1000)::float8 AS w FROM instances WHERE id = $1`, [ev[0]!.instance_id]);
  t.equal(ev[2]!.at_ms, Math.round(warned.rows[0].w) + 2000, 'green since the warning + window');
});

t.test('a change committed but never delivered (worker died) is delivered from the outbox', async (t) => {
  const st = (await stored(s, 's-1'))!;
  await s.pool.query(
    `INSERT INTO light_outbox (recording, customer_id, customer, cause, recorded_at, instance_ids, seqs, machine_ids, machines, softwares, from_lights, to_lights, reasons, ats)
     SELECT gen_random_uuid(), i.customer_id, $2, 'report', now() - interval '10 s', ARRAY[i.id], ARRAY[99::bigint], ARRAY[i.machine_id], ARRAY['s-1'],
            ARRAY[i.software], ARRAY['red'], ARRAY['green'], ARRAY['ok'], ARRAY[now() - interval '10 s']
       FROM instances i WHERE i.id = $1`,
    [st.id, s.customer.slug],
  );
  await eventually(async () => (await events(s, `instance_id = '${st.id}' AND seq = 99`)).length === 1, 10_000, 'the event in ClickHouse');
  await eventually(async () => (await s.pool.query('SELECT count(*)::int AS n FROM light_outbox')).rows[0].n === 0, 5000, 'outbox empty');
  t.pass('delivered and removed from the outbox');
});

// The sweep skips rows another transaction holds (workers/light-sweep.ts: the expiry listener
// judging the same silence, a report) instead of waiting behind them. Before, one held row stopped
// the whole batch: none of these ten turned red while the test held the first.
t.test('a row another transaction holds does not stop the sweep; it is judged once released', async (t) => {
  const machines = Array.from({ length: 10 }, (_, i) => `held-${i}`);
  const rs = await Promise.all(machines.map((m) => post(ingest(m, 'heartbeat'), s.token, {})));
  t.same([...new Set(rs.map((r) => r.status))], [200]);
  await eventually(async () => {
    const r = await s.pool.query(`SELECT count(*)::int AS n FROM instances JOIN instance_lights ON instance_id = id WHERE machine LIKE 'held-%' AND light = 'green'`);
    return r.rows[0].n === 10;
  }, 5000, 'all ten green');
  const held = (await stored(s, 'held-0'))!;
  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('SELECT 1 FROM instances WHERE id = $1 FOR UPDATE', [held.id]);
    await eventually(async () => {
      const r = await s.pool.query(`SELECT count(*)::int AS n FROM instances JOIN instance_lights ON instance_id = id WHERE machine LIKE 'held-%' AND light = 'red'`);
      return r.rows[0].n === 9;
    }, 10_000, 'the other nine red while one row is held');
    await sleep(1000);
    t.equal((await stored(s, 'held-0'))!.light, 'green', 'the held one is not judged while held (two sweeps later)');
  } finally {
    await c.query('COMMIT');
    c.release();
  }
  await eventually(async () => (await stored(s, 'held-0'))?.light === 'red', 5000, 'held-0 red once released');
  const ev = await eventually(async () => {
    const e = (await events(s, `machine LIKE 'held-%'`)).filter((x) => x.to_light === 'red');
    return e.length >= 10 ? e : null;
  }, 5000, 'ten red events');
  t.equal(ev.length, 10, 'one red event per instance');
  t.equal(new Set(ev.map((e) => e.instance_id)).size, 10);
  const first = ev.find((e) => e.instance_id === held.id)!;
  t.equal(first.at_ms, held.last_heartbeat_ms! + 2000, 'the held one red since its own deadline, not since it was released');
});

// A schema the code does not expect (42P01, the colour table renamed away) is an outage, not a
// fault of the data: the sweep records nothing while it lasts and the worker keeps running; the
// report that arrives meanwhile waits (no dead letter); once the table is back, every silent
// instance turns red once, since its own deadline.
t.test('the colour table missing mid-way: nothing recorded, nothing lost, each change once afterwards', async (t) => {
  const machines = Array.from({ length: 6 }, (_, i) => `gone-${i}`);
  t.same([...new Set((await Promise.all(machines.map((m) => post(ingest(m, 'heartbeat'), s.token, {})))).map((r) => r.status))], [200]);
  await eventually(async () => {
    const r = await s.pool.query(`SELECT count(*)::int AS n FROM instances JOIN instance_lights ON instance_id = id JOIN machines m ON m.id = machine_id WHERE m.slug LIKE 'gone-%' AND light = 'green'`);
    return r.rows[0].n === 6;
  }, 5000, 'all six green');
  const before = new Map<string, number>();
  for (const m of machines) before.set(m, (await stored(s, m))!.last_heartbeat_ms!);
  const worker = s.procs.find((p) => p.name === 'worker' && p.running)!;
  const sweepFailures = () => worker.lines.filter((l) => l.job === 'light-sweep' && /scheduled job failed/.test(l.msg ?? '')).length;
  const failedBefore = sweepFailures();
  await s.pool.query('ALTER TABLE instance_lights RENAME TO instance_lights_away');
  let back = false;
  try {
    // A new instance reports while the table is missing: acknowledged, then it waits.
    t.equal((await post(ingest('gone-new', 'heartbeat'), s.token, {})).status, 200, 'acknowledged during the outage');
    // Past every deadline (2 s), several sweeps (every 500 ms) fail.
    await sleep(Math.max(...before.values()) + 2000 + 2000 - Date.now());
    await eventually(async () => sweepFailures() > failedBefore, 5000, 'a sweep failed');
    t.ok(worker.running, 'the worker keeps running');
    t.same((await events(s, `machine LIKE 'gone-%' AND to_light = 'red'`)).length, 0, 'no red recorded while the table is away');
    await s.pool.query('ALTER TABLE instance_lights_away RENAME TO instance_lights');
    back = true;
  } finally {
    if (!back) await s.pool.query('ALTER TABLE instance_lights_away RENAME TO instance_lights');
  }
  const reds = await eventually(async () => {
    const e = (await events(s, `machine LIKE 'gone-%'`)).filter((x) => x.to_light === 'red' && x.machine !== 'gone-new');
    return e.length >= 6 ? e : null;
  }, 15_000, 'six red events');
  t.equal(reds.length, 6, 'one red event per instance');
  for (const e of reds) t.equal(e.at_ms, before.get(e.machine)! + 2000, `${e.machine}: red since its own deadline`);
  // The report that waited is stored, then its instance turns green and, silent since, red.
  await eventually(async () => (await stored(s, 'gone-new'))?.light === 'red', 15_000, 'gone-new stored, then red');
  t.same((await events(s, `machine = 'gone-new'`)).map((e) => [e.from_light, e.to_light]), [['grey', 'green'], ['green', 'red']]);
  t.same(await copiedRows(`machine LIKE 'gone-%'`), [], 'no change stored twice');
  t.equal(await deadLetterCount(s), 0, 'no dead letter');
});

t.test('a heartbeat received in time but applied late (workers down) never turns its instance red', async (t) => {
  t.equal((await post(ingest('late', 'heartbeat'), s.token, {})).status, 200);
  const first = await eventually(async () => {
    const st = await stored(s, 'late');
    return st?.light === 'green' ? st : null;
  }, 5000, 'late green');
  // Every worker stops; the next heartbeat waits in the stream past the first one's timeout.
  await Promise.all(s.procs.filter((p) => p.name === 'worker').map((p) => p.stop()));
  t.equal((await post(ingest('late', 'heartbeat'), s.token, {})).status, 200);
  await sleep(Math.max(0, first.last_heartbeat_ms! + 2000 + 500 - Date.now()));

  // By the wall clock it is silent; by the horizon (the oldest report still queued) it is not.
  // The heartbeat waits in the heartbeat lane's stream: the horizon reads both.
  const horizon = new Horizon(await s.nc.jetstreamManager(), ingestStreams(s.env.STREAM_NAME!), createLogger('test', 'silent'));
  const h = await horizon.get();
  t.ok(h < first.last_heartbeat_ms! + 2000, 'the horizon stays before the deadline while the heartbeat is queued');
  const params = { heartbeatTimeoutS: 2, warningWindowS: 2 };
  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    t.same((await recordTransitions(c, [first.id], 'sweep', params, h, true)).events, [], 'no change at the horizon');
    const wall = (await recordTransitions(c, [first.id], 'sweep', params, Date.now(), true)).events;
    t.equal(wall[0]?.to, 'red', 'the wall clock alone would have said red');
  } finally {
    await c.query('ROLLBACK');
    c.release();
  }

  // A worker comes back: its sweep runs and the queued heartbeat is applied. The instance turns red
  // only for the silence after the second heartbeat, never for the one after the first.
  await s.startWorker();
  await eventually(async () => (await stored(s, 'late'))?.light === 'red', 10_000, 'red after the real silence');
  const second = (await stored(s, 'late'))!;
  t.ok(second.last_heartbeat_ms! > first.last_heartbeat_ms!, 'the queued heartbeat was applied');
  const ev = await eventually(async () => {
    const e = await events(s, `machine = 'late'`);
    return e.length === 2 ? e : null;
  }, 5000, 'two events');
  t.same(ev.map((e) => [e.from_light, e.to_light]), [['grey', 'green'], ['green', 'red']]);
  t.equal(ev[1]!.at_ms, second.last_heartbeat_ms! + 2000, 'red since the second heartbeat + timeout');
});
