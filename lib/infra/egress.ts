// Egress policy: where the service may send HTTP requests on a customer's behalf (webhooks). One
// policy for both ends: the api checks a URL when it is registered, the worker checks it again at
// every delivery and then connects only to the addresses it checked.
//
// Refused: loopback, private (RFC 1918, IPv6 unique local fc00::/7), link-local (169.254/16,
// fe80::/10), carrier-grade NAT (100.64/10), multicast, unspecified (0.0.0.0/8, ::), broadcast,
// reserved and documentation ranges, IPv6 outside global unicast (2000::/3), IPv4-compatible IPv6
// (::/96), 6to4 and Teredo; IPv4-mapped (::ffff:a.b.c.d), IPv4-translated and NAT64 (64:ff9b::/96)
// addresses are judged by the IPv4 address they carry; and the cloud metadata host names
// (metadata.google.internal, metadata, instance-data, …). Address classes come from ipaddr.js.
//
// Hosts are read the way browsers read them: `new URL` (the WHATWG parser) turns `2130706433`,
// `127.1`, `0x7f.1` and `0177.0.0.1` into 127.0.0.1 before anything here looks at them, and the
// same parsed URL is what the request is made from, so the check and the connection agree on the
// host. A host name is resolved once (getaddrinfo, as the HTTP client would), EVERY address is
// checked, and the connection uses those addresses through a lookup function that returns them
// (pinning): a DNS answer that changes between check and connect (rebinding) is never used.
//
// WEBHOOK_ALLOW_CIDRS lets an on-premises installation reach its own receivers (e.g.
// `10.0.0.0/8,192.168.1.5/32`). It never unlocks unspecified, link-local, multicast or broadcast
// addresses, nor the metadata services' addresses and names.
//
// What a customer sees is generic (`address not allowed`, `timeout`, `connection refused`,
// `connection failed`, `HTTP <status>`): the same words whether the target was internal or not.
// The reasons (which class, which address) go to the service log only.
import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { request as httpRequest, type IncomingMessage, type ClientRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

type IP = ipaddr.IPv4 | ipaddr.IPv6;

/** The error text customers see for a refused target. */
export const NOT_ALLOWED = 'address not allowed';

/** Names of cloud metadata services. Refused by name (before any DNS query) and whatever the allow list says. */
const METADATA_NAMES = ['metadata', 'metadata.google.internal', 'metadata.goog', 'instance-data', 'instance-data.ec2.internal', 'metadata.tencentyun.com'];
/** Metadata service addresses outside the link-local range (which is never allowed anyway). */
const METADATA_ADDRESSES = ['100.100.100.200', 'fd00:ec2::254'].map((a) => ipaddr.parse(a).toNormalizedString());
/** Classes the allow list cannot unlock. */
const NEVER = new Set(['unspecified', 'linkLocal', 'multicast', 'broadcast', 'metadata']);

const GLOBAL_UNICAST_V6 = ipaddr.IPv6.parseCIDR('2000::/3');
const NAT64_WKP = ipaddr.IPv6.parseCIDR('64:ff9b::/96');

/** A target refused by the policy; `reason` is for the log, never for the customer. */
export class EgressRefused extends Error {
  constructor(readonly reason: string) {
    super(NOT_ALLOWED);
    this.name = 'EgressRefused';
  }
}

/** A URL that cannot be a webhook target at all (syntax); the message is for the customer. */
export class EgressUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EgressUrlError';
  }
}

export type Resolver = (host: string) => Promise<LookupAddress[]>;

const systemResolver: Resolver = (host) => dnsLookup(host, { all: true, verbatim: true });

/** The host of a parsed URL without IPv6 brackets and trailing dots, lower case. */
export function bareHost(u: URL): string {
  const h = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  return h.toLowerCase().replace(/\.+$/, '');
}

