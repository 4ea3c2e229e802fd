// Maintenance windows' pure part (lib/domain/maintenance.ts): the occurrences of one-off and
// recurring windows, with the daylight-saving rules of docs/api.md "Maintenance windows" (a start in
// a spring-forward gap starts when the gap ends, one in a fall-back hour at the earlier instant,
// the duration is elapsed time), windows across midnight and across a change, the validation of a
// definition, and fast-check properties over zones with 30-minute, 1-hour and 2-hour changes.
import t from 'tap';
import fc from 'fast-check';
import { DateTime } from 'luxon';
import {
  WEEKDAYS,
  canonicalTimeZone,
  currentOrNext,
  globToLike,
  globToRegExp,
  maxRecurringMinutes,
  occurrencesBetween,
  windowTimesProblem,
  type Weekday,
  type WindowTimes,
} from '../../lib/domain/maintenance.js';

const D = (s: string) => new Date(s);
const iso = (o: { startsAt: Date; endsAt: Date }[]) => o.map((x) => [x.startsAt.toISOString(), x.endsAt.toISOString()]);
const daily = [...WEEKDAYS];
const rec = (o: Partial<Extract<WindowTimes, { kind: 'recurring' }>> & { timeZone: string; startTime: string; durationMinutes: number }): WindowTimes => ({
  kind: 'recurring',
  days: daily,
  validFrom: null,
  validUntil: null,
  ...o,
});

t.test('Europe/Berlin, spring forward (29 March 2026, 02:00 CET -> 03:00 CEST): 02:30 starts at 03:00, the end of the gap', async (t) => {
  const w = rec({ timeZone: 'Europe/Berlin', startTime: '02:30', durationMinutes: 60 });
  t.same(iso(occurrencesBetween(w, D('2026-03-28T00:00:00Z'), D('2026-03-31T00:00:00Z'))), [
    ['2026-03-28T01:30:00.000Z', '2026-03-28T02:30:00.000Z'], // 02:30 CET
    ['2026-03-29T01:00:00.000Z', '2026-03-29T02:00:00.000Z'], // 03:00 CEST: the first instant after the gap
    ['2026-03-30T00:30:00.000Z', '2026-03-30T01:30:00.000Z'], // 02:30 CEST
  ]);
  // A start at 02:00 (the first minute of the gap) also starts at 03:00 CEST.
  t.same(iso(occurrencesBetween(rec({ timeZone: 'Europe/Berlin', startTime: '02:00', durationMinutes: 30 }), D('2026-03-29T00:00:00Z'), D('2026-03-29T12:00:00Z'))), [
    ['2026-03-29T01:00:00.000Z', '2026-03-29T01:30:00.000Z'],
  ]);
  // 03:00 exists: the same instant as the gap's end, no doubt.
  t.same(iso(occurrencesBetween(rec({ timeZone: 'Europe/Berlin', startTime: '03:00', durationMinutes: 30 }), D('2026-03-29T00:00:00Z'), D('2026-03-29T12:00:00Z'))), [
    ['2026-03-29T01:00:00.000Z', '2026-03-29T01:30:00.000Z'],
  ]);
});

t.test('Europe/Berlin, fall back (25 October 2026, 03:00 CEST -> 02:00 CET): 02:30 happens twice, the window starts at the earlier', async (t) => {
  const w = rec({ timeZone: 'Europe/Berlin', startTime: '02:30', durationMinutes: 60 });
  t.same(iso(occurrencesBetween(w, D('2026-10-24T00:00:00Z'), D('2026-10-27T00:00:00Z'))), [
    ['2026-10-24T00:30:00.000Z', '2026-10-24T01:30:00.000Z'], // 02:30 CEST
    ['2026-10-25T00:30:00.000Z', '2026-10-25T01:30:00.000Z'], // 02:30 CEST, not 02:30 CET (01:30Z)
    ['2026-10-26T01:30:00.000Z', '2026-10-26T02:30:00.000Z'], // 02:30 CET
  ]);
});

