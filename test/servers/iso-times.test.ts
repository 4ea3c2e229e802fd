// The api's short cut for timestamptz columns (lib/infra/postgres.ts timestamptzToIso, ISO_TIMES):
// for every time Postgres can write, in UTC and in other time zones, the text it returns is the
// very string pg's own parser and Date's toISOString made of it before (or pg's value itself,
// where the short cut does not apply). Postgres writes the times here, from values fast-check
// draws: every year from 4713 BC to 294276 AD, every microsecond, ±infinity.
import t from 'tap';
import fc from 'fast-check';
import pg from 'pg';
import { testStack } from '../helpers/stack.js';
import { ISO_TIMES, timestamptzToIso } from '../../lib/infra/postgres.js';

const s = await testStack(t, 'isotimes', { gateway: false, worker: false, api: false });
const parse = pg.types.getTypeParser(1184, 'text') as (text: string) => unknown;
/** The api's JSON of a parsed value: a Date's ISO string; past JavaScript's last Date (year 275760) toISOString throws, then and now. */
const expected = (v: unknown) => {
  if (!(v instanceof Date)) return v;
  try {
    return v.toISOString();
  } catch (e) {
    return `throws ${(e as Error).name}`;
  }
};

// Seconds since the epoch (whole) and microseconds: Postgres adds them exactly (no float8 of a
// microsecond count, which would round beyond 2^53).
const FIRST = -210_863_520_000; // 4713-11-24 BC, about Postgres's first timestamptz
const LAST = 9_224_318_015_999; // 294276-12-31 AD, about its last
const ordinary = fc.integer({ min: -30_610_224_000, max: 253_402_300_799 }); // years 1000 to 9999
const any = fc.oneof(ordinary, fc.integer({ min: FIRST + 86_400, max: LAST - 86_400 }));
const micros = fc.oneof(fc.integer({ min: 0, max: 999_999 }), fc.constantFrom(0, 1, 999, 1000, 1001, 999_000, 999_999, 500_000, 123_456, 100));

async function rendered(zone: string, secs: number[], us: number[]): Promise<string[]> {
  const c = await s.pool.connect();
  try {
    await c.query(`SET TIME ZONE '${zone}'`);
    const r = await c.query<{ t: string }>(
      `SELECT (to_timestamp(x.s) + (x.us || ' microseconds')::interval)::text AS t FROM unnest($1::float8[], $2::int[]) WITH ORDINALITY AS x(s, us, n) ORDER BY n`,
      [secs, us],
    );
    return r.rows.map((x) => x.t);
  } finally {
    await c.query('RESET TIME ZONE').catch(() => {});
    c.release();
  }
}

t.test('in UTC, every time of the years 1000 to 9999 takes the short cut, and it gives what the parser gave', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.tuple(ordinary, micros), { minLength: 1, maxLength: 200 }), async (pairs) => {
      const texts = await rendered('UTC', pairs.map((p) => p[0]), pairs.map((p) => p[1]));
      for (const text of texts) {
        const got = timestamptzToIso(text);
        if (typeof got !== 'string') throw new Error(`${text}: not taken by the short cut`);
        if (got !== expected(parse(text))) throw new Error(`${text}: ${got}, the parser gave ${String(expected(parse(text)))}`);
      }
    }),
    { numRuns: 60 },
  );
  t.pass('60 runs of up to 200 times each');
});

for (const zone of ['UTC', 'Asia/Kolkata', 'America/St_Johns', 'Pacific/Chatham']) {
  t.test(`in ${zone}, every time Postgres can write comes out as the parser made it`, async (t) => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(any, micros), { minLength: 1, maxLength: 200 }), async (pairs) => {
        const texts = await rendered(zone, pairs.map((p) => p[0]), pairs.map((p) => p[1]));
        for (const text of texts) {
          const want = expected(parse(text));
          const got = expected(timestamptzToIso(text));
          if (got !== want) throw new Error(`${text}: ${String(got)}, the parser gave ${String(want)}`);
        }
      }),
      { numRuns: 30 },
    );
    t.pass('30 runs of up to 200 times each');
  });
}

t.test('a query with ISO_TIMES: times as the strings the api sent before, everything else as before', async (t) => {
  const sql = `SELECT '2026-11-28 23:45:01.264871+00'::timestamptz AS a, '2026-11-28 23:01:19.000001+00'::timestamptz AS b, '0099-01-01 00:00:00+00'::timestamptz AS c,
                      'infinity'::timestamptz AS d, '-infinity'::timestamptz AS e, NULL::timestamptz AS f, '1500-06-01 12:00:00 BC'::timestamptz AS g,
                      '2026-11-28'::date AS h, 42::bigint AS i, '{2001:db8::1}'::inet[] AS j`;
  const plain = (await s.pool.query(sql)).rows[0] as Record<string, unknown>;
  const iso = (await s.pool.query({ text: sql, types: ISO_TIMES })).rows[0] as Record<string, unknown>;
  for (const k of Object.keys(plain)) t.same(expected(iso[k]), expected(plain[k]), `${k}: ${String(expected(plain[k]))}`);
  t.equal(iso.a, '2026-11-28T23:45:01.264Z', 'a time of these years is a string already (the pool in UTC)');
  t.equal(iso.b, '2026-11-28T23:01:19.000Z', 'microseconds cut to milliseconds, as toISOString does');
  t.equal(iso.d, Infinity, 'infinity stays what the parser makes of it');
  t.type(iso.h, Date, 'a date column is untouched');
});
