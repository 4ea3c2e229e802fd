// E-mail notifications, the pure pieces: which change is which kind (lib/domain/notifications.ts)
// and the digest's text (workers/mail-digest.ts): counts, the cap with "and N more", both
// languages, the unsubscribe link in the text and in List-Unsubscribe, a Message-ID per set of changes.
import t from 'tap';
import { mailKind } from '../../lib/domain/notifications.js';
import { digestMessage } from '../../workers/mail-digest.js';
import type { Digest, DigestLine } from '../../lib/store/mail-notifications.js';

t.test('kinds', async (t) => {
  t.equal(mailKind({ from: 'green', to: 'red' }), 'red');
  t.equal(mailKind({ from: 'grey', to: 'red' }), 'red');
  t.equal(mailKind({ from: 'green', to: 'yellow' }), 'yellow');
  t.equal(mailKind({ from: 'red', to: 'green' }), 'green');
  t.equal(mailKind({ from: 'yellow', to: 'green' }), 'green');
  t.equal(mailKind({ from: 'grey', to: 'green' }), null, "a new instance's first colour is no notification");
  t.equal(mailKind({ from: 'grey', to: 'yellow' }), null);
  t.equal(mailKind({ from: 'green', to: 'grey' }), null);
});

const line = (i: number, kind: DigestLine['kind'], from: string, to: string): DigestLine => ({
  event_id: `i${i}.2`,
  kind,
  machine: `m-${i}`,
  software: 'agent',
  from_light: from,
  to_light: to,
  event_at: new Date(Date.UTC(2026, 10, 27, 15, 0, i)),
});
const digest = (lang: 'de' | 'en', lines: DigestLine[]): Digest => ({
  userId: 'u',
  customerId: 'c',
  email: 'ops@example.com',
  customer: 'Acme',
  slug: 'acme',
  lang,
  kinds: ['red', 'green'],
  token: 'tok_abc-123',
  lines,
});
const o = { maxLines: 3, dashboardUrl: 'https://fleet.example.com' };

t.test('the digest: counts, the cap, the links, both languages', async (t) => {
  const lines = [line(1, 'red', 'green', 'red'), line(2, 'red', 'yellow', 'red'), line(3, 'green', 'red', 'green'), line(4, 'red', 'green', 'red'), line(5, 'red', 'green', 'red')];
  const en = digestMessage(digest('en', lines), o);
  t.equal(en.to, 'ops@example.com');
  t.equal(en.subject, 'Acme: 4 turned red, 1 recovered');
  t.match(en.text, '5 changes: 4 turned red, 1 recovered');
  t.equal((en.text.match(/^m-\d \/ agent/gm) ?? []).length, 3, 'three lines listed');
  t.match(en.text, /^m-1 \/ agent {2}green -> red {2}27 Nov 2026, 15:00:01 UTC$/m);
  t.match(en.text, '… and 2 more');
  t.match(en.text, 'https://fleet.example.com/?light=red');
  t.match(en.text, 'Unsubscribe:\nhttps://fleet.example.com/unsubscribe?token=tok_abc-123');
  t.equal(en.headers!['List-Unsubscribe'], '<https://fleet.example.com/unsubscribe?token=tok_abc-123>');
  t.match(en.messageId, /^<digest\.[0-9a-f]{32}@fleet\.example\.com>$/);
  const de = digestMessage(digest('de', lines), o);
  t.equal(de.subject, 'Acme: 4 auf Rot, 1 wieder grün');
  t.match(de.text, '5 Änderungen: 4 auf Rot, 1 wieder grün');
  t.match(de.text, /^m-3 \/ agent {2}rot -> grün {2}/m);
  t.match(de.text, '… und 2 weitere');
  t.match(de.text, 'Abbestellen:\nhttps://fleet.example.com/unsubscribe?token=tok_abc-123');
  t.equal(de.messageId, en.messageId, 'the same changes: the same Message-ID');
  t.not(digestMessage(digest('en', lines.slice(1)), o).messageId, en.messageId, 'other changes: another');
  const one = digestMessage(digest('en', [lines[0]!]), o);
  t.match(one.text, '1 change: 1 turned red');
  t.notMatch(one.text, 'more');
});