export function isMetadataName(host: string): boolean {
  const h = host.toLowerCase().replace(/\.+$/, '');
  if (METADATA_NAMES.some((m) => h === m || (m.includes('.') && h.endsWith(`.${m}`)))) return true;
  // Regional and project-qualified forms (instance-data.eu-west-1.compute.internal, metadata.<zone>.internal).
  return /^(metadata|instance-data)\./.test(h) && h.endsWith('.internal');
}

/** The IPv4 address an IPv6 address carries (mapped, translated, NAT64), or null. */
function embeddedV4(ip: ipaddr.IPv6): ipaddr.IPv4 | null {
  const r = ip.range();
  if (r === 'ipv4Mapped' || r === 'rfc6145' || ip.match(NAT64_WKP)) {
    const p = ip.parts;
    return new ipaddr.IPv4([p[6]! >> 8, p[6]! & 0xff, p[7]! >> 8, p[7]! & 0xff]);
  }
  return null;
}

/** The class that makes `ip` refused, or null for a public (globally routable unicast) address. */
export function addressClass(ip: IP): string | null {
  if (METADATA_ADDRESSES.includes(ip.toNormalizedString())) return 'metadata';
  if (ip.kind() === 'ipv4') {
    const r = (ip as ipaddr.IPv4).range();
    return r === 'unicast' ? null : r;
  }
  const v6 = ip as ipaddr.IPv6;
  const v4 = embeddedV4(v6);
  if (v4) {
    const c = addressClass(v4);
    return c && `${c} in ${v6.range() === 'rfc6052' ? 'NAT64' : 'IPv4-mapped'} IPv6`;
  }
  const r = v6.range();
  if (r !== 'unicast') return r;
  // ::a.b.c.d (IPv4-compatible, deprecated) and everything else outside 2000::/3 is not global unicast.
  if (v6.parts.slice(0, 6).every((x) => x === 0)) return 'IPv4-compatible IPv6';
  if (!v6.match(GLOBAL_UNICAST_V6)) return 'reserved';
  return null;
}

export function parseCidrList(list: string): [IP, number][] {
  return list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      // A bare address is one host.
      const cidr = s.includes('/') ? s : `${s}/${ipaddr.parse(s).kind() === 'ipv4' ? 32 : 128}`;
      try {
        return ipaddr.parseCIDR(cidr);
      } catch {
        throw new Error(`WEBHOOK_ALLOW_CIDRS: ${JSON.stringify(s)} is not an address or CIDR`);
      }
    });
}

export interface EgressOptions {
  /** WEBHOOK_ALLOW_CIDRS: comma-separated CIDRs (or addresses) that may be reached although internal. */
  allowCidrs?: string;
  resolver?: Resolver;
  /** How long a DNS resolution may take before it counts as failed. */
  resolveTimeoutMs?: number;
}

export interface Target {
  url: URL;
  /** The host as connected to: a name, or an address without brackets. */
  host: string;
  /** Every address the host resolved to, all of them checked. */
  addresses: LookupAddress[];
}

export class EgressPolicy {
  private readonly allow: [IP, number][];
  private readonly resolver: Resolver;
  private readonly resolveTimeoutMs: number;

  constructor(opts: EgressOptions = {}) {
    this.allow = parseCidrList(opts.allowCidrs ?? '');
    this.resolver = opts.resolver ?? systemResolver;
    this.resolveTimeoutMs = opts.resolveTimeoutMs ?? 5000;
  }

  private allowListed(ip: IP): boolean {
    const forms: IP[] = [ip];
    if (ip.kind() === 'ipv6') {
      const v4 = embeddedV4(ip as ipaddr.IPv6);
      if (v4) forms.push(v4);
    } else forms.push((ip as ipaddr.IPv4).toIPv4MappedAddress());
    return forms.some((f) => this.allow.some(([net, bits]) => net.kind() === f.kind() && f.match(net, bits)));
  }

