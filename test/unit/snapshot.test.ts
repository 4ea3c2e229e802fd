// Typed snapshot leaves (lib/domain/snapshot.ts): checked and resolved.
import t from 'tap';
import { checkSnapshot, resolveSnapshot, formatBytes, formatDuration } from '../../lib/domain/snapshot.js';

t.test('typed snapshot leaves: known types checked, unknown and untyped left alone', async (t) => {
  const good = {
    cpu: { value: 42.5, type: 'percent', label: 'CPU' },
    mem: { value: 1536, type: 'bytes' },
    up: { value: 3725, type: 'duration_s', hint: 'since boot' },
    at: { value: '2026-07-01T10:00:00+02:00', type: 'timestamp' },
    mode: { value: 'active', type: 'enum', options: ['active', 'passive'] },
    n: { value: 3, type: 'integer', unit: 'files' },
    ok: { value: true, type: 'boolean' },
    name: { value: 'x', type: 'string' },
    future: { value: { any: 'thing' }, type: 'gauge-v2', extra: 1 },
    plain: { value: 5 },
    typeOnly: { type: 'disk' },
    nested: [{ t: { value: 1.5, type: 'number', unit: 'V' } }],
    legacy: 'untyped',
  };
  t.same(checkSnapshot(good), []);
  const bad = {
    a: { value: '42', type: 'percent' },
    b: { value: -1, type: 'bytes' },
    c: { value: 1.5, type: 'integer' },
    d: { value: 'yesterday', type: 'timestamp' },
    e: { value: 'x', type: 'enum', options: ['y'] },
    f: { value: 1, type: 'number', unit: 5 },
    'g/h': [{ value: null, type: 'boolean' }],
  };
  t.same(
    checkSnapshot(bad).map((e) => e.path).sort(),
    ['/snapshot/a/value', '/snapshot/b/value', '/snapshot/c/value', '/snapshot/d/value', '/snapshot/e/value', '/snapshot/f/unit', '/snapshot/g~1h/0/value'].sort(),
  );
  const r = resolveSnapshot(good) as Record<string, unknown>;
  t.same(r.cpu, { value: 42.5, type: 'percent', unit: '%', label: 'CPU', hint: null, display: '42.5 %' });
  t.same(r.mem, { value: 1536, type: 'bytes', unit: 'B', label: null, hint: null, display: '1.5 KiB' });
  t.same(r.up, { value: 3725, type: 'duration_s', unit: 's', label: null, hint: 'since boot', display: '1 h 2 min' });
  t.match(r.at, { display: '2026-07-01T08:00:00.000Z' });
  t.match(r.mode, { value: 'active', options: ['active', 'passive'], display: 'active' });
  t.match(r.n, { unit: 'files', display: '3 files' });
  t.same(r.future, good.future, 'unknown type kept as sent');
  t.same(r.plain, { value: 5 }, 'no type: unchanged');
  t.same(r.typeOnly, { type: 'disk' });
  t.match(r.nested, [{ t: { value: 1.5, unit: 'V', display: '1.5 V' } }]);
  t.equal(r.legacy, 'untyped');
  t.same(resolveSnapshot({ a: 1, b: [1, 'x', null], c: { d: false } }), { a: 1, b: [1, 'x', null], c: { d: false } }, 'a pre-5.10 tree is unchanged');
  t.equal(formatBytes(0), '0 B');
  t.equal(formatBytes(5 * 1024 ** 3), '5 GiB');
  t.equal(formatDuration(59.5), '59.5 s');
  t.equal(formatDuration(90061), '1 d 1 h');
});
