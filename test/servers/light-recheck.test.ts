// The sweep's candidates come from `instance_lights.recheck_at`, which the recording statement
// stores with every judgement (lib/domain/traffic-light.ts recheckSql): the sweep finds a silence,
// a late time, a warning that ran out or a maintenance that ended only if its recheck time is not
// later than the change. Here, against Postgres, for instances in states fast-check draws (every
// colour; timeouts and late shares of rules and of the defaults; warnings; maintenance ends past
// and future; times on the judgement's very millisecond), judged at T by the statement itself:
//   - the recheck time is never before T (a candidate that stays one would come back forever);
//   - until it, the colour the rule gives (lightSql, the api's) is the stored one at every time
//     looked at: no change falls before it (a recheck late would be a red shown late);
//   - a millisecond after it, the rule gives another colour: it is not early either (an early
//     one costs a judgement per instance, which at a million instances is the sweep's whole time).
import t from 'tap';
import fc from 'fast-check';
import { testStack } from '../helpers/stack.js';
import { recordLightChanges } from '../../lib/store/light-events.js';
import { silenceTimes } from '../../lib/store/instances.js';
import { lightSql, LIGHTS } from '../../lib/domain/traffic-light.js';

const K = 40;
const WINDOW_S = 900;
const s = await testStack(t, 'recheck', { gateway: false, worker: false, api: false });
await s.pool.query(
  `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
   SELECT $1, 'm' || g, now() - interval '1 day', now() - interval '1 day' FROM generate_series(1, $2::int) g`,
  [s.customer.id, K],
);
await s.pool.query(
  `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at) SELECT customer_id, id, 'agent', now() - interval '1 day', now() - interval '1 day'
     FROM machines WHERE customer_id = $1`,
  [s.customer.id],
);
const ids = (await s.pool.query<{ id: string }>('SELECT id FROM instances WHERE customer_id = $1 ORDER BY id', [s.customer.id])).rows.map((r) => r.id);

/** Seconds before or after T: ordinary ones, and ones that put a time on T's millisecond for the usual timeouts. */
const offset = (max: number) => fc.oneof(fc.integer({ min: -max * 1000, max: max * 1000 }).map((ms) => ms / 1000), fc.constantFrom(0, -60, -300, -270, -150, -900, 0.001, -0.001));
const state = fc.record({
  hbAgo: fc.option(fc.oneof(fc.integer({ min: 0, max: 2_000_000 }).map((ms) => ms / 1000), fc.constantFrom(0, 60, 150, 270, 300, 299.999, 300.001, 900)), { nil: null }),
  status: fc.constantFrom(null, 'running', 'degraded', 'error', 'stopped'),
  warnAgo: fc.option(fc.oneof(fc.integer({ min: 0, max: 1_800_000 }).map((ms) => ms / 1000), fc.constantFrom(0, 900, 899.999, 900.001)), { nil: null }),
  timeoutS: fc.option(fc.constantFrom(60, 120, 300, 900, 3600), { nil: null }),
  latePercent: fc.option(fc.constantFrom(0, 10, 50, 90, 100), { nil: null }),
  maintenance: fc.option(offset(1200), { nil: null }),
  stored: fc.constantFrom(...LIGHTS),
});

interface Probe {
  id: string;
  light: string;
  recheck_ms: number | null;
  kind: 'before' | 'after';
  at_ms: number;
  colour: string;
}

