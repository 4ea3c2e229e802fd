// The Redis Cluster of `npm run cluster` (deploy/cluster.ts: 3 primaries, a replica each): the
// heartbeat groups' hash tags spread over the primaries, and kill -9 of one primary while agents
// heartbeat. Its replica takes over; every instance that goes on heartbeating stays green (no red
// lost to a key that vanished, none wrongly made), every instance that fell silent at the kill
// turns red exactly once, at its last acknowledged heartbeat + the timeout: a heartbeat the
// workers kept only in Redis (skipped Postgres) was on the replica before its report was
// acknowledged (REDIS_WAIT_REPLICAS=1), so the failover loses none. Then one primary refuses
// writes (maxmemory reached, noeviction) for longer than the heartbeat timeout while agents report:
// the batches that touch it wait, nothing is dead-lettered, every acknowledged report is stored
// once when it takes writes again, and no instance changes colour (its keys there expired, but
// the light is judged at the horizon, which the waiting reports hold back).
import t from 'tap';
import { testCluster, steadyIngest, storedOnce } from '../helpers/cluster.js';
import { eventually } from '../helpers/stack.js';
import { readyz, outageNamed } from '../helpers/outage.js';
import { deadLetterStream } from '../../lib/contract/messages.js';
import { CLUSTER_GROUPS, Redis, asCluster, createRedis, redisKeys } from '../../lib/infra/redis.js';

const TIMEOUT_S = 12;
// The sweep every 15 s, not every second: it judges silence from the expiry times in Redis as
// soon as the listener does, and would otherwise make every silent instance red before the
// promoted replica's expiry events could be seen to (it stays the backstop for a missed event).
const k = await testCluster(t, 'redis', { HEARTBEAT_TIMEOUT_S: String(TIMEOUT_S), LIGHT_SWEEP_INTERVAL_MS: '15000' });
const redis = createRedis(k.c.cfg.redisUrl);
t.teardown(() => redis.quit().then(() => {}));
const cluster = asCluster(redis)!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const keys = redisKeys(k.c.cfg.redisPrefix, redis);

/** Slot ranges -> the primary's port, from CLUSTER SLOTS. */
async function slotOwners(): Promise<{ from: number; to: number; port: number }[]> {
  const slots = await cluster.cluster('SLOTS');
  return slots.map(([from, to, primary]) => ({ from, to, port: Number(primary?.[1]) }));
}
const ownerOf = (owners: { from: number; to: number; port: number }[], slot: number) => owners.find((o) => slot >= o.from && slot <= o.to)?.port ?? -1;

t.test('three primaries with a replica each; the heartbeat groups spread over all three', async (t) => {
  await eventually(async () => cluster.nodes('master').length === 3 && cluster.nodes('slave').length === 3, 30_000, 'the cluster client sees 3 primaries and 3 replicas');
  const owners = await slotOwners();
  const byPrimary = new Map<number, number>();
  for (let g = 0; g < CLUSTER_GROUPS; g++) {
    const slot = Number(await cluster.cluster('KEYSLOT', keys.heartbeatDueOf(g)));
    t.equal(Number(await cluster.cluster('KEYSLOT', keys.heartbeatStatePrefixOf(g) + 'x')), slot, `group ${g}: state hashes in the due set's slot`);
    const port = ownerOf(owners, slot);
    byPrimary.set(port, (byPrimary.get(port) ?? 0) + 1);
  }
  t.equal(byPrimary.size, 3, `every primary serves some groups (${JSON.stringify(Object.fromEntries(byPrimary))})`);
});

