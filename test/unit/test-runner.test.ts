// The test runner's summary count (deploy/test-runner.ts).
import t from 'tap';
import { countTap } from '../../deploy/test-runner.js';

t.test('tap summary counting', async (t) => {
  const out = [
    '# Subtest: a.test.js',
    '    # Subtest: one',
    '        ok 1 - fine',
    '    ok 1 - one # time=12.5ms',
    '    # Subtest: two',
    '        ok 1 - fine',
    '        not ok 2 - the count',
    '        not ok 3 - the sum',
    '    not ok 2 - two # time=3ms',
    '    1..2',
    'not ok 1 - a.test.js',
    '# Subtest: b.test.js',
    '    ok 1 - three',
    'ok 2 - b.test.js',
    'not ok 3 - c.test.js # crashed before any test',
  ].join('\n');
  t.same(countTap(out), {
    passed: 2,
    failed: 2,
    failures: ['a.test.js: two: the count', 'c.test.js # crashed before any test'],
  });
});