t.test('America/New_York, spring forward (8 March 2026, 02:00 EST -> 03:00 EDT) and fall back (1 November 2026, 02:00 EDT -> 01:00 EST)', async (t) => {
  const gap = rec({ timeZone: 'America/New_York', startTime: '02:30', durationMinutes: 45 });
  t.same(iso(occurrencesBetween(gap, D('2026-03-07T00:00:00Z'), D('2026-03-10T00:00:00Z'))), [
    ['2026-03-07T07:30:00.000Z', '2026-03-07T08:15:00.000Z'], // 02:30 EST
    ['2026-03-08T07:00:00.000Z', '2026-03-08T07:45:00.000Z'], // 03:00 EDT
    ['2026-03-09T06:30:00.000Z', '2026-03-09T07:15:00.000Z'], // 02:30 EDT
  ]);
  const twice = rec({ timeZone: 'America/New_York', startTime: '01:30', durationMinutes: 45 });
  t.same(iso(occurrencesBetween(twice, D('2026-10-31T00:00:00Z'), D('2026-11-03T00:00:00Z'))), [
    ['2026-10-31T05:30:00.000Z', '2026-10-31T06:15:00.000Z'], // 01:30 EDT
    ['2026-11-01T05:30:00.000Z', '2026-11-01T06:15:00.000Z'], // 01:30 EDT, the earlier of the two
    ['2026-11-02T06:30:00.000Z', '2026-11-02T07:15:00.000Z'], // 01:30 EST
  ]);
});

t.test('America/Santiago, spring forward at midnight (6 September 2020, 00:00 -04 -> 01:00 -03): 00:00 starts at 01:00, on its own day', async (t) => {
  // Found by the property below: the gap begins on the day before, at 23:59:59.
  const w = rec({ timeZone: 'America/Santiago', startTime: '00:00', durationMinutes: 1 });
  t.same(iso(occurrencesBetween(w, D('2020-09-05T00:00:00Z'), D('2020-09-07T12:00:00Z'))), [
    ['2020-09-05T04:00:00.000Z', '2020-09-05T04:01:00.000Z'], // 00:00 -04
    ['2020-09-06T04:00:00.000Z', '2020-09-06T04:01:00.000Z'], // 01:00 -03, the end of the gap
    ['2020-09-07T03:00:00.000Z', '2020-09-07T03:01:00.000Z'], // 00:00 -03
  ]);
});

t.test('across midnight: an occurrence that started the local day before is found from the next day', async (t) => {
  const w = rec({ timeZone: 'Europe/Berlin', startTime: '23:00', durationMinutes: 180, days: ['fri'] });
  // Friday 12 June 2026 23:00 CEST (21:00Z) to Saturday 02:00 CEST; asked from Saturday 00:30 local.
  t.same(iso(occurrencesBetween(w, D('2026-06-12T22:30:00Z'), D('2026-06-13T22:00:00Z'))), [['2026-06-12T21:00:00.000Z', '2026-06-13T00:00:00.000Z']]);
  t.same(iso(occurrencesBetween(w, D('2026-06-13T00:00:00Z'), D('2026-06-13T22:00:00Z'))), [], 'ended at 00:00Z: [from, to) no longer overlaps');
  t.same(occurrencesBetween(w, D('2026-06-15T00:00:00Z'), D('2026-06-18T00:00:00Z')), [], 'none Monday to Wednesday');
});

t.test('across a daylight-saving change the duration is elapsed time', async (t) => {
  // Saturday 22:00 CET, 8 hours: ends 05:00Z = 07:00 CEST (the clock lost an hour in between).
  const spring = occurrencesBetween(rec({ timeZone: 'Europe/Berlin', startTime: '22:00', durationMinutes: 480, days: ['sat'] }), D('2026-03-28T00:00:00Z'), D('2026-03-30T00:00:00Z'));
  t.same(iso(spring), [['2026-03-28T21:00:00.000Z', '2026-03-29T05:00:00.000Z']]);
  t.equal(DateTime.fromJSDate(spring[0]!.endsAt, { zone: 'Europe/Berlin' }).toFormat('HH:mm'), '07:00');
  // Saturday 22:00 CEST, 8 hours: ends 04:00Z = 05:00 CET (the clock went back an hour).
  const fall = occurrencesBetween(rec({ timeZone: 'Europe/Berlin', startTime: '22:00', durationMinutes: 480, days: ['sat'] }), D('2026-10-24T00:00:00Z'), D('2026-10-26T00:00:00Z'));
  t.same(iso(fall), [['2026-10-24T20:00:00.000Z', '2026-10-25T04:00:00.000Z']]);
  t.equal(DateTime.fromJSDate(fall[0]!.endsAt, { zone: 'Europe/Berlin' }).toFormat('HH:mm'), '05:00');
  // New York, Saturday 23:00 EST, 4 hours: ends 08:00Z = 04:00 EDT.
  t.same(iso(occurrencesBetween(rec({ timeZone: 'America/New_York', startTime: '23:00', durationMinutes: 240, days: ['sat'] }), D('2026-03-07T00:00:00Z'), D('2026-03-09T00:00:00Z'))), [
    ['2026-03-08T04:00:00.000Z', '2026-03-08T08:00:00.000Z'],
  ]);
});

