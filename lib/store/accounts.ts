// Dashboard users and their memberships in customers. Passwords are hashed with scrypt (Node's
// own implementation: no native dependency), stored as `scrypt$N$r$p$salt$hash`, at OWASP's
// parameters (N=2^17, r=8, p=1: about 0.35 s of one core and 128 MiB for that time here). A hash
// with weaker parameters (N=2^14 before) still verifies, and is replaced at the user's next
// successful login (rehashPassword).
import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { withTx, type Pool, type PoolClient } from '../infra/postgres.js';

export type Role = 'owner' | 'admin' | 'viewer';
export const ROLES: Role[] = ['owner', 'admin', 'viewer'];
export const ROLE_RANK: Record<Role, number> = { viewer: 1, admin: 2, owner: 3 };

export const SCRYPT = { N: 2 ** 17, r: 8, p: 1 } as const;
const KEY_BYTES = 32;

interface Params {
  N: number;
  r: number;
  p: number;
}

// scrypt needs 128·N·r bytes (plus a little); Node refuses above `maxmem` (32 MiB by default).
const scrypt = (pw: string, salt: Buffer, len: number, o: Params) =>
  new Promise<Buffer>((resolve, reject) =>
    scryptCb(pw, salt, len, { N: o.N, r: o.r, p: o.p, maxmem: 2 * 128 * o.N * o.r } satisfies ScryptOptions, (e, k) => (e ? reject(e) : resolve(k))),
  );

function parse(stored: string): (Params & { salt: Buffer; hash: Buffer }) | null {
  const [alg, n, r, p, salt, hash] = stored.split('$');
  const o = { N: Number(n), r: Number(r), p: Number(p) };
  if (alg !== 'scrypt' || !salt || !hash) return null;
  // Bounds against a corrupt row asking for gigabytes.
  if (!Number.isInteger(Math.log2(o.N)) || o.N < 2 || o.N > 2 ** 20 || !(o.r >= 1 && o.r <= 32) || !(o.p >= 1 && o.p <= 16)) return null;
  return { ...o, salt: Buffer.from(salt, 'base64'), hash: Buffer.from(hash, 'base64') };
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, KEY_BYTES, SCRYPT);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

/** True when a stored hash was made with other (older, weaker) parameters than hashPassword uses now. */
export function needsRehash(stored: string): boolean {
  const h = parse(stored);
  return !h || h.N !== SCRYPT.N || h.r !== SCRYPT.r || h.p !== SCRYPT.p || h.hash.length < KEY_BYTES;
}

/**
 * Whether `password` matches `stored`. A hash cheaper than the current parameters is checked with
 * its own parameters, and a throwaway hash at the current ones runs beside it, so a wrong password
 * costs the same time for every account: new hash, old hash, or none (DUMMY_HASH).
 */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const h = parse(stored);
  if (!h || h.hash.length === 0) {
    await scrypt(password, DUMMY_SALT, KEY_BYTES, SCRYPT);
    return false;
  }
  const cheaper = h.N * h.r * h.p < SCRYPT.N * SCRYPT.r * SCRYPT.p;
  const [key] = await Promise.all([scrypt(password, h.salt, h.hash.length, h), cheaper ? scrypt(password, DUMMY_SALT, KEY_BYTES, SCRYPT) : null]);
  return timingSafeEqual(key, h.hash);
}

/**
 * After a successful login: replaces a hash made with older parameters by one at the current
 * parameters. Only if the row still holds the hash that was verified (a password changed in the
 * meantime stays). Returns whether it did.
 */
export async function rehashPassword(pool: Pool, userId: string, password: string, verified: string): Promise<boolean> {
  if (!needsRehash(verified)) return false;
  const fresh = await hashPassword(password);
  const r = await pool.query('UPDATE users SET password_hash = $1 WHERE id = $2 AND password_hash = $3', [fresh, userId, verified]);
  return (r.rowCount ?? 0) > 0;
}

const DUMMY_SALT = Buffer.alloc(16);

/** A hash to compare against when the account does not exist: the current parameters, so both cases take the same time. */
export const DUMMY_HASH = `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${DUMMY_SALT.toString('base64')}$${Buffer.alloc(KEY_BYTES).toString('base64')}`;

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

