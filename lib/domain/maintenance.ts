// Maintenance windows (docs/api.md "Maintenance windows"): when a window's occurrences fall, as a
// pure function of its definition. lib/store/maintenance.ts writes what this computes into
// Postgres (`maintenance_occurrences`), so that SQL can ask "is this instance in maintenance now".
//
// A window is one-off (two UTC instants) or recurring: a local start time in an IANA time zone, on
// chosen weekdays (all seven: daily), lasting a duration, optionally only from / until two
// instants. Time-zone rules come from luxon (the tz database through Intl); the rules for local
// times that a change of daylight-saving time skips or repeats are ours, and fixed here:
//
//   - a local start time that does not exist that day (spring forward: Berlin 02:30 on the last
//     Sunday of March) starts at the first instant after the gap (03:00 CEST);
//   - one that exists twice (fall back: Berlin 02:30 on the last Sunday of October) starts at the
//     earlier instant (02:30 CEST, not 02:30 CET);
//   - the duration is elapsed time: a 3-hour window from 01:00 on a spring-forward night ends at
//     05:00 local (three real hours), not 04:00.
//
// Not supported (say so in the docs): monthly or yearly rules, "every other week", the n-th weekday
// of a month, exceptions to a rule, RRULE text. A recurring window lasts at most the shortest
// distance between two of its weekdays (7 days for one weekday) less 2 hours (`maxRecurringMinutes`), so
// that two occurrences of one window never overlap, whatever daylight-saving change lies between
// them (no zone moves its clocks by more than 2 hours at once).
import { DateTime, IANAZone } from 'luxon';

export const WEEKDAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
export type Weekday = (typeof WEEKDAYS)[number];

/** How far occurrences are kept in Postgres on either side of now (ms): the seam's SQL never looks further. */
export const OCCURRENCE_HORIZON_MS = 8 * 86_400_000;
/** Longest one-off window (minutes): 31 days. */
export const MAX_ONE_OFF_MINUTES = 31 * 24 * 60;
/** The largest change of a zone's UTC offset at one instant that the bound allows for (minutes). */
const LARGEST_SHIFT_MINUTES = 120;

export interface Recurrence {
  /** IANA time zone, canonical (`Europe/Berlin`). */
  timeZone: string;
  /** Local start time, `HH:MM`. */
  startTime: string;
  durationMinutes: number;
  /** Weekdays it starts on (local), in week order, no repeats. */
  days: Weekday[];
  /** Occurrences starting before this are left out (null: none). */
  validFrom: Date | null;
  /** Occurrences starting at or after this are left out (null: none). */
  validUntil: Date | null;
}

export type WindowTimes = { kind: 'once'; startsAt: Date; endsAt: Date } | ({ kind: 'recurring' } & Recurrence);

export interface Occurrence {
  startsAt: Date;
  endsAt: Date;
}

