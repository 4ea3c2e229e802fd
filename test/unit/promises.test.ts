// test/README.md's table "Promises and the tests that prove them": every row names at least one
// test, and every test it names exists, so a promise cannot keep pointing at a file that was
// renamed or removed.
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../../deploy/service-process.js';

const readme = readFileSync(join(ROOT, 'test', 'README.md'), 'utf8');
const section = readme.split(/^## Promises and the tests that prove them$/m)[1]?.split(/^## /m)[0] ?? '';
const rows = section.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| promise'));

t.test('the table is there and has rows', async (t) => {
  t.ok(rows.length >= 20, `${rows.length} promises`);
});

t.test('every promise names a test that exists', async (t) => {
  for (const row of rows) {
    const cells = row.split('|').map((c) => c.trim());
    const promise = cells[1]!;
    const named = [...cells[2]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    t.ok(named.length > 0, `"${promise}" names a test`);
    for (const f of named) {
      const path = f.startsWith('.') ? join(ROOT, f) : join(ROOT, 'test', f);
      t.ok(existsSync(path), `${f} (for "${promise}") exists`);
    }
  }
});