/** A change of membership the rules forbid; `status`: how the api answers it. */
export class MembershipError extends Error {
  constructor(
    message: string,
    readonly status: 404 | 409,
  ) {
    super(message);
    this.name = 'MembershipError';
  }
}

/** Locks the customer's memberships (so two owners cannot demote each other at once). */
async function lockMembers(c: PoolClient, customerId: string) {
  const r = await c.query<{ user_id: string; role: Role }>('SELECT user_id, role FROM memberships WHERE customer_id = $1 ORDER BY user_id FOR UPDATE', [customerId]);
  return { all: new Map(r.rows.map((m) => [m.user_id, m.role])), owners: r.rows.filter((m) => m.role === 'owner').length };
}

/**
 * Gives a user a role in a customer, or changes it: the one way memberships change (api and CLI).
 * A customer never loses its last owner: demoting or removing them is refused (409).
 */
export async function setMembership(pool: Pool, userId: string, customerId: string, role: Role | null, opts: { mustExist?: boolean } = {}): Promise<void> {
  if (role !== null && !ROLES.includes(role)) throw new Error(`unknown role ${role}: use ${ROLES.join(', ')}`);
  await withTx(pool, async (c) => {
    const members = await lockMembers(c, customerId);
    const current = members.all.get(userId);
    if (!current && (opts.mustExist || role === null)) throw new MembershipError('no such member', 404);
    if (current === 'owner' && role !== 'owner' && members.owners === 1) {
      throw new MembershipError(`the last owner cannot be ${role === null ? 'removed' : 'demoted'}: make another member owner first`, 409);
    }
    if (role === null) await c.query('DELETE FROM memberships WHERE customer_id = $1 AND user_id = $2', [customerId, userId]);
    else {
      await c.query(
        `INSERT INTO memberships (user_id, customer_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (user_id, customer_id) DO UPDATE SET role = EXCLUDED.role`,
        [userId, customerId, role],
      );
    }
  });
}

export const addMembership = (pool: Pool, userId: string, customerId: string, role: Role) => setMembership(pool, userId, customerId, role);

/** The customer a user lands in after login: the oldest membership. */
export async function defaultCustomer(pool: Pool, userId: string): Promise<{ id: string; slug: string; role: Role } | null> {
  const r = await pool.query<{ id: string; slug: string; role: Role }>(
    `SELECT c.id, c.slug, m.role FROM memberships m JOIN customers c ON c.id = m.customer_id
      WHERE m.user_id = $1 ORDER BY m.created_at, c.slug LIMIT 1`,
    [userId],
  );
  return r.rows[0] ?? null;
}

/** A user by id; null when there is none. */
export async function getUser(pool: Pool, userId: string): Promise<User | null> {
  const r = await pool.query<User>('SELECT id, email, username, is_system_admin FROM users WHERE id = $1', [userId]);
  return r.rows[0] ?? null;
}

/** A customer as a user's list shows it: their role in it, and whether they are a member. */
export interface CustomerOfUser {
  id: string;
  slug: string;
  name: string;
  role: Role;
  member: boolean;
}

/** The user's memberships; for a system administrator also every other customer (owner rights, member false). By slug. */
export async function customersOfUser(pool: Pool, userId: string, isSystemAdmin: boolean): Promise<CustomerOfUser[]> {
  const r = await pool.query<CustomerOfUser>(
    `SELECT c.id, c.slug, c.name, m.role, true AS member
         FROM memberships m JOIN customers c ON c.id = m.customer_id WHERE m.user_id = $1 AND c.deleting_at IS NULL
       UNION ALL
       SELECT c.id, c.slug, c.name, 'owner', false FROM customers c
        WHERE $2 AND c.deleting_at IS NULL AND NOT EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = $1 AND m.customer_id = c.id)
       ORDER BY 2`,
    [userId, isSystemAdmin],
  );
  return r.rows;
}

