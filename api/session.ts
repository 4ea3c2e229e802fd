// Dashboard sessions: a JWT (jose, HS256) with sub, email, is_system_admin, the active customer
// `cid`, the session id `sid` and exp. Sent as `Authorization: Bearer <jwt>` or in the HttpOnly,
// SameSite=Lax cookie `fleet_session` that the dashboard uses.
//
// Each login is a row in Postgres `sessions` (below); the JWT names it by `sid`. The signature
// proves the claims; the row says whether the session still holds: logout, a password change or
// reset, the removal of a membership and a system administrator's "sign out everywhere" revoke it,
// and the principal query joins the row (api/auth.ts; its answer kept until a change notice,
// api/principal-cache.ts), so a revoked session is refused by the api replica that revoked it at
// its next request and by every other replica once Postgres's notice arrives (milliseconds). A JWT without `sid` (issued before sessions had
// rows) is refused.
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { randomBytes } from 'node:crypto';
import type { FastifyReply } from 'fastify';

export const SESSION_COOKIE = 'fleet_session';

export interface SessionClaims {
  sub: string;
  email: string;
  is_system_admin: boolean;
  cid: string | null;
  /** The session row (sessions.id). */
  sid: string;
}

export class Sessions {
  private readonly key: Uint8Array;
  readonly ephemeral: boolean;

  constructor(
    secret: string,
    readonly ttlS: number,
  ) {
    this.ephemeral = secret === '';
    this.key = new TextEncoder().encode(secret || randomBytes(32).toString('hex'));
  }

  /** A JWT for the session `c.sid`, valid until `expiresAt` (the session row's expiry). */
  async issue(c: SessionClaims, expiresAt: Date): Promise<{ token: string; expiresAt: Date }> {
    const token = await new SignJWT({ email: c.email, is_system_admin: c.is_system_admin, cid: c.cid, sid: c.sid })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(c.sub)
      .setIssuedAt()
      .setExpirationTime(Math.floor(expiresAt.getTime() / 1000))
      .sign(this.key);
    return { token, expiresAt };
  }

  /** The claims, or null for a token that is not ours, tampered with or expired. */
  async verify(token: string): Promise<SessionClaims | null> {
    try {
      const { payload } = await jwtVerify(token, this.key, { algorithms: ['HS256'] });
      if (typeof payload.sub !== 'string' || typeof payload.sid !== 'string' || !UUID_RE.test(payload.sid)) return null;
      return {
        sub: payload.sub,
        email: String(payload.email ?? ''),
        is_system_admin: payload.is_system_admin === true,
        cid: typeof payload.cid === 'string' ? payload.cid : null,
        sid: payload.sid,
      };
    } catch (e) {
      if (e instanceof joseErrors.JOSEError) return null;
      throw e;
    }
  }
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// The rows themselves (create, revoke) are the store's: lib/store/sessions.ts.
export { createSession, revokeSession, revokeUserSessions, type RevokeReason } from '../lib/store/sessions.js';

export function setSessionCookie(reply: FastifyReply, token: string, ttlS: number, secure: boolean): void {
  reply.setCookie(SESSION_COOKIE, token, { path: '/', httpOnly: true, sameSite: 'lax', secure, maxAge: ttlS });
}
