// Silence judged from Redis: with PG_HEARTBEAT_INTERVAL_S far longer than the timeout (the default,
// 7,200 s, against 3 s here), Postgres's last heartbeat of a live instance lags the newest one by
// more than its timeout, and still nothing turns it red: the api shows the stored colour and the
// exact heartbeat time, the sweep takes its silence candidates from Redis (`hbdl`) and a live
// instance's stored recheck time comes only after Postgres's possible lag. With the expiry
// listener off, the sweep alone turns a silent instance red at its own deadline, within a sweep
// interval or two; Redis's silence time of a heartbeat applied after its own deadline (the workers
// were behind) is due at once. A status report, which carries no heartbeat, is judged from the
// newest heartbeat too (its transaction first writes the one Redis holds).
import t from 'tap';
import { testStack, post, eventually } from '../helpers/stack.js';
import { events, stored } from '../helpers/lights.js';
import { redisKeys } from '../../lib/infra/redis.js';

/** Short, so four timeouts pass in the test; long enough that a heartbeat every 300 ms is never late under load. */
const TIMEOUT_S = 3;
const s = await testStack(t, 'redissilence', {
  env: { HEARTBEAT_TIMEOUT_S: String(TIMEOUT_S), LIGHT_EXPIRY_LISTENER: '0', LIGHT_SWEEP_INTERVAL_MS: '500' },
});
const ingest = (m: string) => s.ingestUrl(m, 'heartbeat');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);

t.test('a live instance whose Postgres heartbeat is older than its timeout stays green; a silent one turns red on time', async (t) => {
  t.equal((await post(ingest('alive'), s.token, {})).status, 200);
  t.equal((await post(ingest('quiet'), s.token, {})).status, 200);
  const first = await eventually(async () => {
    const st = await stored(s, 'alive');
    return st?.light === 'green' ? st : null;
  }, 5000, 'alive green');
  const quiet = (await eventually(async () => stored(s, 'quiet'), 5000, 'quiet stored'))!;
  // Heartbeats every 300 ms for 4 timeouts.
  let lastPosted = 0;
  const until = Date.now() + 4 * TIMEOUT_S * 1000;
  while (Date.now() < until) {
    const r = await post(ingest('alive'), s.token, {});
    t.equal(r.status, 200);
    lastPosted = Date.now();
    await sleep(300);
  }
  const pg = (await stored(s, 'alive'))!;
  t.equal(pg.last_heartbeat_ms, first.last_heartbeat_ms, 'Postgres still holds the first heartbeat, four timeouts old: the newest ones wait in Redis');
  t.equal(pg.light, 'green', 'stored green');
  t.equal(pg.light_seq, first.light_seq, 'no change of colour recorded');
  t.same(
    (await events(s, `machine = 'alive'`)).map((e) => e.to_light),
    ['green'],
    'its only event: the first green',
  );
  const shown = (await (await fetch(`${s.apiUrl}/api/instances?machine=alive`, { headers: { authorization: `Bearer ${s.token}` } })).json()) as { items: { light: string; last_heartbeat_at: string }[] };
  t.equal(shown.items[0]!.light, 'green', 'the api: green');
  t.ok(Date.parse(shown.items[0]!.last_heartbeat_at) >= lastPosted - 1000, 'the api: the newest heartbeat time, from Redis');
  t.ok((await s.redis.zscore(keys.heartbeatSilenceOf(keys.groupOf(pg.id)), pg.id)) !== null, "Redis holds its silence time");

  // A status report (no heartbeat) is judged in its own transaction: from the newest heartbeat,
  // which Redis holds, not from Postgres's, four timeouts old (that would record red).
  t.equal((await post(s.ingestUrl('alive', 'status'), s.token, { status: 'running' })).status, 200);
  const afterStatus = await eventually(async () => {
    const st = (await stored(s, 'alive'))!;
    return st.last_heartbeat_ms! > first.last_heartbeat_ms! ? st : null;
  }, 5000, "the status report's transaction wrote the newest heartbeat first");
  t.ok(afterStatus.last_heartbeat_ms! >= lastPosted - 1000, 'Postgres now has the newest heartbeat');
  t.equal(afterStatus.light, 'green', 'still green');
  t.same((await events(s, `machine = 'alive'`)).map((e) => e.to_light), ['green'], 'no change recorded by the status report');

  // The quiet one went red by the sweep alone (no listener), at its own deadline, soon after it.
  const red = (await events(s, `machine = 'quiet' AND to_light = 'red'`))[0];
  t.ok(red, 'quiet: red');
  t.equal(red!.at_ms, quiet.last_heartbeat_ms! + TIMEOUT_S * 1000, 'quiet: red since its own deadline');
  t.equal(red!.cause, 'sweep');
  t.ok(red!.recorded_ms - red!.at_ms < 3000, `quiet: recorded ${red!.recorded_ms - red!.at_ms} ms after its deadline`);

  // Now alive falls silent: red at the deadline of its newest heartbeat (which only Redis held).
  const last = await eventually(async () => {
    const e = (await events(s, `machine = 'alive' AND to_light = 'red'`))[0];
    return e ?? null;
  }, 10_000, 'alive red');
  const newest = (await stored(s, 'alive'))!.last_heartbeat_ms!;
  t.ok(newest >= lastPosted - 1000, "Postgres holds its newest heartbeat (the status report's transaction wrote it)");
  t.equal(last.at_ms, newest + TIMEOUT_S * 1000, 'alive: red since the deadline of its newest heartbeat');
  t.ok(last.recorded_ms - last.at_ms < 3000, `alive: recorded ${last.recorded_ms - last.at_ms} ms after its deadline`);
  // Settled right after the judgement, whose change may be delivered first.
  await eventually(async () => (await s.redis.zscore(keys.heartbeatSilenceOf(keys.groupOf(pg.id)), pg.id)) === null, 5000, 'its silence time settled');
});