t.test('kill -9 of a Redis primary while agents heartbeat: its replica takes over; no light lost or doubled, no heartbeat lost', async (t) => {
  const steady = Array.from({ length: 24 }, (_, i) => `rc-steady-${i}`);
  const quiet = Array.from({ length: 24 }, (_, i) => `rc-quiet-${i}`);
  const answers = new Map<string, number>();
  /** The uptime (round number) of each machine's last acknowledged heartbeat. */
  const lastAcked = new Map<string, number>();
  let round = 0;
  const send = async (machines: string[]) => {
    const r = ++round;
    await Promise.all(
      machines.map(async (m) => {
        const a = await k.https('POST', `/api/ingest/${k.customer.slug}/${m}/agent/heartbeat`, k.token, { version: '1.0', uptime_seconds: r }).catch(() => null);
        const key = a ? (a.status === 503 && !a.headers.get('retry-after') ? '503 without Retry-After' : String(a.status)) : 'network';
        answers.set(key, (answers.get(key) ?? 0) + 1);
        if (a?.status === 200) lastAcked.set(m, r);
      }),
    );
  };
  // Both sets heartbeat for a while: the first heartbeat goes to Postgres, the next ones skip it
  // (they change nothing) and live in Redis until the flusher writes them.
  for (let i = 0; i < 6; i++) {
    await send([...steady, ...quiet]);
    await sleep(1000);
  }
  await send([...steady, ...quiet]);

  // The victim: the primary holding the groups of most quiet instances.
  const ids = new Map<string, string>();
  const rows = await k.pool.query<{ slug: string; id: string }>(
    `SELECT m.slug, i.id FROM instances i JOIN machines m ON m.id = i.machine_id WHERE i.customer_id = $1 AND m.slug LIKE 'rc-%'`,
    [k.customer.id],
  );
  for (const r of rows.rows) ids.set(r.slug, r.id);
  t.equal(ids.size, 48, 'all 48 instances exist');
  const owners = await slotOwners();
  const quietOn = new Map<number, number>();
  const portOf = new Map<string, number>();
  for (const m of quiet) {
    const slot = Number(await cluster.cluster('KEYSLOT', keys.heartbeat(ids.get(m)!)));
    const port = ownerOf(owners, slot);
    portOf.set(m, port);
    quietOn.set(port, (quietOn.get(port) ?? 0) + 1);
  }
  const victimPort = [...quietOn.entries()].sort((a, b) => b[1] - a[1])[0]![0];
  const victim = k.c.redis[k.c.ports.redisCluster.indexOf(victimPort)]!;
  t.ok(victim, `the victim: primary on port ${victimPort}, holding ${quietOn.get(victimPort)} quiet instances' keys`);

  // The quiet ones' last heartbeats were just acknowledged (their batch may still be in the
  // workers' hands): the primary dies now.
  const killedAt = Date.now();
  await victim.kill9();
  while (Date.now() - killedAt < (TIMEOUT_S + 8) * 1000) {
    await send(steady);
    await sleep(1000);
  }

  // The api shows the newest heartbeat Redis holds (read by one script call per key group, each
  // in its slot), newer than what Postgres holds while the flusher has not written it yet.
  const sample = steady.slice(0, 8).map((m) => ids.get(m)!);
  const pgHb = new Map(
    (await k.pool.query<{ id: string; hb: string }>(`SELECT id, (extract(epoch FROM last_heartbeat_at) * 1000)::bigint::text AS hb FROM instances WHERE id = ANY($1::uuid[])`, [sample])).rows.map((r) => [r.id, Number(r.hb)]),
  );
  let newer = 0;
  const behind: string[] = [];
  for (const id of sample) {
    const a = await k.https('GET', `/api/instances/${id}`, k.token);
    const shown = Date.parse(String((a.body as { last_heartbeat_at?: string } | null)?.last_heartbeat_at));
    if (a.status !== 200 || !(shown >= pgHb.get(id)!)) behind.push(`${id}: ${a.status} ${shown} < ${pgHb.get(id)}`);
    if (shown > pgHb.get(id)!) newer++;
  }
  t.same(behind, [], 'the api never shows an older heartbeat than Postgres holds');
  t.ok(newer > 0, `the api shows heartbeats newer than Postgres's, from Redis (${newer} of ${sample.length})`);

  // The replica took over.
  await eventually(
    async () => {
      const o = await slotOwners();
      return o.length > 0 && o.every((x) => x.port !== victimPort) && new Set(o.map((x) => x.port)).size === 3;
    },
    30_000,
    'its replica serves its slots',
  );

  // Every quiet instance red, once.
  const quietIds = quiet.map((m) => ids.get(m)!);
  await eventually(
    async () => (await k.pool.query(`SELECT count(*)::int AS n FROM instances JOIN instance_lights ON instance_id = id WHERE id = ANY($1::uuid[]) AND light = 'red'`, [quietIds])).rows[0].n === quiet.length,
    90_000,
    'every silent instance red',
  );
  const st = await k.pool.query<{ id: string; light: string; uptime: number; hb: string; light_seq: string }>(
    `SELECT id, light, uptime_seconds AS uptime, (extract(epoch FROM last_heartbeat_at) * 1000)::bigint::text AS hb, light_seq::text FROM instances JOIN instance_lights ON instance_id = id WHERE id = ANY($1::uuid[])`,
    [[...ids.values()]],
  );
  const byId = new Map(st.rows.map((r) => [r.id, r]));
  // The changes reach ClickHouse after their commit (the outbox): wait for every silent one's.
  const readEvents = () =>
    k.ch
      .query({ query: `SELECT instance_id, to_light, at_ms, cause FROM light_events FINAL WHERE machine LIKE 'rc-%' ORDER BY instance_id, seq`, format: 'JSONEachRow' })
      .then((r) => r.json<{ instance_id: string; to_light: string; at_ms: string; cause: string }>());
  const quietSet = new Set(quietIds);
  const evs = await eventually(async () => {
    const all = await readEvents();
    return new Set(all.filter((e) => e.to_light === 'red' && quietSet.has(e.instance_id)).map((e) => e.instance_id)).size === quiet.length && all;
  }, 60_000, "every silent instance's red change in ClickHouse");
  await sleep(2000);
  const settled = await readEvents();
  t.equal(settled.length, evs.length, 'and no more changes after them');
  const reds = (id: string) => settled.filter((e) => e.instance_id === id && e.to_light === 'red');
  const lostHeartbeats: string[] = [];
  const badReds: string[] = [];
  for (const m of quiet) {
    const row = byId.get(ids.get(m)!)!;
    // The api shows the last acknowledged heartbeat: from Postgres, or from Redis (the promoted
    // replica) where it still waits for the flusher (silence is judged from it without writing it).
    const a = await k.https('GET', `/api/instances/${row.id}`, k.token);
    const shown = a.body as { uptime_seconds?: number; last_heartbeat_at?: string } | null;
    const hb = Date.parse(String(shown?.last_heartbeat_at));
    if (a.status !== 200 || shown?.uptime_seconds !== lastAcked.get(m)) lostHeartbeats.push(`${m}: ${a.status}, round ${shown?.uptime_seconds} shown, ${lastAcked.get(m)} acknowledged`);
    const r = reds(row.id);
    if (r.length !== 1 || Number(r[0]!.at_ms) !== hb + TIMEOUT_S * 1000) badReds.push(`${m}: ${r.length} red events ${r.map((x) => x.at_ms).join(',')}, last heartbeat ${hb}`);
  }
  t.same(lostHeartbeats, [], 'no acknowledged heartbeat of a silent instance lost in the failover');
  // The expiry listener hears every node: the keys on the promoted replica expired there, and
  // their events reached a worker (the sweep, every 15 s here, would have made them red too, later).
  const byExpiry = (ms: string[]) => ms.filter((m) => reds(ids.get(m)!).some((e) => e.cause === 'expiry')).length;
  const onVictim = quiet.filter((m) => portOf.get(m) === victimPort);
  const elsewhere = quiet.filter((m) => portOf.get(m) !== victimPort);
  t.comment(`red by key expiry: ${byExpiry(onVictim)} of ${onVictim.length} on the promoted replica, ${byExpiry(elsewhere)} of ${elsewhere.length} on the other primaries`);
  const causes = new Map<string, number>();
  for (const e of settled) if (e.to_light === 'red' && quietSet.has(e.instance_id)) causes.set(e.cause, (causes.get(e.cause) ?? 0) + 1);
  t.comment(`the silent instances' reds by cause: ${[...causes].map(([c, n]) => `${c} ${n}`).join(', ')}`);
  // A silence is the expiry's or the sweep's, never a report's (a write of the heartbeat that
  // waited in Redis, judged as a report's, once recorded it: test/servers/light-waiting.test.ts).
  t.notOk(causes.has('report'), 'no silence recorded as a report');
  t.ok(byExpiry(onVictim) > 0, "some of the promoted replica's instances turned red by its expiry events");
  t.same(badReds, [], 'each silent instance red exactly once, at its last heartbeat + the timeout');
  const steadyRed = steady.filter((m) => reds(ids.get(m)!).length > 0 || byId.get(ids.get(m)!)!.light !== 'green');
  t.same(steadyRed, [], 'no instance that went on heartbeating turned red, or is anything but green');
  t.comment(`answers: ${[...answers.entries()].map(([s, n]) => `${s}×${n}`).join(', ')}`);
  t.notOk(answers.has('503 without Retry-After') || answers.has('network') || [...answers.keys()].some((s) => /^5/.test(s) && s !== '503'), 'no 5xx but 503 with Retry-After');
  k.record('redis primary kill', {
    quiet: quiet.length,
    steady: steady.length,
    victim_quiet_instances: quietOn.get(victimPort),
    lost_heartbeats: lostHeartbeats.length,
    bad_reds: badReds.length,
    red_by_expiry_on_promoted_replica: byExpiry(onVictim),
    red_by_expiry_elsewhere: byExpiry(elsewhere),
    steady_red: steadyRed.length,
    answers: Object.fromEntries(answers),
  });

  // The killed node comes back as a replica; the cluster is whole again.
  await victim.start();
  const back = new Redis({ port: victimPort, host: '127.0.0.1', lazyConnect: true });
  t.teardown(() => back.disconnect());
  await eventually(async () => ((await back.role().catch(() => [''])) as string[])[0] === 'slave', 60_000, 'the old primary rejoined as a replica');
  const info = await back.cluster('INFO');
  t.match(info, /cluster_state:ok/, 'and the cluster is whole');
});