/** The canonical name of a time zone Intl knows (`europe/berlin` -> `Europe/Berlin`), or null. */
export function canonicalTimeZone(name: string): string | null {
  if (!IANAZone.isValidZone(name)) return null;
  try {
    return new Intl.DateTimeFormat('en-US', { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    return null;
  }
}

const START_TIME_RE = /^([01][0-9]|2[0-3]):([0-5][0-9])$/;

/**
 * The longest duration (minutes) a recurring window on these weekdays may have: the shortest
 * distance between two of them (around the week: 7 days for one weekday) in days, less 2 hours.
 * Daily: 22 hours; weekly: 6 days 22 hours.
 */
export function maxRecurringMinutes(days: readonly Weekday[]): number {
  const idx = [...new Set(days.map((d) => WEEKDAYS.indexOf(d)))].sort((a, b) => a - b);
  let gap = 7;
  for (let i = 0; i < idx.length; i++) gap = Math.min(gap, (idx[(i + 1) % idx.length]! - idx[i]! + 7) % 7 || 7);
  return gap * 24 * 60 - LARGEST_SHIFT_MINUTES;
}

/** What is wrong with a window's times (one sentence for a 400's detail), or null. */
export function windowTimesProblem(w: WindowTimes): string | null {
  if (w.kind === 'once') {
    const ms = w.endsAt.getTime() - w.startsAt.getTime();
    if (!(ms > 0)) return 'ends_at must be after starts_at';
    if (ms > MAX_ONE_OFF_MINUTES * 60_000) return `a one-off window lasts at most ${MAX_ONE_OFF_MINUTES / 1440} days`;
    return null;
  }
  if (canonicalTimeZone(w.timeZone) === null) return `time_zone: unknown time zone ${JSON.stringify(w.timeZone)} (an IANA name such as Europe/Berlin)`;
  if (!START_TIME_RE.test(w.startTime)) return 'start_time must be HH:MM (00:00 to 23:59)';
  if (w.days.length === 0) return 'days: at least one weekday';
  if (new Set(w.days).size !== w.days.length) return 'days: a weekday named twice';
  if (!Number.isInteger(w.durationMinutes) || w.durationMinutes < 1) return 'duration_minutes must be a whole number of at least 1';
  const max = maxRecurringMinutes(w.days);
  if (w.durationMinutes > max) {
    return `duration_minutes: at most ${max} for these weekdays (the shortest distance between two of them, 7 days for one, less 2 hours, so that two occurrences never overlap)`;
  }
  if (w.validFrom && w.validUntil && !(w.validUntil > w.validFrom)) return 'valid_until must be after valid_from';
  return null;
}

/**
 * The instant at which the local wall time `wall` (milliseconds of a UTC date carrying the local
 * fields) starts in `zone`: the earlier of two when a fall-back change repeats it, the end of the
 * gap when a spring-forward change skips it.
 */
export function localToInstant(zone: IANAZone, wall: number): number {
  // Every offset the zone has within a day of the wall time: at most two (no zone changes twice a day).
  const offsets = new Set<number>();
  for (const probe of [wall - 86_400_000, wall, wall + 86_400_000]) offsets.add(zone.offset(probe));
  for (const o of [...offsets]) offsets.add(zone.offset(wall - o * 60_000));
  const valid = [...offsets].map((o) => wall - o * 60_000).filter((x) => zone.offset(x) * 60_000 + x === wall);
  if (valid.length > 0) return Math.min(...valid);
  // In a gap: the first instant whose local time is at or past `wall`, i.e. the change itself.
  // Between lo (local time before the gap) and hi (after it) the local time only moves forward.
  const sorted = [...offsets].sort((a, b) => a - b);
  let lo = wall - sorted[sorted.length - 1]! * 60_000; // local time lo + offset(lo) < wall
  let hi = wall - sorted[0]! * 60_000; // local time >= wall
  const local = (x: number) => x + zone.offset(x) * 60_000;
  if (local(lo) >= wall) return lo;
  while (hi - lo > 1000) {
    const mid = lo + Math.floor((hi - lo) / 2000) * 1000;
    if (local(mid) >= wall) hi = mid;
    else lo = mid;
  }
  return hi;
}

/**
 * The occurrences of a window that overlap [from, to) (start < to and end > from), by start time.
 * A recurring window's occurrences start on its weekdays at its local start time (or at the end
 * of a gap), within valid_from / valid_until (by their start).
 */
export function occurrencesBetween(w: WindowTimes, from: Date, to: Date): Occurrence[] {
  const f = from.getTime();
  const t = to.getTime();
  if (w.kind === 'once') return w.startsAt.getTime() < t && w.endsAt.getTime() > f ? [{ startsAt: w.startsAt, endsAt: w.endsAt }] : [];
  const zone = IANAZone.create(w.timeZone);
  if (!zone.isValid) return [];
  const m = START_TIME_RE.exec(w.startTime);
  if (!m) return [];
  const hour = Number(m[1]);
  const minute = Number(m[2]);
  const durationMs = w.durationMinutes * 60_000;
  const allowed = new Set(w.days.map((d) => WEEKDAYS.indexOf(d) + 1)); // ISO weekdays, as luxon counts them
  const vf = w.validFrom?.getTime() ?? -Infinity;
  const vu = w.validUntil?.getTime() ?? Infinity;
  // Local dates from the one of (from - duration) less a day, to the one of `to` plus a day: every
  // occurrence that can overlap lies within (offsets differ from UTC by less than a day).
  let day = DateTime.fromMillis(f - durationMs, { zone }).startOf('day').minus({ days: 1 });
  const last = DateTime.fromMillis(t, { zone }).startOf('day').plus({ days: 1 });
  const out: Occurrence[] = [];
  for (; day <= last; day = day.plus({ days: 1 })) {
    if (!allowed.has(day.weekday)) continue;
    const start = localToInstant(zone, Date.UTC(day.year, day.month - 1, day.day, hour, minute));
    const end = start + durationMs;
    if (start < t && end > f && start >= vf && start < vu) out.push({ startsAt: new Date(start), endsAt: new Date(end) });
  }
  return out.sort((a, b) => a.startsAt.getTime() - b.startsAt.getTime());
}

/**
 * The window's occurrence in progress at `now`, else its next one; null when it has none left.
 * A recurring window valid from later is looked for from then on.
 */
export function currentOrNext(w: WindowTimes, now: Date): Occurrence | null {
  if (w.kind === 'once') return w.endsAt > now ? { startsAt: w.startsAt, endsAt: w.endsAt } : null;
  // From valid_from when that is later (nothing can be in progress then); an occurrence starts at
  // least once every 7 days, so 8 days always hold the next one.
  const from = w.validFrom && w.validFrom > now ? w.validFrom : now;
  return occurrencesBetween(w, from, new Date(from.getTime() + OCCURRENCE_HORIZON_MS))[0] ?? null;
}

export { globToLike, globToRegExp } from './glob.js';
