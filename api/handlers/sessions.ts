// Sessions and passwords: opening a session at login (a row per login, api/session.ts), signing
// out everywhere (the user, or a system administrator for any user), changing the password (the
// current one required) and resetting it through an e-mailed single-use link. A password change
// ends every other session of the user; a reset ends all of them.
//
// The reset request answers the same (202, the same body) whether or not the address has an
// account, and does the same work on the request path either way: the e-mail goes out after the
// answer. At most PASSWORD_RESET_MAX_PER_HOUR e-mails per address and hour; beyond, the answer is
// the same and nothing is sent.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { randomBytes } from 'node:crypto';
import type { ApiDeps, HandlersOf } from '../types.js';
import { anyPrincipal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import { hashToken } from '../../lib/contract/ids.js';
import { hashPassword, verifyPassword, normaliseEmail, DUMMY_HASH, userExists, userPasswordHash, findUserByEmail, setPasswordHash } from '../../lib/store/accounts.js';
import { createPasswordReset, findOpenPasswordReset, usePasswordReset } from '../../lib/store/password-resets.js';
import { sessionExpiry } from '../../lib/store/sessions.js';
import { passwordProblem } from '../../lib/domain/passwords.js';
import { langOf, messages, type Mailer } from '../mail.js';
import { SESSION_COOKIE, createSession, revokeUserSessions, setSessionCookie } from '../session.js';
import { redisKeys } from '../../lib/infra/redis.js';

/** A single-use link token: `<prefix>_` and 32 random bytes; only its SHA-256 is stored. */
export const newLinkToken = (prefix: 'inv' | 'rst') => `${prefix}_${randomBytes(32).toString('base64url')}`;

const LINK_TOKEN_RE = /^(inv|rst)_[A-Za-z0-9_-]{43}$/;
export const wellFormedLinkToken = (t: string, prefix: 'inv' | 'rst') => LINK_TOKEN_RE.test(t) && t.startsWith(`${prefix}_`);

/** Opens a session for `user` (a row, the JWT, the cookie); what login and accepting an invitation answer. */
export async function openSession(
  d: ApiDeps,
  req: FastifyRequest,
  reply: FastifyReply,
  user: { id: string; email: string; is_system_admin: boolean },
  customerId: string | null,
): Promise<{ token: string; expiresAt: Date; sessionId: string }> {
  const row = await createSession(d.pool, user.id, d.sessions.ttlS, { userAgent: req.headers['user-agent'], address: req.ip });
  const { token, expiresAt } = await d.sessions.issue({ sub: user.id, email: user.email, is_system_admin: user.is_system_admin, cid: customerId, sid: row.id }, row.expiresAt);
  setSessionCookie(reply, token, Math.max(1, Math.round((expiresAt.getTime() - Date.now()) / 1000)), d.cfg.api.cookieSecure);
  return { token, expiresAt, sessionId: row.id };
}

/** A new JWT for the same session (another active customer); the session's expiry stays. */
export async function reissueSession(
  d: ApiDeps,
  reply: FastifyReply,
  user: { id: string; email: string; is_system_admin: boolean },
  customerId: string | null,
  sessionId: string,
): Promise<{ token: string; expiresAt: Date }> {
  const expiresAt = await sessionExpiry(d.pool, sessionId);
  if (!expiresAt) throw new HttpError(401, 'session ended: log in again');
  const out = await d.sessions.issue({ sub: user.id, email: user.email, is_system_admin: user.is_system_admin, cid: customerId, sid: sessionId }, expiresAt);
  setSessionCookie(reply, out.token, Math.max(1, Math.round((out.expiresAt.getTime() - Date.now()) / 1000)), d.cfg.api.cookieSecure);
  return out;
}

/** Starts sending a message after the answer; logs what became of it. */
export function sendLater(mailer: Mailer, d: ApiDeps, msg: Parameters<Mailer['send']>[0], what: string, onDone?: (outcome: 'sent' | 'logged' | 'failed') => Promise<unknown>): void {
  void mailer
    .send(msg)
    .then(
      async (o) => {
        d.log.info({ what, outcome: o }, o === 'sent' ? 'e-mail sent' : 'e-mail logged (SMTP not configured)');
        await onDone?.(o);
      },
      async (e: unknown) => {
        d.log.warn({ err: e, what }, 'e-mail not sent: the SMTP server refused it or could not be reached');
        await onDone?.('failed');
      },
    )
    .catch((e: unknown) => d.log.warn({ err: e, what }, 'recording an e-mail outcome failed'));
}

export function sessionHandlers(
  d: ApiDeps,
  mailer: Mailer,
): HandlersOf<'auth_logout_everywhere' | 'admin_sign_out_user' | 'auth_change_password' | 'auth_password_reset' | 'auth_password_reset_confirm'> {
  const cfg = d.cfg.api;
  const rules = (email: string | null) => ({ minLength: cfg.passwordMinLength, email });

  return {
    async auth_logout_everywhere(req, reply) {
      const p = anyPrincipal(req);
      const n = await revokeUserSessions(d.pool, p.userId!, 'signed_out_everywhere');
      d.log.info({ userId: p.userId, sessions: n }, 'signed out everywhere');
      reply.clearCookie(SESSION_COOKIE, { path: '/' });
      return { ok: true as const, sessions_ended: n };
    },

    async admin_sign_out_user(req) {
      const { user_id } = req.params;
      if (!(await userExists(d.pool, user_id))) throw notFound('no such user');
      const n = await revokeUserSessions(d.pool, user_id, 'signed_out_by_admin');
      d.log.info({ userId: user_id, by: anyPrincipal(req).userId, sessions: n }, 'user signed out everywhere by a system administrator');
      return { ok: true as const, sessions_ended: n };
    },

    async auth_change_password(req) {
      const p = anyPrincipal(req);
      const b = req.body;
      const u = await userPasswordHash(d.pool, p.userId!);
      if (!u) throw new HttpError(401, 'the account of this session no longer exists');
      // Wrong current passwords are counted per user (a stolen session must not become a way to
      // guess the password): LOGIN_MAX_FAILURES_PER_ACCOUNT within LOGIN_WINDOW_S, then 429.
      const key = redisKeys(d.cfg.redisPrefix, d.redis).passwordChangeFailures(p.userId!);
      const failures = Number((await d.redis.get(key)) ?? 0);
      if (failures >= cfg.loginMaxFailuresPerAccount) {
        const wait = Math.max(1, await d.redis.ttl(key));
        throw new HttpError(429, `too many wrong current passwords; try again in ${wait} s`, { retryAfterS: wait });
      }
      if (!(await verifyPassword(b.current_password, u.password_hash))) {
        await d.redis.multi().incr(key).expire(key, cfg.loginWindowS, 'NX').exec();
        throw new HttpError(403, 'the current password is wrong');
      }
      await d.redis.del(key);
      const problem = passwordProblem(b.new_password, rules(u.email));
      if (problem) throw badRequest(problem);
      if (b.new_password === b.current_password) throw badRequest('the new password is the current one');
      const hash = await hashPassword(b.new_password);
      await setPasswordHash(d.pool, p.userId!, hash);
      // Every other session ends; this one stays (whoever changed it is still here).
      const n = await revokeUserSessions(d.pool, p.userId!, 'password_changed', p.sessionId ?? null);
      d.log.info({ userId: p.userId, sessions: n }, 'password changed; other sessions ended');
      return { ok: true as const, sessions_ended: n };
    },

    async auth_password_reset(req, reply) {
      const email = normaliseEmail(req.body.email);
      const lang = langOf(req.body.lang ?? req.headers['accept-language']);
      reply.code(202);
      const answer = { ok: true as const, detail: 'if an account has this address, an e-mail with a link to choose a new password is on its way' };
      const u = await findUserByEmail(d.pool, email);
      // The per-address count is kept whether or not the account exists (the same work either way).
      const key = redisKeys(d.cfg.redisPrefix, d.redis).passwordResetRequests(hashToken(email));
      const count = Number((await d.redis.multi().incr(key).expire(key, 3600, 'NX').exec())?.[0]?.[1] ?? 0);
      if (!u) return answer;
      if (count > cfg.passwordResetMaxPerHour) {
        d.log.warn({ userId: u.id }, `password reset: more than ${cfg.passwordResetMaxPerHour} requests this hour for this address; no e-mail sent`);
        return answer;
      }
      const token = newLinkToken('rst');
      const expiresAt = await createPasswordReset(d.pool, u.id, hashToken(token), cfg.passwordResetTtlS);
      const link = `${cfg.publicDashboardUrl}/reset-password#token=${token}`;
      sendLater(mailer, d, messages.passwordReset(lang, { to: u.email, link, expiresAt }), 'password reset');
      return answer;
    },

    async auth_password_reset_confirm(req) {
      const b = req.body;
      const invalid = () => badRequest('this reset link is invalid, already used or expired: ask for a new one');
      if (!wellFormedLinkToken(b.token, 'rst')) throw invalid();
      // Verify the new password's rules before the link is used up.
      const row = await findOpenPasswordReset(d.pool, hashToken(b.token));
      if (!row) {
        await verifyPassword(b.new_password, DUMMY_HASH); // the same cost as the real path
        throw invalid();
      }
      const problem = passwordProblem(b.new_password, rules(row.email));
      if (problem) throw badRequest(problem);
      const hash = await hashPassword(b.new_password);
      const ended = await usePasswordReset(d.pool, row, hash);
      if (ended === null) throw invalid();
      d.log.info({ userId: row.user_id, sessions: ended }, 'password reset through an e-mailed link; every session ended');
      return { ok: true as const, sessions_ended: ended };
    },
  };
}