t.test('the recheck time follows the rule: never before the judgement, no change before it, a change right after it', async (t) => {
  let judged = 0;
  let withRecheck = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(state, { minLength: 1, maxLength: K }), fc.constantFrom(300, 120), fc.constantFrom(0, 50), async (states, defaultTimeout, defaultLate) => {
      const T = Date.now() - 10_000;
      const ins = ids.slice(0, states.length);
      const at = (secsBefore: number | null) => (secsBefore === null ? null : new Date(T - secsBefore * 1000).toISOString());
      await s.pool.query('UPDATE light_defaults SET timeout_s = $1, late_percent = $2 WHERE id = 1', [defaultTimeout, defaultLate]);
      await s.pool.query(
        `UPDATE instances i SET last_heartbeat_at = x.hb, last_seen_at = COALESCE(x.hb, i.first_seen_at), status = x.status, status_at = x.hb, last_warning_at = x.warn,
                timeout_s = x.timeout_s, late_percent = x.late_percent, maintenance_until = x.mu,
                deadline = light_deadline(x.hb, x.timeout_s), late_at = light_late_at(x.hb, x.timeout_s, x.late_percent)
           FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::timestamptz[], $5::int[], $6::int[], $7::timestamptz[]) AS x(id, hb, status, warn, timeout_s, late_percent, mu)
          WHERE i.id = x.id`,
        [
          ins,
          states.map((x) => at(x.hbAgo)),
          states.map((x) => x.status),
          states.map((x) => at(x.warnAgo)),
          states.map((x) => x.timeoutS),
          states.map((x) => x.latePercent),
          states.map((x) => (x.maintenance === null ? null : at(-x.maintenance))),
        ],
      );
      await s.pool.query(
        `UPDATE instance_lights l SET light = x.light, light_since = to_timestamp($3::float8 / 1000) - interval '1 day', light_judged_at = NULL, recheck_at = NULL
           FROM unnest($1::uuid[], $2::text[]) AS x(id, light) WHERE l.instance_id = x.id`,
        [ins, states.map((x) => x.stored), T],
      );
      const c = await s.pool.connect();
      try {
        await c.query('BEGIN');
        await recordLightChanges(c, ins, 'sweep', WINDOW_S, T);
        await c.query('COMMIT');
      } finally {
        c.release();
      }
      const probes = (
        await s.pool.query<Probe>(
          `WITH p AS (SELECT to_timestamp($3::float8 / 1000) AS t0)
           SELECT i.id, l.light, (extract(epoch FROM l.recheck_at) * 1000)::float8 AS recheck_ms, s.kind, (extract(epoch FROM s.at) * 1000)::float8 AS at_ms,
                  ${lightSql('i', '$2::float8', 's.at')} AS colour
             FROM instances i JOIN instance_lights l ON l.instance_id = i.id CROSS JOIN p
             CROSS JOIN LATERAL (SELECT COALESCE(l.recheck_at, p.t0 + interval '3 days') AS e) e
             CROSS JOIN LATERAL (VALUES ('before', p.t0), ('before', p.t0 + (e.e - p.t0) / 3), ('before', p.t0 + (e.e - p.t0) * 2 / 3),
                                        ('before', e.e - interval '1 millisecond'), ('before', e.e), ('after', l.recheck_at + interval '1 millisecond')) s(kind, at)
            WHERE i.id = ANY($1::uuid[]) AND s.at IS NOT NULL AND s.at >= p.t0 AND (s.kind = 'after' OR s.at < e.e OR l.recheck_at IS NULL OR s.at = p.t0)`,
          [ins, WINDOW_S, T],
        )
      ).rows;
      for (const id of ins) {
        const mine = probes.filter((p) => p.id === id);
        const st = states[ins.indexOf(id)];
        const where = `instance ${JSON.stringify(st)}, defaults ${defaultTimeout} s / ${defaultLate} %, stored ${mine[0]?.light}, recheck ${mine[0]?.recheck_ms === null ? 'none' : mine[0]!.recheck_ms! - T} ms after T`;
        if (mine.length === 0) throw new Error(`${where}: not judged`);
        const recheck = mine[0]!.recheck_ms;
        if (recheck !== null && recheck < T) throw new Error(`${where}: recheck time before the judgement`);
        for (const p of mine) {
          if (p.kind === 'before' && (recheck === null || p.at_ms < recheck || p.at_ms === T) && p.colour !== p.light) {
            throw new Error(`${where}: at T + ${p.at_ms - T} ms the rule says ${p.colour}, before the recheck time`);
          }
          if (p.kind === 'after' && p.colour === p.light) throw new Error(`${where}: still ${p.colour} 1 ms after the recheck time (early)`);
        }
        judged++;
        if (recheck !== null) withRecheck++;
      }
    }),
    { numRuns: 300 },
  );
  t.ok(withRecheck > 0 && withRecheck < judged, `${judged} instances judged, ${withRecheck} with a recheck time, the others none`);
});

