// Identifiers: slugs in paths, UUIDs for everything the service creates, API tokens.
import { createHash, randomBytes } from 'node:crypto';

/** Customer, machine and software slugs: spec 2.1, 1 to 64 characters (docs/docs/decisions.md). */
export const SLUG_RE = /^[a-z0-9][a-z0-9-]{0,63}$/;
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export const isSlug = (s: string): boolean => SLUG_RE.test(s);
export const isUuid = (s: string): boolean => UUID_RE.test(s);

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
