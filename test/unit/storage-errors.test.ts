// What a failed write means (lib/storage-errors.ts): unavailable, data or unknown, with a reason
// that names the class and code, never the server's text.
import t from 'tap';
import { ClickHouseError } from '@clickhouse/client';
import { classifyFailure, asUnavailable, DependencyUnavailableError } from '../../lib/storage-errors.js';
import { DecodeError } from '../../lib/messages.js';

const pg = (code: string, message = 'secret text with another customer in it') => Object.assign(new Error(message), { code });
const ch = (code: string) => new ClickHouseError({ message: 'Cannot parse input: expected \\t before: 00000000-neighbour-row', code, type: undefined });

t.test('servers that are away: unavailable', async (t) => {
  for (const e of [pg('08006'), pg('57P01'), pg('53300'), pg('40P01'), ch('241'), ch('252'), Object.assign(new Error('x'), { code: 'ECONNREFUSED' }), new Error('Connection terminated unexpectedly'), new DependencyUnavailableError('redis', 'gone')]) {
    t.equal(classifyFailure(e).kind, 'unavailable', (e as Error).message);
  }
});

t.test('values the server refuses: data, with a reason safe to show', async (t) => {
  const r = classifyFailure(pg('22003'));
  t.same(r, { kind: 'data', reason: 'Postgres refused a value (22003 numeric_value_out_of_range)' });
  t.same(classifyFailure(ch('27')), { kind: 'data', reason: 'ClickHouse refused a value (27 CANNOT_PARSE_INPUT_ASSERTION_FAILED)' });
  t.equal(classifyFailure(new DecodeError('x')).kind, 'data');
  for (const e of [pg('23503'), pg('22P05'), ch('6'), ch('321')]) t.notMatch(classifyFailure(e).reason, /secret|neighbour/, 'no server text');
});

t.test('anything else: unknown', async (t) => {
  t.same(classifyFailure(pg('42703')), { kind: 'unknown', reason: 'Postgres error 42703' });
  t.same(classifyFailure(new TypeError('x is undefined')), { kind: 'unknown', reason: 'internal error (TypeError)' });
  t.equal(classifyFailure(ch('60')).kind, 'unknown');
});

t.test('adapters name the dependency that is away and leave other errors alone', async (t) => {
  const away = asUnavailable('postgres', pg('08006'));
  t.ok(away instanceof DependencyUnavailableError);
  t.equal((away as DependencyUnavailableError).dependency, 'postgres');
  const data = pg('22003');
  t.equal(asUnavailable('postgres', data), data);
});
