// Password resets (Postgres `password_resets`): single-use links sent by e-mail, only the SHA-256 of
// the link's token stored. Using one sets the new password, voids every other link of the user and
// ends all their sessions, in one transaction.
import { withTx, type Pool } from '../infra/postgres.js';
import { setPasswordHash } from './accounts.js';

/** A new link for the user, valid for ttlS; returns when it expires. */
export async function createPasswordReset(pool: Pool, userId: string, tokenHash: string, ttlS: number): Promise<Date> {
  const r = await pool.query<{ expires_at: Date }>(
    `INSERT INTO password_resets (user_id, token_hash, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3)) RETURNING expires_at`,
    [userId, tokenHash, ttlS],
  );
  return r.rows[0]!.expires_at;
}

export interface OpenPasswordReset {
  id: string;
  user_id: string;
  email: string;
}

/** The unused, unexpired link of this token hash, with its user's address; null otherwise. */
export async function findOpenPasswordReset(pool: Pool, tokenHash: string): Promise<OpenPasswordReset | null> {
  const r = await pool.query<OpenPasswordReset>(
    `SELECT r.id, r.user_id, u.email FROM password_resets r JOIN users u ON u.id = r.user_id
            WHERE r.token_hash = $1 AND r.used_at IS NULL AND r.expires_at > now()`,
    [tokenHash],
  );
  return r.rows[0] ?? null;
}

/**
 * Uses the link (if it is still unused and unexpired: null otherwise), voids the user's other links,
 * sets the new password hash and ends every session of the user; returns how many sessions ended.
 */
export async function usePasswordReset(pool: Pool, reset: { id: string; user_id: string }, hash: string): Promise<number | null> {
  return withTx(pool, async (c) => {
    const used = await c.query(`UPDATE password_resets SET used_at = now() WHERE id = $1 AND used_at IS NULL AND expires_at > now()`, [reset.id]);
    if (!used.rowCount) return null;
    // Every other link of this user is void now too.
    await c.query(`UPDATE password_resets SET used_at = now() WHERE user_id = $1 AND used_at IS NULL`, [reset.user_id]);
    await setPasswordHash(c, reset.user_id, hash);
    const r = await c.query(`UPDATE sessions SET revoked_at = now(), revoked_why = 'password_reset' WHERE user_id = $1 AND revoked_at IS NULL`, [reset.user_id]);
    return r.rowCount ?? 0;
  });
}
