// Dashboard sessions' rows in Postgres (`sessions`): created at login, revoked by logout, a password
// change or reset, the removal of a membership, "sign out everywhere" and `fleet sessions revoke`.
// The JWT that names a row is the api's (api/session.ts); the api and the CLI both end sessions here.
import type { Pool } from '../infra/postgres.js';
import type { Role } from './accounts.js';

/** Why a session ended (sessions.revoked_why; the log and docs name them). */
export type RevokeReason = 'logout' | 'password_changed' | 'password_reset' | 'membership_removed' | 'signed_out_by_admin' | 'signed_out_everywhere';

/** A new session row for a login; its expiry is the JWT's. */
export async function createSession(pool: Pool, userId: string, ttlS: number, meta: { userAgent?: string; address?: string } = {}): Promise<{ id: string; expiresAt: Date }> {
  const r = await pool.query<{ id: string; expires_at: Date }>(
    `INSERT INTO sessions (user_id, expires_at, user_agent, address) VALUES ($1, now() + make_interval(secs => $2), $3, $4) RETURNING id, expires_at`,
    [userId, ttlS, meta.userAgent?.slice(0, 300) ?? null, meta.address ?? null],
  );
  // Ended rows are deleted by the retention job (RETENTION_SESSIONS_DAYS, lib/store/retention.ts).
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


/** A dashboard user as a request's session names them: their role in the active customer, and whether the session row still holds. */
export interface SessionPrincipal {
  email: string;
  is_system_admin: boolean;
  role: Role | null;
  slug: string | null;
  cust: string | null;
  /** The session row exists, belongs to the user and was not revoked (its expiry: `expires_at`). */
  open: boolean;
  /** The session row's expiry; null when there is no such row. Judged against the clock by the caller. */
  expires_at: Date | null;
}

/**
 * One query: the user, their role in the active customer, and whether the session row still holds
 * (a primary-key lookup in the same round trip: revocation costs requests nothing extra; its
 * expiry is returned, not judged, since api/principal-cache.ts keeps the row). Null when the user
 * no longer exists.
 */
export async function sessionPrincipal(pool: Pool, userId: string, customerId: string | null, sessionId: string): Promise<SessionPrincipal | null> {
  const r = await pool.query<SessionPrincipal>(
    `SELECT u.email, u.is_system_admin, m.role, c.slug, c.id AS cust,
            (s.id IS NOT NULL AND s.revoked_at IS NULL) AS open, s.expires_at
       FROM users u
       LEFT JOIN customers c ON c.id = $2::uuid AND c.deleting_at IS NULL
       LEFT JOIN memberships m ON m.user_id = u.id AND m.customer_id = c.id
       LEFT JOIN sessions s ON s.id = $3::uuid AND s.user_id = u.id
      WHERE u.id = $1`,
    [userId, customerId, sessionId],
  );
  return r.rows[0] ?? null;
}

/**
 * Of these (session, customer) pairs of open live streams, those whose session is open and whose
 * user is still a member of the customer (or a system administrator): one query for all of them.
 */
export async function openSessionsOfMembers(pool: Pool, pairs: { sessionId: string; customerId: string }[]): Promise<{ sessionId: string; customerId: string }[]> {
  const r = await pool.query<{ sid: string; cust: string }>(
    `SELECT x.sid::text AS sid, x.cust::text AS cust
         FROM unnest($1::uuid[], $2::uuid[]) AS x(sid, cust)
         JOIN sessions s ON s.id = x.sid AND s.revoked_at IS NULL AND s.expires_at > now()
         JOIN users u ON u.id = s.user_id
         JOIN customers c ON c.id = x.cust AND c.deleting_at IS NULL
        WHERE u.is_system_admin OR EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.customer_id = x.cust)`,
    [pairs.map((p) => p.sessionId), pairs.map((p) => p.customerId)],
  );
  return r.rows.map((row) => ({ sessionId: row.sid, customerId: row.cust }));
}

/** When an open (not revoked) session expires; null when it was revoked or never existed. */
export async function sessionExpiry(pool: Pool, sessionId: string): Promise<Date | null> {
  const r = await pool.query<{ expires_at: Date }>('SELECT expires_at FROM sessions WHERE id = $1 AND revoked_at IS NULL', [sessionId]);
  return r.rows[0]?.expires_at ?? null;
}
