// The expiry listener's first look (workers/light-expiry.ts): of the instances whose heartbeat keys
// expired, those already stored red (the sweep, another worker or a report got there first) are
// neither looked up in Redis nor judged again; the others are, and turn red once. With Redis holding many
// keys that live long, Redis expires keys late and the sweep dropping their keys is what makes Redis
// publish most expiries, so the listener used to judge almost every instance a second time
// (bench/README.md "The listener's second look").
import t from 'tap';
import { testStack, eventually } from '../helpers/stack.js';
import { createLogger } from '../../lib/infra/log.js';
import { redisKeys } from '../../lib/infra/redis.js';
import { ExpiryListener, ensureExpiryEvents } from '../../workers/light-expiry.js';
import { Horizon, LightEventSink } from '../../workers/traffic-light.js';
import type { LightEvent } from '../../lib/domain/traffic-light.js';

const s = await testStack(t, 'expiryred', { gateway: false, worker: false, api: false });
const log = createLogger('test', 'silent');
if (!(await ensureExpiryEvents(s.redis, log))) throw new Error('the test Redis refuses to publish expired-key events');

// Twenty instances silent for ten minutes (their timeout is the default, 300 s): ten stored red
// already, ten still green. The red ones' times are then made fresh, as if a heartbeat had just
// been written: judged, they would turn green, so a judgement of a red one shows.
const N = 20;
await s.pool.query(
  `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
   SELECT $1, 'm' || g, now() - interval '1 day', now() - interval '10 minutes' FROM generate_series(1, $2::int) g`,
  [s.customer.id, N],
);
await s.pool.query(
  `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, status, status_at, deadline, late_at)
   SELECT customer_id, id, 'agent', now() - interval '1 day', now() - interval '10 minutes', now() - interval '10 minutes', 'running', now() - interval '10 minutes',
          light_deadline(now() - interval '10 minutes', NULL), light_late_at(now() - interval '10 minutes', NULL, NULL)
     FROM machines WHERE customer_id = $1`,
  [s.customer.id],
);
const rows = (await s.pool.query<{ id: string; slug: string }>(`SELECT i.id, m.slug FROM instances i JOIN machines m ON m.id = i.machine_id ORDER BY m.slug`)).rows;
const red = rows.filter((_, k) => k % 2 === 0).map((r) => r.id);
const green = rows.filter((_, k) => k % 2 === 1).map((r) => r.id);
await s.pool.query(
  `UPDATE instance_lights SET light = CASE WHEN instance_id = ANY($1::uuid[]) THEN 'red' ELSE 'green' END, light_seq = 1,
          light_since = now() - interval '1 hour', light_judged_at = now() - interval '5 minutes'`,
  [red],
);
await s.pool.query(
  `UPDATE instances SET last_heartbeat_at = now(), last_seen_at = now(), status_at = now(),
          deadline = light_deadline(now(), NULL), late_at = light_late_at(now(), NULL, NULL) WHERE id = ANY($1::uuid[])`,
  [red],
);

const lookedAt: string[] = [];
const recorded: LightEvent[] = [];
const sink = new LightEventSink(s.pool, s.ch, s.nc, s.env.SUBJECT_PREFIX!, null, log);
const listener = new ExpiryListener(
  s.env.REDIS_URL!,
  s.env.REDIS_PREFIX!,
  s.pool,
  sink,
  { warningWindowS: 300 },
  new Horizon(null, [], log),
  100,
  log,
  (events) => recorded.push(...events),
  async (ids) => (lookedAt.push(...ids), new Map<string, number>()),
);
await listener.start();
t.teardown(() => listener.stop());

t.test('keys of red and of green instances expire: only the green ones have their waiting heartbeats read and are judged', async (t) => {
  const keys = redisKeys(s.env.REDIS_PREFIX!, s.redis);
  for (const id of [...red, ...green]) await s.redis.set(keys.heartbeat(id), 'x', 'PX', 30);
  await eventually(async () => recorded.length >= green.length, 10_000, 'the green ones red');
  // Expiry events of the red ones came as well; give the listener time to (not) act on them.
  await new Promise((r) => setTimeout(r, 500));
  t.same([...lookedAt].sort(), [...green].sort(), 'the green ones looked at, once each; none of the red ones');
  t.same(recorded.map((e) => e.instance_id).sort(), [...green].sort(), 'each green one recorded red, once; no red one judged (it would have turned green)');
  t.ok(recorded.every((e) => e.from === 'green' && e.to === 'red' && e.cause === 'expiry'));
  const seqs = (await s.pool.query<{ light: string; n: number }>(`SELECT light, count(*)::int AS n FROM instance_lights GROUP BY light`)).rows;
  t.same(seqs, [{ light: 'red', n: N }], 'all twenty red');
  const redSeq = (await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instance_lights WHERE instance_id = ANY($1::uuid[]) AND light_seq = 1`, [red])).rows[0]!.n;
  t.equal(redSeq, red.length, 'the red ones untouched (no change recorded)');
  const notJudged = (await s.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM instance_lights WHERE instance_id = ANY($1::uuid[]) AND light_judged_at < now() - interval '4 minutes'`, [red])).rows[0]!.n;
  t.equal(notJudged, red.length, 'their judgement time as it was');
});