/** A customer by id or slug with the user's role in it (null: not a member); null when no such customer. */
export async function customerWithRole(pool: Pool, userId: string, customer: { id: string } | { slug: string }): Promise<{ id: string; slug: string; role: Role | null } | null> {
  const byId = 'id' in customer;
  const r = await pool.query<{ id: string; slug: string; role: Role | null }>(
    `SELECT c.id, c.slug, m.role FROM customers c LEFT JOIN memberships m ON m.customer_id = c.id AND m.user_id = $1
          WHERE ${byId ? 'c.id = $2::uuid' : 'c.slug = $2'} AND c.deleting_at IS NULL`,
    [userId, byId ? customer.id : customer.slug],
  );
  return r.rows[0] ?? null;
}

/** A member of a customer as its list shows them. */
export interface Member {
  user_id: string;
  email: string;
  username: string | null;
  role: Role;
  created_at: Date;
}

/** The customer's members, oldest membership first. */
export async function listMembers(pool: Pool, customerId: string): Promise<Member[]> {
  const r = await pool.query<Member>(
    `SELECT u.id AS user_id, u.email, u.username, m.role, m.created_at
           FROM memberships m JOIN users u ON u.id = m.user_id
          WHERE m.customer_id = $1 ORDER BY m.created_at, u.email`,
    [customerId],
  );
  return r.rows;
}

/** One member of the customer; null when the user is none. */
export async function getMember(pool: Pool, customerId: string, userId: string): Promise<Member | null> {
  const r = await pool.query<Member>(
    `SELECT u.id AS user_id, u.email, u.username, m.role, m.created_at
         FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.customer_id = $1 AND m.user_id = $2`,
    [customerId, userId],
  );
  return r.rows[0] ?? null;
}

/** Whether a user of this id exists. */
export async function userExists(pool: Pool, userId: string): Promise<boolean> {
  const r = await pool.query('SELECT 1 FROM users WHERE id = $1', [userId]);
  return !!r.rowCount;
}

/** A user's address and password hash (to check the current password); null when there is no such user. */
export async function userPasswordHash(pool: Pool, userId: string): Promise<{ email: string; password_hash: string } | null> {
  const r = await pool.query<{ email: string; password_hash: string }>('SELECT email, password_hash FROM users WHERE id = $1', [userId]);
  return r.rows[0] ?? null;
}

/** A user by e-mail address (`email`: normalised, lower case); null when none has it. */
export async function findUserByEmail(pool: Pool, email: string): Promise<{ id: string; email: string } | null> {
  const r = await pool.query<{ id: string; email: string }>('SELECT id, email FROM users WHERE lower(email) = $1', [email]);
  return r.rows[0] ?? null;
}

/** Sets a user's password hash (hashPassword) and notes when it changed. */
export async function setPasswordHash(db: Pool | PoolClient, userId: string, hash: string): Promise<void> {
  await db.query('UPDATE users SET password_hash = $1, password_changed_at = now() WHERE id = $2', [hash, userId]);
}

/** Whether the address (normalised, lower case) belongs to a member of the customer. */
export async function isMemberEmail(pool: Pool, customerId: string, email: string): Promise<boolean> {
  const r = await pool.query('SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.customer_id = $1 AND lower(u.email) = $2', [customerId, email]);
  return !!r.rowCount;
}

/** Whether an account has this address (normalised, lower case). */
export async function emailHasAccount(pool: Pool, email: string): Promise<boolean> {
  const r = await pool.query('SELECT 1 FROM users WHERE lower(email) = $1', [email]);
  return (r.rowCount ?? 0) > 0;
}

/** The user of this address (normalised, lower case); null when none has it. */
export async function userByEmail(pool: Pool, email: string): Promise<User | null> {
  const r = await pool.query<User>('SELECT id, email, username, is_system_admin FROM users WHERE lower(email) = $1', [email]);
  return r.rows[0] ?? null;
}

/** The user's role in the customer (the membership must exist). */
export async function memberRole(pool: Pool, userId: string, customerId: string): Promise<Role> {
  return (await pool.query<{ role: Role }>('SELECT role FROM memberships WHERE user_id = $1 AND customer_id = $2', [userId, customerId])).rows[0]!.role;
}
