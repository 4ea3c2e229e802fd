// What an API token may be limited to at creation (lib/store/customers.ts): scopes, a machine binding (a slug
// or a `*`/`?` pattern, ingest scope only) and an expiry in the future; and the CLI's --expires.
import t from 'tap';
import { tokenLimitsRefusal, parseExpiry, TokenError } from '../../lib/store/customers.js';

const now = Date.parse('2030-01-01T00:00:00Z');

t.test('scopes, machine binding and expiry', async (t) => {
  t.equal(tokenLimitsRefusal(['ingest'], {}, now), null);
  t.equal(tokenLimitsRefusal(['ingest', 'read'], {}, now), null);
  t.match(tokenLimitsRefusal(['write' as never], {}, now), /unknown scope write/);
  t.match(tokenLimitsRefusal([], {}, now), /at least one scope/);
  for (const m of ['m1', 'rack1-*', 'line-?-pc', '*']) t.equal(tokenLimitsRefusal(['ingest'], { machine: m }, now), null, `binding ${m}`);
  for (const m of ['M1', 'rack 1', 'a_b', '', 'x'.repeat(129), 'a/b']) t.match(tokenLimitsRefusal(['ingest'], { machine: m }, now), /machine slug or a pattern/, `binding ${JSON.stringify(m)} refused`);
  t.match(tokenLimitsRefusal(['ingest', 'read'], { machine: 'm1' }, now), /machine-bound token has the ingest scope only/);
  t.match(tokenLimitsRefusal(['read'], { machine: 'm1' }, now), /ingest scope only/);
  t.equal(tokenLimitsRefusal(['ingest'], { expiresAt: new Date(now + 1) }, now), null);
  t.match(tokenLimitsRefusal(['ingest'], { expiresAt: new Date(now) }, now), /must lie in the future/);
  t.match(tokenLimitsRefusal(['ingest'], { expiresAt: new Date(NaN) }, now), /not a valid time/);
});

t.test('--expires: a time, a duration from now, or never', async (t) => {
  t.equal(parseExpiry('never', now), null);
  t.equal(parseExpiry('90d', now)!.toISOString(), '2030-04-01T00:00:00.000Z');
  t.equal(parseExpiry('12h', now)!.getTime(), now + 12 * 3600_000);
  t.equal(parseExpiry('30m', now)!.getTime(), now + 30 * 60_000);
  t.equal(parseExpiry('2w', now)!.getTime(), now + 14 * 86_400_000);
  t.equal(parseExpiry('1y', now)!.getTime(), now + 365 * 86_400_000);
  t.equal(parseExpiry('2031-06-30T12:00:00Z', now)!.toISOString(), '2031-06-30T12:00:00.000Z');
  t.throws(() => parseExpiry('soon', now), TokenError);
  t.throws(() => parseExpiry('10s', now), /neither an ISO 8601 time/, 'seconds are too short to mean');
});