  /** Why `address` may not be connected to (for the log), or null if it may. */
  refusal(address: string): string | null {
    let ip: IP;
    try {
      ip = ipaddr.parse(address);
    } catch {
      return `not an IP address: ${address}`;
    }
    const c = addressClass(ip);
    if (c === null) return null;
    const base = c.split(' ')[0]!;
    if (!NEVER.has(base) && this.allowListed(ip)) return null;
    return `${address} (${c})`;
  }

  /**
   * Parses a webhook URL: absolute, http or https, no user name or password. Throws EgressUrlError
   * with a message for the customer. The host is not looked at here (see check).
   */
  static parseUrl(raw: string): URL {
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      throw new EgressUrlError('url is not a valid absolute URL');
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new EgressUrlError('url must be http:// or https://');
    if (u.username || u.password) throw new EgressUrlError('url must not carry credentials; the signature authenticates the sender');
    return u;
  }

  /** Refuses a literal address or a metadata name, without DNS. Returns the bare host. */
  checkHost(u: URL): string {
    const host = bareHost(u);
    if (ipaddr.isValid(host)) {
      const why = this.refusal(host);
      if (why) throw new EgressRefused(why);
    } else if (isMetadataName(host)) throw new EgressRefused(`${host} is a metadata service name`);
    return host;
  }

  /**
   * The addresses to connect to for `u`: the literal address, or every address its host name
   * resolves to, each checked. Throws EgressRefused when any is refused, or the resolver's error
   * (ENOTFOUND, ETIMEOUT, …) when the name does not resolve.
   */
  async resolve(u: URL): Promise<Target> {
    const host = this.checkHost(u);
    if (ipaddr.isValid(host)) return { url: u, host, addresses: [{ address: host, family: ipaddr.parse(host).kind() === 'ipv4' ? 4 : 6 }] };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`no DNS answer for ${host} within ${this.resolveTimeoutMs} ms`), { code: 'ETIMEOUT' })), this.resolveTimeoutMs);
    });
    let found: LookupAddress[];
    try {
      found = await Promise.race([this.resolver(host), timeout]);
    } finally {
      clearTimeout(timer);
    }
    const addresses = found.filter((a, i) => found.findIndex((b) => b.address === a.address) === i);
    if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: 'ENOTFOUND' });
    const refused = addresses.map((a) => this.refusal(a.address)).filter((x): x is string => x !== null);
    if (refused.length) throw new EgressRefused(`${host} resolves to ${refused.join(', ')}`);
    return { url: u, host, addresses };
  }
}

/**
 * A lookup function for net/http that answers with the checked addresses only: the connection
 * goes where the check looked, whatever DNS says by then.
 */
export function pinnedLookup(t: Target): LookupFunction {
  return ((hostname: string, options: unknown, callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void) => {
    const o = (typeof options === 'object' && options ? options : { family: options }) as { family?: number | string; all?: boolean };
    const family = o.family === 4 || o.family === 'IPv4' ? 4 : o.family === 6 || o.family === 'IPv6' ? 6 : 0;
    const list = t.addresses.filter((a) => family === 0 || a.family === family);
    if (hostname.toLowerCase().replace(/\.+$/, '') !== t.host || list.length === 0) {
      const e = Object.assign(new Error(`no checked address for ${hostname}`), { code: 'ENOTFOUND' });
      return process.nextTick(() => callback(e, o.all ? [] : '', undefined));
    }
    process.nextTick(() => (o.all ? callback(null, list) : callback(null, list[0]!.address, list[0]!.family)));
  }) as LookupFunction;
}

export interface PostResult {
  /** The HTTP status, when there was an answer. */
  status: number | null;
  /** null on a 2xx; else the generic text customers see. */
  error: string | null;
  /** What really happened (for the log only). */
  detail: string | null;
  /** The address connected to (for the log only). */
  address: string | null;
}

export interface PostOptions {
  headers: Record<string, string>;
  body: string;
  /** For everything: DNS, connect, TLS, the answer's status line and headers. */
  timeoutMs: number;
}