t.test('weekdays are local weekdays; valid_from and valid_until bound the starts', async (t) => {
  // 00:30 in Tokyo on Mondays is Sunday 15:30Z.
  const w = rec({ timeZone: 'Asia/Tokyo', startTime: '00:30', durationMinutes: 60, days: ['mon'] });
  t.same(iso(occurrencesBetween(w, D('2026-06-01T00:00:00Z'), D('2026-06-15T00:00:00Z'))), [
    ['2026-06-07T15:30:00.000Z', '2026-06-07T16:30:00.000Z'],
    ['2026-06-14T15:30:00.000Z', '2026-06-14T16:30:00.000Z'],
  ]);
  const bounded = { ...w, validFrom: D('2026-06-07T15:30:00Z'), validUntil: D('2026-06-14T15:30:00Z') } as WindowTimes;
  t.same(iso(occurrencesBetween(bounded, D('2026-06-01T00:00:00Z'), D('2026-06-30T00:00:00Z'))), [['2026-06-07T15:30:00.000Z', '2026-06-07T16:30:00.000Z']], 'from inclusive, until exclusive');
});

t.test('one-off windows; the current or next occurrence', async (t) => {
  const once: WindowTimes = { kind: 'once', startsAt: D('2026-06-01T10:00:00Z'), endsAt: D('2026-06-01T12:00:00Z') };
  t.same(iso(occurrencesBetween(once, D('2026-06-01T11:00:00Z'), D('2026-06-02T00:00:00Z'))), [['2026-06-01T10:00:00.000Z', '2026-06-01T12:00:00.000Z']]);
  t.same(occurrencesBetween(once, D('2026-06-01T12:00:00Z'), D('2026-06-02T00:00:00Z')), [], 'the end is not in the window');
  t.same(occurrencesBetween(once, D('2026-05-01T00:00:00Z'), D('2026-06-01T10:00:00Z')), [], 'nor is anything before the start');
  t.same(iso([currentOrNext(once, D('2026-06-01T11:00:00Z'))!]), [['2026-06-01T10:00:00.000Z', '2026-06-01T12:00:00.000Z']], 'in progress');
  t.equal(currentOrNext(once, D('2026-06-01T12:00:00Z')), null, 'over');
  const w = rec({ timeZone: 'UTC', startTime: '03:00', durationMinutes: 60, days: ['wed'], validFrom: D('2026-09-01T00:00:00Z') });
  t.same(iso([currentOrNext(w, D('2026-06-01T00:00:00Z'))!]), [['2026-09-02T03:00:00.000Z', '2026-09-02T04:00:00.000Z']], 'the first from valid_from');
  t.same(iso([currentOrNext(w, D('2026-09-02T03:30:00Z'))!]), [['2026-09-02T03:00:00.000Z', '2026-09-02T04:00:00.000Z']], 'the one in progress');
  t.same(iso([currentOrNext(w, D('2026-09-02T04:00:00Z'))!]), [['2026-09-09T03:00:00.000Z', '2026-09-09T04:00:00.000Z']], 'then the next');
  t.equal(currentOrNext({ ...w, validUntil: D('2026-09-03T00:00:00Z') } as WindowTimes, D('2026-09-02T04:00:00Z')), null, 'none after valid_until');
});

