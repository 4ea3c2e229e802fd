// Webhook signatures. Each POST carries
//   X-Fleet-Timestamp: <unix seconds>
//   X-Fleet-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>
// A receiver recomputes the HMAC over the timestamp and the raw body with the webhook's secret,
// compares in constant time, and refuses timestamps too far from its clock (replays).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'x-fleet-signature';
export const TIMESTAMP_HEADER = 'x-fleet-timestamp';

export function signWebhook(secret: string, timestamp: number, body: string): string {
  return 'sha256=' + createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}

export function verifyWebhook(secret: string, timestamp: string | number, body: string, signature: string): boolean {
  const want = Buffer.from(signWebhook(secret, Number(timestamp), body));
  const got = Buffer.from(signature);
  return want.length === got.length && timingSafeEqual(want, got);
}

export function newWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64url')}`;
}
