// Webhook signatures. Each POST carries two signatures of the same body:
//
// Standard Webhooks (https://www.standardwebhooks.com; receivers can use its libraries):
//   webhook-id: <event id>                 the same on every retry of one event
//   webhook-timestamp: <unix seconds>
//   webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<raw body>")>
// where key = the base64-decoded part after `whsec_` for a secret that starts with `whsec_` (every
// generated secret), else the secret's UTF-8 bytes (a secret chosen at creation; the libraries call
// this the "raw" format).
//
// The original scheme, kept for one release so receivers can move over (docs/api.md, "Webhooks"):
//   X-Fleet-Timestamp: <unix seconds>
//   X-Fleet-Signature: sha256=<hex HMAC-SHA256(secret as UTF-8, "<timestamp>.<raw body>")>
//
// A receiver recomputes the HMAC, compares in constant time, and refuses timestamps too far from
// its clock (replays).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'X-Fleet-Signature';
export const TIMESTAMP_HEADER = 'X-Fleet-Timestamp';
export const STANDARD_ID_HEADER = 'webhook-id';
export const STANDARD_TIMESTAMP_HEADER = 'webhook-timestamp';
export const STANDARD_SIGNATURE_HEADER = 'webhook-signature';

const PREFIX = 'whsec_';

/** The original signature (X-Fleet-Signature). */
export function signWebhook(secret: string, timestamp: number, body: string): string {
  return 'sha256=' + createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}

export function verifyWebhook(secret: string, timestamp: string | number, body: string, signature: string): boolean {
  const want = Buffer.from(signWebhook(secret, Number(timestamp), body));
  const got = Buffer.from(signature);
  return want.length === got.length && timingSafeEqual(want, got);
}

/**
 * The HMAC key of the Standard Webhooks signature. Node's base64 decoder takes both alphabets, so
 * secrets generated before the standard was adopted (`whsec_` + URL-safe base64) give the same
 * bytes a receiver gets from their standard-base64 form.
 */
export function standardKey(secret: string): Buffer {
  return secret.startsWith(PREFIX) ? Buffer.from(secret.slice(PREFIX.length), 'base64') : Buffer.from(secret, 'utf8');
}

/** `v1,<base64 HMAC-SHA256>` over `<id>.<timestamp>.<body>`. */
export function signStandard(secret: string, id: string, timestamp: number, body: string): string {
  return 'v1,' + createHmac('sha256', standardKey(secret)).update(`${id}.${timestamp}.${body}`).digest('base64');
}

/** Checks a `webhook-signature` header (space-separated `v1,…` signatures) and the timestamp's age. */
export function verifyStandard(secret: string, id: string, timestamp: string, body: string, header: string, toleranceS = 300): boolean {
  const ts = Number(timestamp);
  if (!Number.isInteger(ts) || Math.abs(Date.now() / 1000 - ts) > toleranceS) return false;
  const want = Buffer.from(signStandard(secret, id, ts, body));
  return header.split(' ').some((sig) => {
    const got = Buffer.from(sig);
    return got.length === want.length && timingSafeEqual(got, want);
  });
}

/** Every signature header of one delivery. */
export function signatureHeaders(secret: string, id: string, timestamp: number, body: string): Record<string, string> {
  return {
    [STANDARD_ID_HEADER]: id,
    [STANDARD_TIMESTAMP_HEADER]: String(timestamp),
    [STANDARD_SIGNATURE_HEADER]: signStandard(secret, id, timestamp, body),
    [TIMESTAMP_HEADER]: String(timestamp),
    [SIGNATURE_HEADER]: signWebhook(secret, timestamp, body),
  };
}

/** A new secret in the Standard Webhooks form: `whsec_` + standard base64 of 32 random bytes. */
export function newWebhookSecret(): string {
  return `${PREFIX}${randomBytes(32).toString('base64')}`;
}

/**
 * Why a secret chosen by the customer cannot be used, or null. One starting with `whsec_` claims
 * the Standard Webhooks form, so the rest must be standard base64 of at least 16 bytes (receivers'
 * libraries decode it); any other secret is used as it is.
 */
export function secretProblem(secret: string): string | null {
  if (!secret.startsWith(PREFIX)) return null;
  const b64 = secret.slice(PREFIX.length);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0 || Buffer.from(b64, 'base64').length < 16) {
    return 'a secret starting with whsec_ must continue with standard base64 of at least 16 bytes (the Standard Webhooks form); or choose one without that prefix';
  }
  return null;
}