t.test('validation: time zone, start time, weekdays, duration bounds, order of instants', async (t) => {
  t.equal(canonicalTimeZone('europe/berlin'), 'Europe/Berlin');
  t.equal(canonicalTimeZone('Mars/Olympus'), null);
  t.equal(canonicalTimeZone(''), null);
  const ok = rec({ timeZone: 'Europe/Berlin', startTime: '02:30', durationMinutes: 60 });
  t.equal(windowTimesProblem(ok), null);
  t.match(windowTimesProblem({ ...ok, timeZone: 'Mars/Olympus' } as WindowTimes), /unknown time zone "Mars\/Olympus"/);
  t.match(windowTimesProblem({ ...ok, startTime: '24:00' } as WindowTimes), /start_time must be HH:MM/);
  t.match(windowTimesProblem({ ...ok, startTime: '9:00' } as WindowTimes), /start_time/);
  t.match(windowTimesProblem({ ...ok, days: [] } as WindowTimes), /at least one weekday/);
  t.match(windowTimesProblem({ ...ok, days: ['mon', 'mon'] } as WindowTimes), /named twice/);
  t.match(windowTimesProblem({ ...ok, durationMinutes: 0 } as WindowTimes), /at least 1/);
  t.equal(maxRecurringMinutes(daily), 22 * 60, 'daily: 22 hours');
  t.equal(maxRecurringMinutes(['mon', 'thu']), 3 * 24 * 60 - 120, 'Monday and Thursday: 3 days less 2 hours');
  t.equal(maxRecurringMinutes(['sun', 'mon']), 22 * 60, 'Sunday and Monday are a day apart around the week');
  t.equal(maxRecurringMinutes(['wed']), 7 * 24 * 60 - 120, 'one weekday: 7 days less 2 hours');
  t.equal(windowTimesProblem({ ...ok, durationMinutes: 22 * 60 } as WindowTimes), null);
  t.match(windowTimesProblem({ ...ok, durationMinutes: 22 * 60 + 1 } as WindowTimes), /at most 1320/);
  t.match(windowTimesProblem({ ...ok, days: ['wed'], durationMinutes: 7 * 1440 - 119 } as WindowTimes), /at most 9960/);
  t.match(windowTimesProblem({ ...ok, validFrom: D('2026-02-01T00:00:00Z'), validUntil: D('2026-01-01T00:00:00Z') } as WindowTimes), /valid_until must be after valid_from/);
  t.match(windowTimesProblem({ kind: 'once', startsAt: D('2026-01-01T00:00:00Z'), endsAt: D('2026-01-01T00:00:00Z') }), /ends_at must be after starts_at/);
  t.match(windowTimesProblem({ kind: 'once', startsAt: D('2026-01-01T00:00:00Z'), endsAt: D('2026-02-01T00:00:01Z') }), /at most 31 days/);
});

t.test('software patterns: * matches any run, everything else itself', async (t) => {
  t.equal(globToLike('agent-*'), 'agent-%');
  t.equal(globToLike('a_b%c\\'), 'a\\_b\\%c\\\\');
  const re = globToRegExp('db-*-backup');
  t.ok(re.test('db-eu-backup'));
  t.ok(re.test('db--backup'));
  t.notOk(re.test('db-eu-backup2'));
  t.notOk(globToRegExp('a.c').test('abc'), 'a dot is a dot');
});

// ---- properties ----------------------------------------------------------------------------

/** Zones with changes of 1 hour (both hemispheres), 30 minutes (Lord Howe), 2 hours (Troll), at midnight (Santiago), and none. */
const ZONES = ['Europe/Berlin', 'America/New_York', 'Australia/Sydney', 'Australia/Lord_Howe', 'Antarctica/Troll', 'America/Santiago', 'Pacific/Chatham', 'Asia/Kolkata', 'UTC'];
const dayNames = fc.subarray([...WEEKDAYS], { minLength: 1 }) as fc.Arbitrary<Weekday[]>;
const recurring = dayNames.chain((days) =>
  fc.record({
    kind: fc.constant('recurring' as const),
    timeZone: fc.constantFrom(...ZONES),
    startTime: fc.tuple(fc.integer({ min: 0, max: 23 }), fc.constantFrom(0, 1, 15, 29, 30, 45, 59)).map(([h, m]) => `${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`),
    durationMinutes: fc.integer({ min: 1, max: maxRecurringMinutes(days) }),
    days: fc.constant(days),
    validFrom: fc.constant(null),
    validUntil: fc.constant(null),
  }),
);
// Instants from 2020 to 2035, biased to the days around the changes of March, April, October and November.
const instant = fc.oneof(
  fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2035, 0, 1) }),
  fc.tuple(fc.integer({ min: 2020, max: 2034 }), fc.constantFrom(2, 3, 8, 9, 9, 10), fc.integer({ min: 0, max: 30 * 86_400_000 })).map(([y, m, ms]) => Date.UTC(y, m, 1) + ms),
);

