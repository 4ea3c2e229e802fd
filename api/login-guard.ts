// Login against brute force, for POST /auth/login (api/handlers/auth.ts). docs/operations.md
// "Login limits" has the numbers; test/servers/login-limits.test.ts holds them against the real process.
//
// Every attempt is counted in Redis BEFORE its password is checked, by one Lua script (atomic across
// api replicas), so concurrent guesses cannot all pass a count read before the 0.35 s hash and
// written after it. An attempt whose password matched gives its counts back; one that never got
// checked (503, an error) too. What is counted:
//   - per client address (an IPv4 address; an IPv6 address by its /64, the block one subscriber
//     gets; an IPv4-mapped IPv6 address as the IPv4 address), all accounts:
//     LOGIN_MAX_FAILURES_PER_ADDRESS (20) failures in LOGIN_WINDOW_S (15 min), then 429;
//   - per account AND address: LOGIN_MAX_FAILURES_PER_ACCOUNT (5), then 429 for that pair only:
//     an attacker locks their own address out, never the owner's. An account is its user (e-mail
//     address and user name count together), or for a login that names no account, that name;
//   - per account, all addresses (a distributed guess): after LOGIN_ACCOUNT_SLOWDOWN_AFTER (10)
//     failures the account is slowed down, not locked: one attempt per LOGIN_ACCOUNT_DELAY_S (1 s),
//     doubling with each further failure up to LOGIN_ACCOUNT_DELAY_MAX_S (60 s), 429 with
//     Retry-After in between. The counter's window restarts with each failure. A browser that has
//     logged in to the account before is not slowed down: a successful login sets a device cookie
//     (`fleet_device`, HMAC-signed, naming the user; OWASP's "device cookies"), and attempts with
//     it are counted per cookie instead (LOGIN_MAX_FAILURES_PER_ACCOUNT, then it counts as none).
//
// Password checks cost 128 MiB and a thread-pool thread for about 0.35 s each: an api process
// runs at most LOGIN_HASH_CONCURRENCY (2) at once with LOGIN_HASH_QUEUE (8) waiting, first come
// first served; an attempt that finds the queue full is answered 503 with Retry-After at once and
// is not counted. So a correct login is checked behind at most concurrency + queue others (about
// 1.8 s on an idle machine), however many arrive. Attempts refused by a limit never reach the
// queue. Every attempt, refused or not, costs the same user lookup (no timing difference between
// accounts that exist and those that do not: test/stack/password-hash.test.ts).
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import ipaddr from 'ipaddr.js';
import type { FastifyReply } from 'fastify';
import { luaCommand, redisKeys, type Redis } from '../lib/infra/redis.js';
import { HttpError } from '../lib/contract/errors.js';
import type { Metrics } from '../lib/infra/metrics.js';

export const DEVICE_COOKIE = 'fleet_device';
/** A device cookie lives this long after the last successful login that set it. */
export const DEVICE_COOKIE_TTL_S = 180 * 86_400;

export interface LoginLimits {
  windowS: number;
  maxPerAddress: number;
  maxPerAccount: number;
  slowdownAfter: number;
  delayS: number;
  delayMaxS: number;
  hashConcurrency: number;
  hashQueue: number;
}

/** The client an address counts as: IPv4 as it is, IPv6 by its /64, IPv4-mapped IPv6 as the IPv4 address. */
export function clientNet(ip: string): string {
  let a: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    a = ipaddr.parse(ip.replace(/%.*$/, ''));
  } catch {
    return ip; // not an address (a test's inject, a Unix socket): itself
  }
  if (a.kind() === 'ipv6' && (a as ipaddr.IPv6).isIPv4MappedAddress()) a = (a as ipaddr.IPv6).toIPv4Address();
  if (a.kind() === 'ipv4') return a.toString();
  const p = (a as ipaddr.IPv6).parts;
  return `${p.slice(0, 4).map((x) => x.toString(16)).join(':')}::/64`;
}

/**
 * A bounded queue in front of the password checks: `enter` gives a slot now, a promise of one
 * (first come, first served), or null when `queue` are already waiting.
 */
export class HashGate {
  private active = 0;
  private waiting: (() => void)[] = [];
  /** Seconds one check takes, averaged (for Retry-After). */
  private checkS = 0.5;

  constructor(
    readonly concurrency: number,
    readonly queue: number,
  ) {}

  get waitingCount(): number {
    return this.waiting.length;
  }

