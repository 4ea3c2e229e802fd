// TabSeparated rows for ClickHouse (lib/infra/clickhouse.ts).
import t from 'tap';
import { chTime, tsvValue, tsvRow, TsvRows } from '../../lib/infra/clickhouse.js';

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

// A worker's rows are joined into flat pieces of 256 as they come (TsvRows): the text must be the
// rows, in order, each ended by a newline, whatever the count around a piece's edge.
t.test('TsvRows: the same text as the rows joined, at every count around the pieces of 256', async (t) => {
  for (const n of [0, 1, 255, 256, 257, 511, 512, 513, 2000]) {
    const rows = Array.from({ length: n }, (_, i) => tsvRow([`r${i}`, i, i % 3 ? null : 'a\tb']));
    const b = new TsvRows();
    for (const r of rows) b.push(r);
    t.equal(b.length, n, `${n} rows: counted`);
    t.equal(b.text(), n === 0 ? '' : rows.join('\n') + '\n', `${n} rows: the same text`);
  }
  const b = new TsvRows();
  b.push('only');
  t.equal(b.text(), 'only\n');
  t.equal(b.text(), 'only\n', 'text() can be read again');
});
