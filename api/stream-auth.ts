// Whether the sessions and API tokens of open live streams still hold (api/light-stream.ts asks
// every SESSION_STREAM_RECHECK_MS): one query for all the sessions, one for all the tokens, however
// many streams an api replica holds.
import type { Pool } from '../lib/infra/postgres.js';
import { openSessionsOfMembers } from '../lib/store/sessions.js';
import { activeTokenIds } from '../lib/store/tokens.js';
import { streamAuthKey, type StreamAuth } from './light-stream.js';

export async function streamAuthStillValid(pool: Pool, auths: StreamAuth[]): Promise<Set<string>> {
  const users = auths.filter((a) => a.kind === 'user');
  const tokens = auths.filter((a) => a.kind === 'token');
  const valid = new Set<string>();
  if (users.length) {
    const open = await openSessionsOfMembers(
      pool,
      users.map((a) => ({ sessionId: a.sessionId, customerId: a.customerId })),
    );
    for (const s of open) valid.add(streamAuthKey({ kind: 'user', ...s }));
  }
  if (tokens.length) {
    for (const id of await activeTokenIds(pool, tokens.map((a) => a.tokenId))) valid.add(streamAuthKey({ kind: 'token', tokenId: id }));
  }
  return valid;
}