  enter(): Promise<void> | null {
    if (this.active < this.concurrency) {
      this.active++;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.queue) return null;
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Gives the slot to the next in line (or frees it); `tookS`: how long the check held it. */
  leave(tookS?: number): void {
    if (tookS !== undefined) this.checkS = 0.8 * this.checkS + 0.2 * tookS;
    const next = this.waiting.shift();
    if (next) next();
    else this.active--;
  }

  /** When a refused attempt might find room: the line ahead of it, worked off at `concurrency` at a time. */
  retryAfterS(): number {
    return Math.max(1, Math.ceil(((this.active + this.waiting.length) / this.concurrency) * this.checkS));
  }
}

// KEYS: address, pair, account, account's next allowed time, device. ARGV: now (ms), window (s),
// max per address, max per account (pair and device), slow-down after, first delay (ms), longest
// delay (ms), trusted device (1/0). Answers {0, trusted} when the attempt may go on (it is
// counted), else {limit, seconds to wait}: 1 address, 2 pair, 3 account slowed down.
const reserve = luaCommand<[number, number]>(
  'fleetLoginReserve',
  `local now = tonumber(ARGV[1])
   local window = tonumber(ARGV[2])
   local function count(k) return tonumber(redis.call('GET', k) or '0') end
   local function left(k) local t = redis.call('TTL', k) if t < 1 then t = 1 end return t end
   if count(KEYS[1]) >= tonumber(ARGV[3]) then return {1, left(KEYS[1])} end
   if count(KEYS[2]) >= tonumber(ARGV[4]) then return {2, left(KEYS[2])} end
   local trusted = ARGV[8] == '1' and count(KEYS[5]) < tonumber(ARGV[4])
   if not trusted then
     local f = count(KEYS[3])
     local after = tonumber(ARGV[5])
     if f >= after then
       local nxt = tonumber(redis.call('GET', KEYS[4]) or '0')
       if now < nxt then return {3, math.ceil((nxt - now) / 1000)} end
       local d = math.min(tonumber(ARGV[6]) * 2 ^ math.min(f - after, 40), tonumber(ARGV[7]))
       redis.call('SET', KEYS[4], string.format('%d', now + d), 'PX', window * 1000)
     end
   end
   local function bump(k, sliding)
     redis.call('INCR', k)
     if sliding then redis.call('EXPIRE', k, window) else redis.call('EXPIRE', k, window, 'NX') end
   end
   bump(KEYS[1], false)
   bump(KEYS[2], false)
   if trusted then bump(KEYS[5], false) else bump(KEYS[3], true) end
   if trusted then return {0, 1} end
   return {0, 0}`,
);

// After the check. KEYS: address, pair, account, device. ARGV: `ok` (the password matched: the
// attempt's counts go back and the pair's and the device's failures are forgiven) or `undo` (never
// checked: its counts go back); trusted (1/0).
const settle = luaCommand<number>(
  'fleetLoginSettle',
  `local function down(k) if tonumber(redis.call('GET', k) or '0') > 1 then redis.call('DECR', k) else redis.call('DEL', k) end end
   local ok = ARGV[1] == 'ok'
   down(KEYS[1])
   if ok then redis.call('DEL', KEYS[2]) else down(KEYS[2]) end
   if ARGV[2] == '1' then
     if ok then redis.call('DEL', KEYS[4]) else down(KEYS[4]) end
   else
     down(KEYS[3])
   end
   return 1`,
);

export interface Attempt {
  /** The client address (req.ip: TRUST_PROXY applied). */
  ip: string;
  /** What the client typed as its login. */
  login: string;
  /** The account it names; null when none. */
  userId: string | null;
  /** The `fleet_device` cookie, if sent. */
  deviceCookie: string | undefined;
}

export interface LoginGuardOptions {
  redis: Redis;
  prefix: string;
  limits: LoginLimits;
  /** Signs device cookies: JWT_SECRET (empty: a random key per process, like the sessions). */
  secret: string;
  metrics: Metrics<'api'>;
}

type Result = 'ok' | 'wrong' | 'address_limit' | 'pair_limit' | 'account_slowed' | 'busy';

export class LoginGuard {
  private readonly gate: HashGate;
  private readonly key: Buffer;
  private readonly attempts;
  private readonly waiting;

  constructor(private readonly o: LoginGuardOptions) {
    this.gate = new HashGate(o.limits.hashConcurrency, o.limits.hashQueue);
    this.key = createHash('sha256').update('fleet login device cookie\0').update(o.secret || randomBytes(32)).digest();
    this.attempts = o.metrics.counter('fleet_api_login_attempts_total');
    this.waiting = o.metrics.gauge('fleet_api_login_checks_waiting');
  }

