// Webhook signatures (lib/domain/webhook-signature.ts): the Standard Webhooks signature verifies with the
// standard's reference library (npm `standardwebhooks`) for generated secrets, secrets chosen by
// the customer ("raw"), and secrets generated before the standard was adopted (URL-safe base64,
// after converting them to standard base64); the original X-Fleet-Signature is unchanged.
import t from 'tap';
import fc from 'fast-check';
import { createHmac, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { newWebhookSecret, secretProblem, signatureHeaders, signStandard, signWebhook, standardKey, verifyStandard, verifyWebhook } from '../../lib/domain/webhook-signature.js';

const now = () => Math.floor(Date.now() / 1000);

t.test('generated secrets: whsec_ + standard base64 of 32 bytes, accepted by the library as they are', async (t) => {
  const s = newWebhookSecret();
  t.match(s, /^whsec_[A-Za-z0-9+/]{43}=$/);
  t.equal(standardKey(s).length, 32);
  t.equal(secretProblem(s), null);
  t.not(newWebhookSecret(), s);
});

t.test('the library verifies our signature: any id, body and secret (property)', async (t) => {
  const body = fc.json({ maxDepth: 3 }); // the library parses the body once it verified
  const id = fc.stringMatching(/^[A-Za-z0-9._-]{1,80}$/);
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 16, maxLength: 64 }), id, body, (key, msgId, payload) => {
      const secret = `whsec_${Buffer.from(key).toString('base64')}`;
      const ts = now();
      const h = signatureHeaders(secret, msgId, ts, payload);
      new Webhook(secret).verify(payload, h); // throws when it does not verify
      return verifyStandard(secret, msgId, String(ts), payload, h['webhook-signature']!) && verifyWebhook(secret, ts, payload, h['X-Fleet-Signature']!);
    }),
    { numRuns: 300 },
  );
  // Secrets chosen at creation (ASCII) are raw keys.
  fc.assert(
    fc.property(fc.stringMatching(/^[!-~]{16,64}$/).filter((x) => !x.startsWith('whsec_')), id, body, (secret, msgId, payload) => {
      const h = signatureHeaders(secret, msgId, now(), payload);
      new Webhook(secret, { format: 'raw' }).verify(payload, h);
      return true;
    }),
    { numRuns: 300 },
  );
  t.pass('verified');
});

t.test('secrets generated before the standard (URL-safe base64) verify once converted to standard base64', async (t) => {
  for (let i = 0; i < 20; i++) {
    const old = `whsec_${randomBytes(32).toString('base64url')}`;
    const converted = `whsec_${Buffer.from(old.slice(6), 'base64url').toString('base64')}`;
    const ts = now();
    const h = signatureHeaders(old, 'evt.1', ts, '{"x":1}');
    t.doesNotThrow(() => new Webhook(converted).verify('{"x":1}', h));
    t.ok(verifyWebhook(old, ts, '{"x":1}', h['X-Fleet-Signature']!), 'the original signature is unchanged');
  }
});

t.test('the signature is HMAC-SHA256 over "id.timestamp.body", base64, v1; verification refuses tampering and old timestamps', async (t) => {
  const secret = 'whsec_' + Buffer.alloc(24, 7).toString('base64');
  const ts = now();
  const want = 'v1,' + createHmac('sha256', Buffer.alloc(24, 7)).update(`e1.${ts}.body`).digest('base64');
  t.equal(signStandard(secret, 'e1', ts, 'body'), want);
  t.equal(signWebhook('k', 5, 'b'), 'sha256=' + createHmac('sha256', 'k').update('5.b').digest('hex'));
  t.ok(verifyStandard(secret, 'e1', String(ts), 'body', `v1,bogus ${want}`), 'one of several signatures');
  t.notOk(verifyStandard(secret, 'e2', String(ts), 'body', want), 'another id');
  t.notOk(verifyStandard(secret, 'e1', String(ts), 'body!', want), 'another body');
  t.notOk(verifyStandard(secret, 'e1', String(ts - 600), 'body', signStandard(secret, 'e1', ts - 600, 'body')), 'ten minutes old');
  t.throws(() => new Webhook(secret).verify('body', { 'webhook-id': 'e1', 'webhook-timestamp': String(ts), 'webhook-signature': signStandard(secret, 'e1', ts, 'bodx') }));
});

t.test('a chosen secret that claims the whsec_ form must be standard base64 of 16 bytes or more', async (t) => {
  t.equal(secretProblem('a-secret-of-my-own-choosing'), null);
  t.equal(secretProblem('whsec_' + Buffer.alloc(16).toString('base64')), null);
  t.match(secretProblem('whsec_' + Buffer.alloc(8).toString('base64')), /Standard Webhooks/);
  t.match(secretProblem('whsec_this-is-not-base64!!'), /Standard Webhooks/);
  t.match(secretProblem('whsec_' + randomBytes(32).toString('base64url').replace(/[^_-]/, '_')), /Standard Webhooks/, 'URL-safe alphabet');
});
