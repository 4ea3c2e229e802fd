// Identifiers (lib/contract/ids.ts): slugs, UUIDs, tokens, ids derived from names.
import t from 'tap';
import { uuidFromName, isSlug, isUuid, newApiToken, hashToken, randomId } from '../../lib/contract/ids.js';

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

// randomId writes the text of a v4 UUID into one buffer from a pool of random bytes refilled every
// 256 ids: what could go wrong is the format, a fixed or stuck bit, and the pool's refill (an id
// repeated, or bytes of the previous fill reused).
t.test('randomId: version-4 UUIDs, every random bit used, none repeated across pool refills', async (t) => {
  const n = 100_000; // 390 refills of the pool
  const seen = new Set<string>();
  // Per hex position: the OR and AND of the digits drawn, to see each random bit take both values.
  const or = new Array<number>(36).fill(0);
  const and = new Array<number>(36).fill(15);
  let bad = '';
  for (let i = 0; i < n; i++) {
    const id = randomId();
    if (!/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id)) bad ||= id;
    seen.add(id);
    for (let k = 0; k < 36; k++) {
      if (id[k] === '-') continue;
      const v = parseInt(id[k]!, 16);
      or[k] |= v;
      and[k] &= v;
    }
  }
  t.equal(bad, '', 'every id has the v4 form (version 4, variant 10)');
  t.equal(seen.size, n, 'no id repeated');
  const fixed = (k: number) => (k === 14 ? 15 : k === 19 ? 12 : 0); // version digit all fixed; variant digit's two top bits
  const stuck = [];
  for (let k = 0; k < 36; k++) {
    if ([8, 13, 18, 23].includes(k)) continue;
    const free = 15 & ~fixed(k);
    if ((or[k]! & free) !== free || (and[k]! & free) !== 0) stuck.push(k);
  }
  t.same(stuck, [], 'every random bit took both values');
  t.equal(randomId().length, 36);
  t.ok(isUuid(randomId()));
});