  /**
   * One login attempt: counted (429 over a limit), then `check` (the password comparison) run when
   * the gate has room (503 when its queue is full), then settled. Answers whether the password
   * matched, and on success the device cookie to set.
   */
  async attempt(a: Attempt, check: () => Promise<boolean>): Promise<{ ok: boolean; device: string | null }> {
    const L = this.o.limits;
    const net = clientNet(a.ip);
    const account = a.userId ?? `name:${createHash('sha256').update(a.login.trim().toLowerCase()).digest('hex').slice(0, 32)}`;
    const device = this.readDevice(a.deviceCookie);
    const trusted = device !== null && a.userId !== null && device.userId === a.userId;
    const k = redisKeys(this.o.prefix, this.o.redis).login;
    const keys = [k(`addr:${net}`), k(`pair:${account}:${net}`), k(`acct:${account}`), k(`next:${account}`), k(`dev:${device?.nonce ?? '-'}`)];

    let verdict: [number, number];
    try {
      verdict = await reserve(this.o.redis, 5, ...keys, Date.now(), L.windowS, L.maxPerAddress, L.maxPerAccount, L.slowdownAfter, L.delayS * 1000, L.delayMaxS * 1000, trusted ? 1 : 0);
    } catch {
      throw new HttpError(503, 'login unavailable: the attempt counter (Redis) did not answer; retry', { retryAfterS: 2 });
    }
    const [limit, wait] = verdict;
    if (limit !== 0) throw this.refusal(limit, wait);
    const isTrusted = wait === 1;
    const settleKeys = [keys[0]!, keys[1]!, keys[2]!, keys[4]!];
    const undo = () => settle(this.o.redis, 4, ...settleKeys, 'undo', isTrusted ? 1 : 0).catch(() => {});

    const entered = this.gate.enter();
    if (entered === null) {
      await undo();
      this.count('busy');
      throw new HttpError(503, 'login busy: too many password checks at once; retry', { retryAfterS: this.gate.retryAfterS() });
    }
    this.waiting.set(this.gate.waitingCount);
    await entered;
    this.waiting.set(this.gate.waitingCount);
    const started = process.hrtime.bigint();
    let ok: boolean;
    try {
      ok = await check();
    } catch (e) {
      this.gate.leave();
      await undo();
      throw e;
    }
    this.gate.leave(Number(process.hrtime.bigint() - started) / 1e9);
    this.waiting.set(this.gate.waitingCount);
    this.count(ok ? 'ok' : 'wrong');
    if (!ok) return { ok, device: null };
    await settle(this.o.redis, 4, ...settleKeys, 'ok', isTrusted ? 1 : 0).catch(() => {});
    return { ok, device: this.signDevice(a.userId!, trusted && device ? device.nonce : randomBytes(16).toString('base64url')) };
  }

  private refusal(limit: number, waitS: number): HttpError {
    if (limit === 1) {
      this.count('address_limit');
      return new HttpError(429, `too many failed logins from your address; try again in ${waitS} s`, { retryAfterS: waitS });
    }
    if (limit === 2) {
      this.count('pair_limit');
      return new HttpError(429, `too many failed logins for this account from your address; try again in ${waitS} s`, { retryAfterS: waitS });
    }
    this.count('account_slowed');
    return new HttpError(429, `logins to this account are slowed down after many failed attempts; try again in ${waitS} s (a browser that logged in to it before is not slowed down)`, {
      retryAfterS: waitS,
    });
  }

  private count(r: Result): void {
    this.attempts.labels(r).inc();
  }

  private mac(body: string): string {
    return createHmac('sha256', this.key).update(body).digest('base64url');
  }

  signDevice(userId: string, nonce: string): string {
    const body = `v1.${userId}.${nonce}`;
    return `${body}.${this.mac(body)}`;
  }

  /** The user and nonce of a device cookie this api signed, or null. */
  readDevice(cookie: string | undefined): { userId: string; nonce: string } | null {
    if (!cookie || cookie.length > 200) return null;
    const m = /^v1\.([0-9a-f-]{36})\.([A-Za-z0-9_-]{16,43})\.([A-Za-z0-9_-]{43})$/.exec(cookie);
    if (!m) return null;
    const want = Buffer.from(this.mac(`v1.${m[1]}.${m[2]}`));
    const got = Buffer.from(m[3]!);
    return got.length === want.length && timingSafeEqual(got, want) ? { userId: m[1]!, nonce: m[2]! } : null;
  }
}

/** Sets the device cookie: HttpOnly, SameSite=Strict, sent only to /auth. */
export function setDeviceCookie(reply: FastifyReply, value: string, secure: boolean): void {
  reply.setCookie(DEVICE_COOKIE, value, { path: '/auth', httpOnly: true, sameSite: 'strict', secure, maxAge: DEVICE_COOKIE_TTL_S });
}
