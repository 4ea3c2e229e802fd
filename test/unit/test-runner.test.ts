// The test runner's summary count (deploy/test-runner.ts).
import t from 'tap';
import { countTap } from '../../deploy/test-runner.js';

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
