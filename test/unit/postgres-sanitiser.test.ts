// The one Postgres sanitiser (lib/infra/postgres.ts): NUL and lone surrogates, in values and keys.
import t from 'tap';
import { pgJson, pgText } from '../../lib/infra/postgres.js';

t.test('Postgres-safe text keeps everything but NUL and lone surrogates', async (t) => {
  t.equal(pgText('a\u0000b'), 'ab');
  t.equal(pgText('\ud800x'), '\ufffdx');
  t.same(JSON.parse(pgJson({ a: 'x\u0000y', 'k\u0000': ['\udc00'] })), { a: 'xy', k: ['\ufffd'] });
  t.same(JSON.parse(pgJson({ a: '\\u0000 stays', b: '\u0000' })), { a: '\\u0000 stays', b: '' }, 'an escaped backslash is not a NUL');
  t.notMatch(pgJson({ a: 'x\u0000y' }), /\\u0000/);
  t.equal(pgJson({ plain: 'text' }), '{"plain":"text"}');
});

t.test('JSON for jsonb: NULs and lone surrogates cannot reach Postgres, in values or keys (one sanitiser, lib/infra/postgres.ts)', async (t) => {
  t.equal(pgJson({ a: 'x' }), '{"a":"x"}');
  t.equal(pgJson({ a: 'x\u0000y', b: '\ud800' }), '{"a":"xy","b":"\ufffd"}');
  t.equal(pgJson({ 'k\u0000': { 'n\ud800': 1 } }), '{"k":{"n\ufffd":1}}');
});