t.test('one Redis primary refusing writes (maxmemory reached) for longer than the timeout while agents report: they wait, then are stored once; no colour changes', async (t) => {
  // Ten machines (steadyIngest sends every fourth report as diagnostics: with a number of machines
  // divisible by 4, some would never heartbeat).
  const machines = Array.from({ length: 10 }, (_, i) => `rw-m${i}`);
  const load = steadyIngest(k, 'rw', 4, machines);
  let stopped = false;
  t.teardown(async () => {
    if (!stopped) await load.stop();
  });
  // Every machine's instance exists and is green before the fault.
  const instances = async () =>
    (
      await k.pool.query<{ slug: string; id: string; light: string; light_seq: string }>(
        `SELECT m.slug, i.id, il.light, il.light_seq::text FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id WHERE i.customer_id = $1 AND m.slug LIKE 'rw-%'`,
        [k.customer.id],
      )
    ).rows;
  const rows = await eventually(async () => {
    const r = await instances();
    return r.length === machines.length && r.every((x) => x.light === 'green') ? r : null;
  }, 60_000, 'all 10 instances green').catch(async (e) => {
    throw new Error(`${String(e)}: ${JSON.stringify((await instances()).map((x) => `${x.slug} ${x.light}`))}, answers ${load.summary()}`);
  });
  const seqBefore = new Map(rows.map((r) => [r.id, r.light_seq]));
  const owners = await slotOwners();
  const on = new Map<number, number>();
  for (const r of rows) {
    const port = ownerOf(owners, Number(await cluster.cluster('KEYSLOT', keys.heartbeat(r.id))));
    on.set(port, (on.get(port) ?? 0) + 1);
  }
  const [port, held] = [...on.entries()].sort((a, b) => b[1] - a[1])[0]!;
  t.ok(held > 0 && on.size > 1, `the primary on port ${port} holds ${held} of the 10 instances' keys, the others the rest (${JSON.stringify(Object.fromEntries(on))})`);
  const primary = new Redis({ port, host: '127.0.0.1', lazyConnect: true });
  t.teardown(() => primary.disconnect());
  const jsm = await k.nc.jetstreamManager();
  const dlq = deadLetterStream(k.c.cfg.streamName);
  const deadBefore = (await jsm.streams.info(dlq)).state.messages;

  await primary.config('SET', 'maxmemory', '1');
  const faultAt = Date.now();
  const workerUrls = k.c.ports.worker.map((p) => `http://127.0.0.1:${p}`);
  // What the workers' /readyz said during the fault, each distinct answer with when it came first.
  const said = new Map<string, number>();
  let namedRedis = false;
  while (Date.now() - faultAt < (TIMEOUT_S + 6) * 1000) {
    for (const [i, u] of workerUrls.entries()) {
      const r = await readyz(u).catch(() => null);
      const text = r ? `worker ${i}: ${r.status} ${r.detail.replace(/ for \d+ s, \d+ messages? waiting/g, '')}` : `worker ${i}: no answer`;
      if (!said.has(text)) said.set(text, Date.now() - faultAt);
      if (r?.status === 503 && outageNamed(r.detail, 'redis')) namedRedis = true;
    }
    await sleep(500);
  }
  t.comment(`/readyz during the fault: ${[...said].map(([x, ms]) => `${x} (from ${ms} ms)`).join('; ')}`);
  t.ok(namedRedis, 'a worker not ready, naming Redis');
  t.equal((await jsm.streams.info(dlq)).state.messages, deadBefore, 'no dead letter while it lasts');
  const ackedDuring = load.ackedSince(faultAt);
  t.ok(ackedDuring > 0, `${ackedDuring} reports acknowledged during the fault`);
  await primary.config('SET', 'maxmemory', '0');
  await sleep(4000);
  await load.stop();
  stopped = true;
  // From here the instances are silent: each turns red at its last heartbeat + the timeout, later
  // than this. A change of colour before it is one the fault caused.
  const stopAt = Date.now();

  const end = await eventually(async () => {
    const r = await storedOnce(k, load.acked, 'rw');
    return r.missing.length === 0 ? r : null;
  }, 180_000, 'every acknowledged report stored').catch(async (e) => {
    const r = await storedOnce(k, load.acked, 'rw');
    t.fail(`${String(e)}: ${r.missing.length} of ${load.acked.length} missing (${r.missing.slice(0, 5).join(', ')})`);
    return r;
  });
  t.equal(end.missing.length, 0, `none of ${load.acked.length} acknowledged reports lost`);
  t.same(end.split, [], 'no request stored as two reports');
  // A batch retried by the other worker may insert rows that landed before the refusal again
  // (docs/architecture.md "Outages"): copies of one report, which FINAL collapses; counted.
  t.comment(`${end.doubled.length} reports with raw copies (one row each under FINAL)`);
  t.equal((await jsm.streams.info(dlq)).state.messages, deadBefore, 'zero dead letters');
  await eventually(async () => {
    for (const u of workerUrls) if ((await readyz(u)).status !== 200) return null;
    return true;
  }, 60_000, 'every worker ready again');
  // No colour changed while they reported: the keys on the refusing primary expired during the
  // fault, and the light waited for the reports behind it instead of turning red. The one change
  // allowed is the red of the silence after the load stopped.
  const after = await k.pool.query<{ id: string; light: string; light_seq: string; since: string }>(
    `SELECT id, light, light_seq::text, (extract(epoch FROM light_since) * 1000)::bigint::text AS since FROM instances JOIN instance_lights ON instance_id = id WHERE id = ANY($1::uuid[])`,
    [[...seqBefore.keys()]],
  );
  const changed = after.rows
    .filter((r) => {
      const n = Number(r.light_seq) - Number(seqBefore.get(r.id));
      return !(n === 0 && r.light === 'green') && !(n === 1 && r.light === 'red' && Number(r.since) > stopAt);
    })
    .map((r) => `${r.id}: ${r.light} since ${new Date(Number(r.since)).toISOString()} (load stopped ${new Date(stopAt).toISOString()}), seq ${seqBefore.get(r.id)} -> ${r.light_seq}`);
  t.same(changed, [], 'no change of colour while they reported (only the red of the silence after)');
  const reds = await k.ch
    .query({ query: `SELECT count() AS n FROM light_events FINAL WHERE machine LIKE 'rw-%' AND to_light <> 'green' AND at_ms <= ${stopAt}`, format: 'JSONEachRow' })
    .then((r) => r.json<{ n: string }>());
  t.equal(Number(reds[0]?.n), 0, 'none in ClickHouse either');
  t.comment(`answers: ${load.summary()}`);
  t.same(load.bad(), [], 'no 5xx but 503 with Retry-After');
  k.record('redis primary refusing writes', {
    instances: machines.length,
    on_refusing_primary: held,
    acknowledged: load.acked.length,
    acknowledged_during_fault: ackedDuring,
    lost: end.missing.length,
    split: end.split.length,
    raw_copies: end.doubled.length,
    colour_changes: changed.length,
    answers: load.counts(),
  });
});
