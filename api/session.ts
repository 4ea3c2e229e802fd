// Dashboard sessions: a JWT (jose, HS256) with sub, email, is_system_admin, the active customer
// `cid` and exp. Sent as `Authorization: Bearer <jwt>` or in the HttpOnly, SameSite=Lax cookie
// `fleet_session` that the dashboard uses.
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { randomBytes } from 'node:crypto';

export const SESSION_COOKIE = 'fleet_session';

export interface SessionClaims {
  sub: string;
  email: string;
  is_system_admin: boolean;
  cid: string | null;
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

  async issue(c: SessionClaims): Promise<{ token: string; expiresAt: Date }> {
    const expiresAt = new Date(Date.now() + this.ttlS * 1000);
    const token = await new SignJWT({ email: c.email, is_system_admin: c.is_system_admin, cid: c.cid })
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
      if (typeof payload.sub !== 'string') return null;
      return {
        sub: payload.sub,
        email: String(payload.email ?? ''),
        is_system_admin: payload.is_system_admin === true,
        cid: typeof payload.cid === 'string' ? payload.cid : null,
      };
    } catch (e) {
      if (e instanceof joseErrors.JOSEError) return null;
      throw e;
    }
  }
}