t.test('property: sorted, never overlapping, each exactly the duration, each overlapping the range, each at the local start time on an allowed weekday unless in a gap', async (t) => {
  fc.assert(
    fc.property(recurring, instant, fc.integer({ min: 1, max: 20 * 86_400_000 }), (w, from, span) => {
      if (w.kind !== 'recurring') return;
      const occ = occurrencesBetween(w, new Date(from), new Date(from + span));
      const [h, m] = w.startTime.split(':').map(Number) as [number, number];
      for (let i = 0; i < occ.length; i++) {
        const o = occ[i]!;
        const s = o.startsAt.getTime();
        if (o.endsAt.getTime() - s !== w.durationMinutes * 60_000) throw new Error(`duration of ${o.startsAt.toISOString()}`);
        if (!(s < from + span && o.endsAt.getTime() > from)) throw new Error(`${o.startsAt.toISOString()} outside the range`);
        if (i > 0 && s < occ[i - 1]!.endsAt.getTime()) throw new Error(`${o.startsAt.toISOString()} overlaps the one before`);
        if (i > 0 && s <= occ[i - 1]!.startsAt.getTime()) throw new Error('not sorted');
        const local = DateTime.fromMillis(s, { zone: w.timeZone });
        if (!w.days.includes(WEEKDAYS[local.weekday - 1]!)) throw new Error(`${local.toISO()} on a weekday not chosen`);
        if (local.hour === h && local.minute === m) {
          // At the start time: the earliest instant with that local date and time (a fall-back hour repeats it).
          for (const back of [30, 60, 120]) {
            const earlier = DateTime.fromMillis(s - back * 60_000, { zone: w.timeZone });
            if (earlier.toFormat('yyyy-MM-dd HH:mm') === local.toFormat('yyyy-MM-dd HH:mm')) throw new Error(`${local.toISO()}: the later of two`);
          }
        } else {
          // In a gap: the clock jumped at this instant, from before the start time to after it.
          const before = DateTime.fromMillis(s - 1000, { zone: w.timeZone });
          if (!(before.offset < local.offset)) throw new Error(`${local.toISO()} is not at the local start time ${w.startTime} nor at a change`);
          // Wall-clock minutes of the occurrence's local day: a gap at midnight (Santiago) begins on
          // the day before, at a negative minute.
          const want = h * 60 + m;
          const wall = (d: DateTime) => d.hour * 60 + d.minute - (d.toISODate()! < local.toISODate()! ? 1440 : 0);
          if (!(wall(before) < want && wall(local) > want)) throw new Error(`${local.toISO()}: the gap does not skip ${w.startTime}`);
        }
      }
    }),
    { numRuns: 3000 },
  );
  t.pass('held for 3000 windows and ranges');
});

t.test('property: a range split in two gives the same occurrences (the horizon may be extended piece by piece)', async (t) => {
  fc.assert(
    fc.property(recurring, instant, fc.integer({ min: 1, max: 10 * 86_400_000 }), fc.integer({ min: 1, max: 10 * 86_400_000 }), (w, a, ab, bc) => {
      const key = (o: { startsAt: Date; endsAt: Date }) => `${o.startsAt.toISOString()}/${o.endsAt.toISOString()}`;
      const whole = occurrencesBetween(w, new Date(a), new Date(a + ab + bc)).map(key);
      const parts = [...new Set([...occurrencesBetween(w, new Date(a), new Date(a + ab)), ...occurrencesBetween(w, new Date(a + ab), new Date(a + ab + bc))].map(key))].sort();
      if (JSON.stringify(whole) !== JSON.stringify(parts)) throw new Error(`${JSON.stringify(whole)} != ${JSON.stringify(parts)}`);
    }),
    { numRuns: 1000 },
  );
  t.pass('held for 1000 windows and splits');
});
