// The agent-clock window of docs/api.md ("Agent clocks") at its exact edges, with the numbers the
// docs state written out here (30 days before the receive time, 1 day after), not taken from the
// code: a change of the defaults or of a comparison (< against <=) fails this file.
import t from 'tap';
import { agentTime } from '../../workers/reports.js';
import { loadConfig } from '../../lib/infra/config.js';

const DAY = 86_400_000;
const received = Date.parse('2030-06-15T12:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

t.test('the defaults are the documented 30 days back and 1 day ahead', async (t) => {
  const cfg = loadConfig({});
  t.equal(cfg.tsPlausiblePastS, 30 * 86_400);
  t.equal(cfg.tsPlausibleFutureS, 86_400);
});

t.test('both edges belong to the window; one millisecond beyond is skew', async (t) => {
  const cfg = loadConfig({});
  const w = { pastMs: cfg.tsPlausiblePastS * 1000, futureMs: cfg.tsPlausibleFutureS * 1000 };
  const cases: [string, number, boolean][] = [
    ['the receive time itself', received, true],
    ['exactly 30 days before', received - 30 * DAY, true],
    ['30 days and 1 ms before', received - 30 * DAY - 1, false],
    ['exactly 1 day after', received + DAY, true],
    ['1 day and 1 ms after', received + DAY + 1, false],
  ];
  for (const [name, ms, inside] of cases) {
    const got = agentTime(iso(ms), received, w);
    t.same(got, inside ? { ms, skew: false } : { ms: null, skew: true }, name);
  }
  // A time zone other than Z names the same instant.
  t.same(agentTime('2030-05-16T14:00:00.000+02:00', received, w), { ms: received - 30 * DAY, skew: false }, 'the same edge written with +02:00');
  t.same(agentTime(undefined, received, w), { ms: null, skew: false }, 'no ts: nothing to flag');
  t.same(agentTime('0000-01-01T00:00:00Z', received, w), { ms: null, skew: true }, 'year 0000');
  t.same(agentTime('9999-12-31T23:59:59Z', received, w), { ms: null, skew: true }, 'year 9999');
});

t.test('the window follows TS_PLAUSIBLE_PAST_S and TS_PLAUSIBLE_FUTURE_S', async (t) => {
  const cfg = loadConfig({ TS_PLAUSIBLE_PAST_S: '60', TS_PLAUSIBLE_FUTURE_S: '0' });
  const w = { pastMs: cfg.tsPlausiblePastS * 1000, futureMs: cfg.tsPlausibleFutureS * 1000 };
  t.same(agentTime(iso(received - 60_000), received, w), { ms: received - 60_000, skew: false });
  t.same(agentTime(iso(received - 60_001), received, w), { ms: null, skew: true });
  t.same(agentTime(iso(received + 1), received, w), { ms: null, skew: true }, 'no future at all');
});
