// The client's address behind proxies, decided by one rule in the gateway and the api: the
// right-most X-Forwarded-For entry that is not a trusted proxy (proxy-addr, the module Express and
// Fastify use). Trusting the left-most entry, or every hop, lets any client choose the address the
// rejection log and the login limiter see: it only has to send X-Forwarded-For itself.
//
// TRUST_PROXY: empty (no proxy: the peer is the client), a number of proxy hops in front (1: one
// load balancer or nginx), or the proxies' addresses (comma-separated addresses, CIDRs, or
// proxy-addr's names loopback, linklocal, uniquelocal).
import proxyaddr from 'proxy-addr';

/** Whether the address at `hop` (0: the peer) is a trusted proxy; null: trust none. */
export type TrustProxy = ((addr: string, hop: number) => boolean) | null;

export function compileTrust(setting: string): TrustProxy {
  const v = setting.trim();
  if (v === '' || v === '0' || /^(false|no|off)$/i.test(v)) return null;
  if (/^(true|yes|on)$/i.test(v)) {
    throw new Error('must name the proxies: "true" would trust every hop, so any client could choose its address; give the number of proxy hops (e.g. 1) or their addresses');
  }
  if (/^[0-9]+$/.test(v)) {
    const hops = Number(v);
    if (hops > 32) throw new Error('must be at most 32 proxy hops');
    return (_addr, hop) => hop < hops;
  }
  try {
    return proxyaddr.compile(v.split(',').map((x) => x.trim()).filter(Boolean));
  } catch (e) {
    throw new Error(`must be a number of proxy hops or comma-separated addresses or CIDRs (${(e as Error).message})`);
  }
}

/** The client of a connection from `peer` that carried `forwardedFor` (may be empty). */
export function clientAddress(peer: string, forwardedFor: string, trust: TrustProxy): string {
  if (trust === null || forwardedFor === '') return peer;
  const socket = { remoteAddress: peer };
  return proxyaddr({ headers: { 'x-forwarded-for': forwardedFor }, socket, connection: socket } as never, trust);
}
