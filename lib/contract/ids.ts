// Identifiers: slugs in paths, UUIDs for everything the service creates, API tokens.
import { createHash, randomBytes, randomFillSync } from 'node:crypto';

/** Customer, machine and software slugs: spec 2.1, 1 to 64 characters (docs/docs/decisions.md). */
export const SLUG_RE = /^[a-z0-9][a-z0-9-]{0,63}$/;
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export const isSlug = (s: string): boolean => SLUG_RE.test(s);
export const isUuid = (s: string): boolean => UUID_RE.test(s);

// Random v4 UUIDs for report ids, one per report at the gateway's ingest rate. Node's randomUUID
// returns the right value, but as a concatenation of 16 hex pairs and 4 dashes: a tree of about 15
// heap objects per id, and a report's id stays alive until JetStream acknowledges it, so the
// gateway's young-generation collections copied every node of every id in flight (most of a
// 100-entry batch's live heap; bench/README.md "Batch ingest ≥ 5 × single"). This one writes the
// text into a buffer and reads it back as one string of 36 characters. The randomness is the same
// as randomUUID's: crypto.randomFillSync, drawn 4 KiB at a time.
const UUID_POOL = Buffer.alloc(16 * 256);
let uuidPoolAt = UUID_POOL.length;
const UUID_TEXT = Buffer.from('00000000-0000-4000-8000-000000000000', 'latin1');
const HEX_DIGITS = Buffer.from('0123456789abcdef', 'latin1');
// Where each of the 16 bytes' two digits go in the text (the dashes stay in place).
const UUID_AT = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/** A random (version 4) UUID, as randomUUID makes it, in one flat string. */
export function randomId(): string {
  if (uuidPoolAt === UUID_POOL.length) {
    randomFillSync(UUID_POOL);
    uuidPoolAt = 0;
  }
  const o = uuidPoolAt;
  uuidPoolAt += 16;
  UUID_POOL[o + 6] = (UUID_POOL[o + 6]! & 0x0f) | 0x40; // version 4
  UUID_POOL[o + 8] = (UUID_POOL[o + 8]! & 0x3f) | 0x80; // variant 10
  for (let k = 0; k < 16; k++) {
    const b = UUID_POOL[o + k]!;
    UUID_TEXT[UUID_AT[k]!] = HEX_DIGITS[b >> 4]!;
    UUID_TEXT[UUID_AT[k]! + 1] = HEX_DIGITS[b & 15]!;
  }
  return UUID_TEXT.toString('latin1', 0, 36);
}

/** API tokens: a recognisable prefix and 32 random bytes. Only the SHA-256 is stored. */
export function newApiToken(): string {
  return `fk_${randomBytes(32).toString('base64url')}`;
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** A UUID derived from a name (same input, same id): used for Idempotency-Key report ids. */
export function uuidFromName(...parts: string[]): string {
  const h = createHash('sha256').update(parts.join('\u0000')).digest('hex');
  // Shape it as a version-8 (custom) UUID.
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * The report id an Idempotency-Key stands for. Keys are scoped as Stripe scopes them: per customer
 * and endpoint (report kind, machine, software), so the same key sent for another machine, software
 * or kind is another report (docs/api.md "Idempotency-Key").
 */
export function idempotentReportId(customerId: string, kind: string, machine: string, software: string, key: string): string {
  return uuidFromName(customerId, kind, machine, software, key);
}
