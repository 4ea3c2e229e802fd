// After a sweep's round (workers/light-sweep.ts afterJudgement), the silence times that go back into
// Redis (`hbdl`) are read from Postgres only for the instances that may still need one: not for those
// the round's first look found red (the expiry listener, or a report, recorded them first) and so did
// not judge, nor for those it recorded red. Reading them cost Postgres 0.37 s for no row when 100,000
// fell silent at once (bench/README.md "Known red, not read again"). Their entries still go; a lit
// instance judged unchanged still gets its time from Postgres. A real sweep on the real servers;
// the pool is the real one, its queries noted on the way.
import t from 'tap';
import { testStack, eventually } from '../helpers/stack.js';
import { createLogger } from '../../lib/infra/log.js';
import { LightSweep } from '../../workers/light-sweep.js';
import { ExpiryListener, ensureExpiryEvents } from '../../workers/light-expiry.js';
import { Horizon, LightEventSink } from '../../workers/traffic-light.js';
import { HeartbeatState } from '../../workers/heartbeat-state.js';
import type { Pool } from '../../lib/infra/postgres.js';
import { silenceAtSql } from '../../lib/domain/traffic-light.js';

const s = await testStack(t, 'sweepred', { gateway: false, worker: false, api: false });
const prefix = s.env.REDIS_PREFIX!;
const log = createLogger('test', 'silent');

/** The pool as it is, each query's text and values noted. */
const sent: { text: string; values: unknown[] }[] = [];
const pool = new Proxy(s.pool, {
  get(target, prop, receiver) {
    if (prop === 'query')
      return (q: string | { text: string; values?: unknown[] }, values?: unknown[]) => {
        sent.push(typeof q === 'string' ? { text: q, values: values ?? [] } : { text: q.text, values: q.values ?? values ?? [] });
        return target.query(q as string, values);
      };
    const v = Reflect.get(target, prop, receiver);
    return typeof v === 'function' ? v.bind(target) : v;
  },
}) as Pool;

async function instance(slug: string, light: 'red' | 'green', heartbeatAgo: string): Promise<string> {
  const m = (await s.pool.query(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, $2, now() - interval '1 day', now()) RETURNING id`, [s.customer.id, slug])).rows[0].id;
  const id = (
    await s.pool.query(
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, deadline, late_at)
       VALUES ($1, $2, 'agent', now() - interval '1 day', now() - $3::interval, now() - $3::interval,
               light_deadline(now() - $3::interval, NULL), light_late_at(now() - $3::interval, NULL, NULL)) RETURNING id`,
      [s.customer.id, m, heartbeatAgo],
    )
  ).rows[0].id as string;
  await s.pool.query(
    // A red one waits for no recheck (only a report changes it); a green one for its deadline.
    `UPDATE instance_lights l SET light = $2, light_since = now() - interval '1 hour', light_judged_at = now() - interval '1 minute',
            recheck_at = CASE WHEN $2 = 'red' THEN NULL ELSE i.deadline END
       FROM instances i WHERE i.id = l.instance_id AND l.instance_id = $1`,
    [id, light],
  );
  return id;
}

const hbdl = `${prefix}hbdl`;
const sink = new LightEventSink(pool, s.ch, s.nc, s.env.SUBJECT_PREFIX!, null, log);
const silences = new HeartbeatState(s.redis, prefix, { heartbeatTimeoutMs: 300_000, pgIntervalMs: 240_000, idCacheSize: 100 });

/**
 * One instance red already (recorded by someone else) and one green whose heartbeat Postgres holds
 * is recent, both with their silence time in hbdl due (the green one's behind Postgres).
 */
async function dueRedAndLit(name: string): Promise<{ red: string; lit: string }> {
  const red = await instance(`${name}-red`, 'red', '20 minutes');
  const lit = await instance(`${name}-lit`, 'green', '1 minute');
  await s.redis.zadd(hbdl, Date.now() - 60_000, red, Date.now() - 60_000, lit);
  return { red, lit };
}

/** The id lists of the silence-time reads (lib/store/instances.ts silenceTimes) sent since `from`. */
const silenceReads = (from = 0) =>
  sent.slice(from).filter((q) => q.text.includes("l.light IN ('green', 'yellow') AND i.retired_at IS NULL")).map((q) => q.values[0] as string[]);

t.test("a round's silence times: read for the lit instance judged unchanged, not for the one found red; both entries settled", async (t) => {
  const { red, lit } = await dueRedAndLit('swept');
  const from = sent.length;
  const sweep = new LightSweep(pool, sink, { warningWindowS: 900 }, new Horizon(null, [], log), { batch: 1000 }, undefined, undefined, undefined, silences);
  const r = await sweep.sweep();
  t.ok(r.ran, 'the sweep ran');
  t.equal(r.changes, 0, 'nothing changed colour: one was red already, the other is not silent by Postgres');

  t.same(silenceReads(from), [[lit]], 'the silence times read once, for the lit instance only');
  t.equal(await s.redis.zscore(hbdl, red), null, "the red one's entry is gone");
  // When its silence first changes its colour (the earlier of its late time and deadline).
  const at = (await s.pool.query<{ ms: number }>(`SELECT (extract(epoch FROM ${silenceAtSql('i')}) * 1000)::float8 AS ms FROM instances i WHERE i.id = $1`, [lit])).rows[0]!.ms;
  t.ok(at > Date.now(), 'that time is still ahead');
  const stored = Number(await s.redis.zscore(hbdl, lit));
  t.ok(Math.abs(stored - at) < 1, `the lit one's entry is that time as Postgres has it (${stored} against ${at}), no longer the due one`);
});

t.test("the expiry listener's batch: the same, for an instance found red at its first look", async (t) => {
  await ensureExpiryEvents(s.redis, log);
  const { red, lit } = await dueRedAndLit('expired');
  const listener = new ExpiryListener(s.env.REDIS_URL!, prefix, pool, sink, { warningWindowS: 900 }, new Horizon(null, [], log), 1000, log, undefined, undefined, silences);
  await listener.start();
  t.teardown(() => listener.stop());
  const from = sent.length;
  // Both heartbeat keys expire; the listener judges what is not red and settles both.
  await s.redis.set(`${prefix}hb:${red}`, '1', 'PX', 100);
  await s.redis.set(`${prefix}hb:${lit}`, '1', 'PX', 100);
  // Each look also touches the keys: an expired key read is expired (and its event sent) at once,
  // however many other keys the shared Redis's expiry cycle samples first.
  await eventually(
    async () => (await s.redis.exists(`${prefix}hb:${red}`, `${prefix}hb:${lit}`)) === 0 && (await s.redis.zscore(hbdl, red)) === null && Number(await s.redis.zscore(hbdl, lit)) > Date.now(),
    20_000,
    'both entries settled',
  );
  const reads = silenceReads(from);
  t.ok(reads.length > 0 && reads.every((ids) => !ids.includes(red)) && reads.some((ids) => ids.includes(lit)), `the silence times read for the lit one, never for the red one (${JSON.stringify(reads)})`);
});
