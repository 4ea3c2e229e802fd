// Identifiers (lib/contract/ids.ts): slugs, UUIDs, tokens, ids derived from names.
import t from 'tap';
import { uuidFromName, isSlug, isUuid, newApiToken, hashToken } from '../../lib/contract/ids.js';

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
