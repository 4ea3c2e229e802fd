// Whether the sessions and API tokens of open live streams still hold (api/light-stream.ts asks
// every SESSION_STREAM_RECHECK_MS): one query for all the sessions, one for all the tokens, however
// many streams an api replica holds.
import type { Pool } from '../lib/infra/postgres.js';
import { streamAuthKey, type StreamAuth } from './light-stream.js';

export async function streamAuthStillValid(pool: Pool, auths: StreamAuth[]): Promise<Set<string>> {
  const users = auths.filter((a) => a.kind === 'user');
  const tokens = auths.filter((a) => a.kind === 'token');
  const valid = new Set<string>();
  if (users.length) {
    // The session is open, and its user is still a member of the stream's customer (or a system administrator).
    const r = await pool.query<{ sid: string; cust: string }>(
      `SELECT x.sid::text AS sid, x.cust::text AS cust
         FROM unnest($1::uuid[], $2::uuid[]) AS x(sid, cust)
         JOIN sessions s ON s.id = x.sid AND s.revoked_at IS NULL AND s.expires_at > now()
         JOIN users u ON u.id = s.user_id
        WHERE u.is_system_admin OR EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.customer_id = x.cust)`,
      [users.map((a) => a.sessionId), users.map((a) => a.customerId)],
    );
    for (const row of r.rows) valid.add(streamAuthKey({ kind: 'user', sessionId: row.sid, customerId: row.cust }));
  }
  if (tokens.length) {
    const r = await pool.query<{ id: string }>(`SELECT id::text FROM api_tokens WHERE id = ANY($1::uuid[]) AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, [tokens.map((a) => a.tokenId)]);
    for (const row of r.rows) valid.add(streamAuthKey({ kind: 'token', tokenId: row.id }));
  }
  return valid;
}
