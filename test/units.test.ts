// Small pure pieces: message encoding, ids, rate limiting, path matching, the tap summary.
import t from 'tap';
import { encodeReport, encodeBatch, decodeBatch, DecodeError } from '../lib/messages.js';
import { uuidFromName, isSlug, isUuid, newApiToken, hashToken } from '../lib/ids.js';
import { RateLimiter } from '../gateway/rate-limiter.js';
import { pathRegex, routes, checkHandlers } from '../lib/routes.js';
import { countTap } from '../deploy/test-runner.js';
import { chTime } from '../workers/reports.js';
import { pgJson, pgText } from '../lib/db/postgres.js';
import { tsvValue, tsvRow } from '../lib/db/clickhouse.js';

t.test('a batch round-trips, the raw body untouched', async (t) => {
  const raw = Buffer.from('{"items":[{"code":1,"severity":0,"message":"é \\" \\n"}]}');
  const r = encodeReport({ id: 'a', k: 'diagnostics', c: 'c', cs: 'cs', m: 'm', s: 's', t: 't', at: 5, ik: 'key "x"' }, raw);
  const b = decodeBatch(encodeBatch([r, encodeReport({ id: 'b', k: 'heartbeat', c: 'c', cs: 'cs', m: 'm', s: 's', t: 't', at: 6 }, null)]));
  t.equal(b.r.length, 2);
  t.same(b.r[0]!.b, JSON.parse(raw.toString()));
  t.equal(b.r[0]!.ik, 'key "x"');
  t.same(b.r[1]!.b, {});
  t.throws(() => decodeBatch(Buffer.from('nope')), DecodeError);
  t.throws(() => decodeBatch(Buffer.from('{"v":2,"r":[]}')), DecodeError);
});

t.test('ids', async (t) => {
  t.equal(uuidFromName('a', 'b'), uuidFromName('a', 'b'));
  t.not(uuidFromName('a', 'b'), uuidFromName('ab', ''));
  t.ok(isUuid(uuidFromName('x')));
  t.ok(isSlug('a'));
  t.ok(isSlug('a-b-0'));
  t.notOk(isSlug('-a'));
  t.notOk(isSlug('A'));
  t.notOk(isSlug('a'.repeat(65)));
  const tok = newApiToken();
  t.not(tok, newApiToken());
  t.equal(hashToken(tok).length, 64);
});

t.test('rate limiter: burst, then the rate', async (t) => {
  const rl = new RateLimiter(10, 3);
  t.same([rl.take('k', 0), rl.take('k', 0), rl.take('k', 0), rl.take('k', 0)], [true, true, true, false]);
  t.equal(rl.take('k', 100), true, 'one token after 100 ms at 10/s');
  t.equal(rl.take('k', 100), false);
  t.equal(rl.take('other', 100), true, 'keys are independent');
});

t.test('route table: paths match, handlers must match the table', async (t) => {
  const re = pathRegex('/api/ingest/{customer}/{machine}/{software}/heartbeat');
  t.ok(re.test('/api/ingest/a/b/c/heartbeat'));
  t.notOk(re.test('/api/ingest/a/b/heartbeat'));
  t.notOk(re.test('/api/ingest/a/b/c/heartbeatx'));
  const ids = new Set(routes.map((r) => `${r.service} ${r.method} ${r.path}`));
  t.equal(ids.size, routes.length, 'no route twice');
  t.throws(() => checkHandlers('gateway', {}), /missing/);
});

t.test('Postgres-safe text keeps everything but NUL and lone surrogates', async (t) => {
  t.equal(pgText('a\u0000b'), 'ab');
  t.equal(pgText('\ud800x'), '\ufffdx');
  t.same(JSON.parse(pgJson({ a: 'x\u0000y', 'k\u0000': ['\udc00'] })), { a: 'xy', k: ['\ufffd'] });
  t.same(JSON.parse(pgJson({ a: '\\u0000 stays', b: '\u0000' })), { a: '\\u0000 stays', b: '' }, 'an escaped backslash is not a NUL');
  t.notMatch(pgJson({ a: 'x\u0000y' }), /\\u0000/);
  t.equal(pgJson({ plain: 'text' }), '{"plain":"text"}');
});

t.test('tap summary counting', async (t) => {
  const out = [
    '# Subtest: a.test.js',
    '    ok 1 - one',
    '    not ok 2 - two',
    '    1..2',
    'not ok 1 - a.test.js',
    '# Subtest: b.test.js',
    '    ok 1 - three',
    'ok 2 - b.test.js',
    'not ok 3 - c.test.js # crashed before any test',
  ].join('\n');
  t.same(countTap(out), { passed: 2, failed: 2 });
});

t.test('TabSeparated values: escapes, NULL, arrays', async (t) => {
  t.equal(tsvValue('plain'), 'plain');
  t.equal(tsvValue('a\tb\nc\\d\re\u0000'), 'a\\tb\\nc\\\\d\\re\\0');
  t.equal(tsvValue('tab\tagain\tand again'), 'tab\\tagain\\tand again', 'every occurrence, on every call');
  t.equal(tsvValue('no escape after an escaped one'), 'no escape after an escaped one');
  t.equal(tsvValue(null), '\\N');
  t.equal(tsvValue(42), '42');
  t.equal(tsvValue(["it's", 'a\tb', 'c\\']), "['it\\'s','a\\tb','c\\\\']");
  t.equal(tsvValue([]), '[]');
  t.equal(tsvRow(['a', 1, null]), 'a\t1\t\\N');
  t.equal(chTime(Date.UTC(2026, 0, 2, 3, 4, 5, 678)), '2026-01-02 03:04:05');
  t.equal(chTime(Date.UTC(2026, 0, 2, 3, 4, 6)), '2026-01-02 03:04:06');
});
