// TabSeparated rows for ClickHouse (lib/infra/clickhouse.ts).
import t from 'tap';
import { chTime, tsvValue, tsvRow } from '../../lib/infra/clickhouse.js';

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
