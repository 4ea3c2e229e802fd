// Dashboard sessions: a JWT (jose, HS256) with sub, email, is_system_admin, the active customer
// `cid`, the session id `sid` and exp. Sent as `Authorization: Bearer <jwt>` or in the HttpOnly,
// SameSite=Lax cookie `fleet_session` that the dashboard uses.
//
// Each login is a row in Postgres `sessions` (below); the JWT names it by `sid`. The signature
// proves the claims; the row says whether the session still holds: logout, a password change or
// reset, the removal of a membership and a system administrator's "sign out everywhere" revoke it,
// and the principal query of every request joins the row (api/auth.ts), so a revoked session is
// refused by every api replica at its next request. A JWT without `sid` (issued before sessions had
// rows) is refused.
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { randomBytes } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import type { Pool } from '../lib/db/postgres.js';

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

/** Why a session ended (sessions.revoked_why; the log and docs name them). */
export type RevokeReason = 'logout' | 'password_changed' | 'password_reset' | 'membership_removed' | 'signed_out_by_admin' | 'signed_out_everywhere';

/** A new session row for a login; its expiry is the JWT's. */
export async function createSession(pool: Pool, userId: string, ttlS: number, meta: { userAgent?: string; address?: string } = {}): Promise<{ id: string; expiresAt: Date }> {
  const r = await pool.query<{ id: string; expires_at: Date }>(
    `INSERT INTO sessions (user_id, expires_at, user_agent, address) VALUES ($1, now() + make_interval(secs => $2), $3, $4) RETURNING id, expires_at`,
    [userId, ttlS, meta.userAgent?.slice(0, 300) ?? null, meta.address ?? null],
  );
  // Expired rows are of no use to anyone: each login clears a few (no job needed).
  await pool.query(`DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE expires_at < now() - interval '1 day' LIMIT 100)`);
  return { id: r.rows[0]!.id, expiresAt: r.rows[0]!.expires_at };
}

/** Ends one session; true when it was open. */
export async function revokeSession(pool: Pool, sid: string, why: RevokeReason): Promise<boolean> {
  const r = await pool.query(`UPDATE sessions SET revoked_at = now(), revoked_why = $2 WHERE id = $1 AND revoked_at IS NULL`, [sid, why]);
  return (r.rowCount ?? 0) > 0;
}

/** Ends every open session of a user (but `except`, the caller's own); returns how many. */
export async function revokeUserSessions(pool: Pool, userId: string, why: RevokeReason, except: string | null = null): Promise<number> {
  const r = await pool.query(
    `UPDATE sessions SET revoked_at = now(), revoked_why = $2
      WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > now() AND ($3::uuid IS NULL OR id <> $3::uuid)`,
    [userId, why, except],
  );
  return r.rowCount ?? 0;
}

export function setSessionCookie(reply: FastifyReply, token: string, ttlS: number, secure: boolean): void {
  reply.setCookie(SESSION_COOKIE, token, { path: '/', httpOnly: true, sameSite: 'lax', secure, maxAge: ttlS });
}
