// Login and logout. Passwords are checked with scrypt (lib/store/accounts.ts); an unknown account is
// checked against a dummy hash of the same cost, and a hash with older parameters is upgraded at a
// successful login. Brute force is held off by api/login-guard.ts: every attempt is counted in
// Redis (per client address, per account and address, per account) before its password is checked,
// and password checks wait in a bounded queue; over a limit: 429 with Retry-After, a full queue: 503.
import type { ApiDeps, HandlersOf } from '../types.js';
import { HttpError, badRequest } from '../../lib/contract/errors.js';
import { findUserByLogin, verifyPassword, rehashPassword, defaultCustomer, DUMMY_HASH } from '../../lib/store/accounts.js';
import { SESSION_COOKIE, revokeSession } from '../session.js';
import { DEVICE_COOKIE, LoginGuard, setDeviceCookie } from '../login-guard.js';
import { credentials } from '../auth.js';
import { openSession } from './sessions.js';

export function authHandlers(d: ApiDeps): HandlersOf<'auth_login' | 'auth_logout'> {
  const cfg = d.cfg.api;
  const guard = new LoginGuard({
    redis: d.redis,
    prefix: d.cfg.redisPrefix,
    secret: cfg.jwtSecret,
    metrics: d.metrics,
    limits: {
      windowS: cfg.loginWindowS,
      maxPerAddress: cfg.loginMaxFailuresPerAddress,
      maxPerAccount: cfg.loginMaxFailuresPerAccount,
      slowdownAfter: cfg.loginAccountSlowdownAfter,
      delayS: cfg.loginAccountDelayS,
      delayMaxS: cfg.loginAccountDelayMaxS,
      hashConcurrency: cfg.loginHashConcurrency,
      hashQueue: cfg.loginHashQueue,
    },
  });

  return {
    async auth_login(req, reply) {
      const b = req.body;
      const login = (b.login ?? b.email ?? b.username ?? '').trim();
      if (!login) throw badRequest('send email (or username) and password');
      const user = await findUserByLogin(d.pool, login);
      // Counted before the check, checked in the bounded queue (api/login-guard.ts). Unknown
      // accounts are verified against a dummy hash: same time, same answer.
      const deviceCookie = req.cookies?.[DEVICE_COOKIE];
      const { ok, device } = await guard.attempt({ ip: req.ip, login, userId: user?.id ?? null, deviceCookie }, () =>
        verifyPassword(b.password, user?.password_hash ?? DUMMY_HASH),
      );
      if (!user || !ok) throw new HttpError(401, 'wrong e-mail address, user name or password');
      if (device) setDeviceCookie(reply, device, cfg.cookieSecure);
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