/** The generic text for a failed connection: the same words for any target. */
function genericError(e: NodeJS.ErrnoException): string {
  return e.code === 'ECONNREFUSED' ? 'connection refused' : 'connection failed';
}

/**
 * POSTs `body` to `rawUrl` under the policy: checks the target (all resolved addresses), connects
 * only to what was checked, never follows a redirect (a 3xx is `HTTP 3xx`), and reports failures in
 * generic words. Never throws.
 */
export async function egressPost(policy: EgressPolicy, rawUrl: string, o: PostOptions): Promise<PostResult> {
  const deadline = Date.now() + o.timeoutMs;
  const fail = (error: string, detail: string, address: string | null = null): PostResult => ({ status: null, error, detail, address });
  let target: Target;
  try {
    const u = EgressPolicy.parseUrl(rawUrl);
    target = await withDeadline(policy.resolve(u), deadline);
  } catch (e) {
    if (e instanceof EgressRefused) return fail(NOT_ALLOWED, e.reason);
    if (e instanceof EgressUrlError) return fail(NOT_ALLOWED, e.message);
    if (e instanceof DeadlineError) return fail('timeout', 'DNS resolution did not finish in time');
    const err = e as NodeJS.ErrnoException;
    return fail('connection failed', `DNS: ${err.code ?? ''} ${err.message}`.trim());
  }
  const u = target.url;
  const left = deadline - Date.now();
  if (left <= 0) return fail('timeout', 'no time left after DNS resolution');

  return new Promise<PostResult>((resolve) => {
    let settled = false;
    let address: string | null = target.addresses.length === 1 ? target.addresses[0]!.address : null;
    const settle = (r: PostResult) => {
      if (settled) return;
      settled = true;
      resolve(r);
    };
    const request = u.protocol === 'https:' ? httpsRequest : httpRequest;
    const req: ClientRequest = request({
      protocol: u.protocol,
      host: target.host,
      port: u.port || undefined,
      path: `${u.pathname}${u.search}`,
      method: 'POST',
      headers: { ...o.headers, 'Content-Length': String(Buffer.byteLength(o.body)) },
      // A new connection per delivery: no pooled socket outlives the check that allowed it.
      agent: false,
      lookup: pinnedLookup(target),
      // Host header and TLS server name stay the URL's host name (Node derives both from `host`).
    });
    // One deadline for the whole exchange; it also ends an answer whose body never finishes.
    const timer = setTimeout(() => {
      settle(fail('timeout', `no answer within ${o.timeoutMs} ms`, address));
      req.destroy();
    }, left);
    req.on('close', () => clearTimeout(timer));
    req.on('socket', (s) => s.on('connect', () => (address = s.remoteAddress ?? address)));
    req.on('response', (res: IncomingMessage) => {
      const status = res.statusCode ?? 0;
      const ok = status >= 200 && status < 300;
      const redirect = status >= 300 && status < 400 ? ` (redirect to ${String(res.headers.location ?? '').slice(0, 200)}, not followed)` : '';
      settle({ status, error: ok ? null : `HTTP ${status}`, detail: ok ? null : `HTTP ${status}${redirect}`, address });
      // The answer's body is not used: read at most 64 KiB of it, then hang up.
      let n = 0;
      res.on('data', (d: Buffer) => {
        n += d.length;
        if (n > 64 * 1024) req.destroy();
      });
      res.on('error', () => {});
    });
    req.on('error', (e: NodeJS.ErrnoException) => settle(fail(genericError(e), `${e.code ?? e.name}: ${e.message}`, address)));
    req.end(o.body);
  });
}

class DeadlineError extends Error {}

async function withDeadline<T>(p: Promise<T>, deadline: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DeadlineError('deadline')), Math.max(0, deadline - Date.now()))))]);
  } finally {
    clearTimeout(timer);
  }
}
