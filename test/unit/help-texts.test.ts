// Help uploads (workers/help-texts.ts): the newest text per key.
import t from 'tap';
import { helpRows } from '../../workers/help-texts.js';
import type { Report } from '../../lib/contract/messages.js';

t.test('help uploads: the newest text per key, later items and newer reports win', async (t) => {
  const rep = (id: string, receivedAt: number, items: unknown[]): Report => ({ id, kind: 'help', customerId: 'c', customer: 'cs', machine: 'm', software: 'sw', tokenId: 't', receivedAt, body: { items } });
  const rows = helpRows([
    rep('r2', 20, [{ code: 1, lang: 'de', text: 'new' }]),
    rep('r1', 10, [{ code: 1, lang: 'de', text: 'old' }, { code: 1, lang: 'en', text: 'a' }, { code: 1, lang: 'en', text: 'b' }]),
  ]);
  t.same(rows.map((r) => [r.code, r.lang, r.text]), [[1, 'de', 'new'], [1, 'en', 'b']]);
});