t.test('the sweep takes its candidates by recheck time only, earliest first, and never a retired instance', async (t) => {
  const T = Date.now() - 10_000;
  await s.pool.query('UPDATE instance_lights SET recheck_at = NULL');
  await s.pool.query(`UPDATE instance_lights SET recheck_at = to_timestamp($2::float8 / 1000) - make_interval(secs => $3::int)  WHERE instance_id = $1`, [ids[0], T, 5]);
  await s.pool.query(`UPDATE instance_lights SET recheck_at = to_timestamp($2::float8 / 1000) - make_interval(secs => $3::int) WHERE instance_id = $1`, [ids[1], T, 50]);
  await s.pool.query(`UPDATE instance_lights SET recheck_at = to_timestamp($2::float8 / 1000) + interval '1 second' WHERE instance_id = $1`, [ids[2], T]);
  await s.pool.query(`UPDATE instance_lights SET recheck_at = to_timestamp($2::float8 / 1000) - interval '1 hour' WHERE instance_id = $1`, [ids[3], T]);
  await s.pool.query(`UPDATE instances SET retired_at = now() WHERE id = $1`, [ids[3]]);
  const { instancesDueForSweep } = await import('../../lib/store/instances.js');
  t.same(await instancesDueForSweep(s.pool, 10, T), [ids[1], ids[0]], 'the two due by T, the earlier first; not the one due after T, not the retired one');
  t.same(await instancesDueForSweep(s.pool, 1, T), [ids[1]], 'at most the limit');
});

t.test("Postgres's possible lag (the slack) delays the times a heartbeat moves while green or yellow, nothing else; the silence time is exact", async (t) => {
  const T = Date.now();
  const SLACK_S = 7260;
  const [green, degraded, late, warned] = ids.slice(4, 8) as [string, string, string, string];
  await s.pool.query('UPDATE light_defaults SET timeout_s = 300, late_percent = 0 WHERE id = 1');
  const set = (id: string, hbAgoS: number, status: string, warnAgoS: number | null, latePercent: number | null, light: string) =>
    Promise.all([
      s.pool.query(
        `UPDATE instances SET last_heartbeat_at = to_timestamp($2::float8 / 1000), status = $3, last_warning_at = to_timestamp($4::float8 / 1000), late_percent = $5::int,
                timeout_s = NULL, maintenance_until = NULL, retired_at = NULL,
                deadline = light_deadline(to_timestamp($2::float8 / 1000), NULL), late_at = light_late_at(to_timestamp($2::float8 / 1000), NULL, $5::int)
          WHERE id = $1`,
        [id, T - hbAgoS * 1000, status, warnAgoS === null ? null : T - warnAgoS * 1000, latePercent],
      ),
      s.pool.query(`UPDATE instance_lights SET light = $2, recheck_at = NULL WHERE instance_id = $1`, [id, light]),
    ]);
  await set(green, 10, 'running', null, null, 'green');
  await set(degraded, 10, 'degraded', null, null, 'yellow');
  await set(late, 200, 'running', null, 50, 'late');
  await set(warned, 10, 'running', 10, null, 'yellow');
  const c = await s.pool.connect();
  try {
    await c.query('BEGIN');
    t.same((await recordLightChanges(c, [green, degraded, late, warned], 'sweep', WINDOW_S, T, SLACK_S)).events, [], 'no change of colour');
    await c.query('COMMIT');
  } finally {
    c.release();
  }
  const rows = (await s.pool.query<{ id: string; ms: number }>(`SELECT instance_id AS id, (extract(epoch FROM recheck_at) * 1000)::float8 AS ms FROM instance_lights WHERE instance_id = ANY($1::uuid[])`, [[green, degraded, late, warned]])).rows;
  const recheck = new Map(rows.map((r) => [r.id, Math.round(r.ms)]));
  t.equal(recheck.get(green), T - 10_000 + 300_000 + SLACK_S * 1000, 'green: its deadline plus the slack');
  t.equal(recheck.get(degraded), T - 10_000 + 300_000 + SLACK_S * 1000, 'yellow for a status: its deadline plus the slack');
  t.equal(recheck.get(late), T - 200_000 + 300_000, 'late: its deadline exactly (no heartbeat waits while late)');
  t.equal(recheck.get(warned), T - 10_000 + WINDOW_S * 1000, "yellow for a warning: the warning's end, exactly");
  const times = new Map((await silenceTimes(s.pool, [green, degraded, late, warned])).map((x) => [x.id, Math.round(x.at)]));
  t.same(
    [times.get(green), times.get(degraded), times.get(late), times.get(warned)],
    [T - 10_000 + 300_000, T - 10_000 + 300_000, undefined, T - 10_000 + 300_000],
    "the silence times: each green or yellow instance's deadline, exactly; none for late",
  );
});
