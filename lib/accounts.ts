// Dashboard users and their memberships in customers. Passwords are hashed with scrypt (Node's
// own implementation: no native dependency), stored as `scrypt$N$r$p$salt$hash`.
import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import type { Pool } from './db/postgres.js';

export type Role = 'owner' | 'admin' | 'viewer';
export const ROLES: Role[] = ['owner', 'admin', 'viewer'];
export const ROLE_RANK: Record<Role, number> = { viewer: 1, admin: 2, owner: 3 };

const scrypt = (pw: string, salt: Buffer, len: number, opts: ScryptOptions) =>
  new Promise<Buffer>((resolve, reject) => scryptCb(pw, salt, len, opts, (e, k) => (e ? reject(e) : resolve(k))));

const N = 16384;
const R = 8;
const P = 1;

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, 32, { N, r: R, p: P });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [alg, n, r, p, salt, hash] = stored.split('$');
  if (alg !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const key = await scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(n), r: Number(r), p: Number(p) });
  return timingSafeEqual(key, expected);
}

/** A hash to compare against when the account does not exist, so both cases take the same time. */
export const DUMMY_HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';

export function newPassword(): string {
  return randomBytes(15).toString('base64url');
}

export const normaliseEmail = (e: string) => e.trim().toLowerCase();
export const EMAIL_RE = /^[^@\s]+@[^@\s]+$/;

export interface User {
  id: string;
  email: string;
  username: string | null;
  is_system_admin: boolean;
}

export class DuplicateUserError extends Error {
  constructor(what: string) {
    super(`${what} is already taken`);
    this.name = 'DuplicateUserError';
  }
}

export async function createUser(
  pool: Pool,
  u: { email: string; username?: string | null; password: string; isSystemAdmin?: boolean },
): Promise<User> {
  const email = u.email.trim();
  if (!EMAIL_RE.test(email)) throw new Error(`invalid e-mail address ${JSON.stringify(email)}`);
  if (u.password.length < 8) throw new Error('password must have at least 8 characters');
  const hash = await hashPassword(u.password);
  try {
    const r = await pool.query<User>(
      `INSERT INTO users (email, username, password_hash, is_system_admin) VALUES ($1, $2, $3, $4)
       RETURNING id, email, username, is_system_admin`,
      [email, u.username ?? null, hash, u.isSystemAdmin ?? false],
    );
    return r.rows[0]!;
  } catch (e) {
    const c = e as { code?: string; constraint?: string };
    if (c.code === '23505') throw new DuplicateUserError(c.constraint === 'users_username_ci' ? 'user name' : 'e-mail address');
    if (c.code === '23514') throw new Error('invalid e-mail address or user name');
    throw e;
  }
}

export async function findUserByLogin(pool: Pool, login: string): Promise<(User & { password_hash: string }) | null> {
  const l = login.trim().toLowerCase();
  const r = await pool.query<User & { password_hash: string }>(
    `SELECT id, email, username, is_system_admin, password_hash FROM users
      WHERE lower(email) = $1 OR lower(username) = $1
      ORDER BY (lower(email) = $1) DESC LIMIT 1`,
    [l],
  );
  return r.rows[0] ?? null;
}

export async function addMembership(pool: Pool, userId: string, customerId: string, role: Role): Promise<void> {
  if (!ROLES.includes(role)) throw new Error(`unknown role ${role}: use ${ROLES.join(', ')}`);
  await pool.query(
    `INSERT INTO memberships (user_id, customer_id, role) VALUES ($1, $2, $3)
     ON CONFLICT (user_id, customer_id) DO UPDATE SET role = EXCLUDED.role`,
    [userId, customerId, role],
  );
}

/** The customer a user lands in after login: the oldest membership. */
export async function defaultCustomer(pool: Pool, userId: string): Promise<{ id: string; slug: string; role: Role } | null> {
  const r = await pool.query<{ id: string; slug: string; role: Role }>(
    `SELECT c.id, c.slug, m.role FROM memberships m JOIN customers c ON c.id = m.customer_id
      WHERE m.user_id = $1 ORDER BY m.created_at, c.slug LIMIT 1`,
    [userId],
  );
  return r.rows[0] ?? null;
}
