// Login and logout. Passwords are checked with scrypt (lib/accounts.ts); an unknown account is
// checked against a dummy hash of the same cost, and a hash with older parameters is upgraded at a
// successful login. Failed logins are counted in Redis per account and per client address (so the
// limit holds across api replicas); over the limit: 429 with Retry-After, even for the right
// password, until the window has passed.
import type { ApiDeps, HandlersOf } from '../types.js';
import { HttpError, badRequest } from '../../lib/errors.js';
import { findUserByLogin, verifyPassword, rehashPassword, defaultCustomer, DUMMY_HASH } from '../../lib/accounts.js';
import { SESSION_COOKIE, revokeSession } from '../session.js';
import { credentials } from '../auth.js';
import { openSession } from './sessions.js';

export function authHandlers(d: ApiDeps): HandlersOf<'auth_login' | 'auth_logout'> {
  const cfg = d.cfg.api;
  const key = (kind: string, v: string) => `${d.cfg.redisPrefix}login:${kind}:${v}`;

  async function limited(keys: [string, number][]): Promise<number> {
    const counts = await d.redis.mget(...keys.map(([k]) => k));
    for (let i = 0; i < keys.length; i++) {
      if (Number(counts[i] ?? 0) >= keys[i]![1]) return Math.max(1, await d.redis.ttl(keys[i]![0]));
    }
    return 0;
  }

  async function fail(keys: [string, number][]): Promise<void> {
    const m = d.redis.multi();
    for (const [k] of keys) m.incr(k).expire(k, cfg.loginWindowS, 'NX');
    await m.exec();
  }

  return {
    async auth_login(req, reply) {
      const b = req.body;
      const login = (b.login ?? b.email ?? b.username ?? '').trim();
      if (!login) throw badRequest('send email (or username) and password');
      const keys: [string, number][] = [
        [key('acct', login.toLowerCase()), cfg.loginMaxFailuresPerAccount],
        [key('addr', req.ip), cfg.loginMaxFailuresPerAddress],
      ];
      const wait = await limited(keys);
      if (wait > 0) throw new HttpError(429, `too many failed logins; try again in ${wait} s`, { retryAfterS: wait });
      const user = await findUserByLogin(d.pool, login);
      // Verify against a dummy hash for unknown accounts: same time, same answer.
      const ok = await verifyPassword(b.password, user?.password_hash ?? DUMMY_HASH);
      if (!user || !ok) {
        await fail(keys);
        throw new HttpError(401, 'wrong e-mail address, user name or password');
      }
      await d.redis.del(keys[0]![0]);
      // A hash made with older scrypt parameters is replaced now that the password is known.
      await rehashPassword(d.pool, user.id, b.password, user.password_hash)
        .then((done) => done && d.log.info({ userId: user.id }, 'password hash upgraded to the current scrypt parameters'))
        .catch((e) => d.log.warn({ err: e, userId: user.id }, 'password rehash failed; the old hash stays'));
      const customer = await defaultCustomer(d.pool, user.id);
      const { token, expiresAt } = await openSession(d, req, reply, user, customer?.id ?? null);
      return {
        token,
        token_type: 'Bearer',
        expires_at: expiresAt.toISOString(),
        user: { id: user.id, email: user.email, username: user.username, is_system_admin: user.is_system_admin },
        customer,
      };
    },

    // Ends the session at once on every replica (its row is revoked), then clears the cookie. A
    // missing, foreign or already ended session: the same answer.
    async auth_logout(req, reply) {
      const { bearer, cookie } = credentials(req);
      const jwt = bearer && !bearer.startsWith('fk_') ? bearer : cookie;
      const claims = jwt ? await d.sessions.verify(jwt) : null;
      if (claims && (await revokeSession(d.pool, claims.sid, 'logout'))) d.log.info({ userId: claims.sub, sessionId: claims.sid }, 'logged out');
      reply.clearCookie(SESSION_COOKIE, { path: '/' });
      return { ok: true };
    },
  };
}

// The cookie is set in api/session.ts (shared with the session routes of api/handlers/sessions.ts).
export { setSessionCookie } from '../session.js';
