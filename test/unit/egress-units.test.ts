// The egress policy (lib/infra/egress.ts) on its own: which addresses are refused, in every spelling a
// URL can give them (checked with properties over whole IPv4/IPv6 ranges against an oracle written
// from the IANA special-purpose registries, independent of ipaddr.js), what the allow list
// unlocks and what it never does, and how egressPost connects: only to checked addresses, never
// following a redirect, with generic errors, with the URL's host name as Host and TLS server name.
// Every connection made here goes to a listener on the loopback interface.
import t from 'tap';
import type { IncomingMessage, ServerResponse } from 'node:http';
import fc from 'fast-check';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import type { LookupAddress } from 'node:dns';
import { EgressPolicy, EgressRefused, EgressUrlError, egressPost, isMetadataName, pinnedLookup, parseCidrList } from '../../lib/infra/egress.js';

const strict = new EgressPolicy();

const v4 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
const v4int = (s: string) => s.split('.').reduce((a, x) => a * 256 + Number(x), 0);
const cidr4 = (c: string): [number, number] => {
  const [a, b] = c.split('/');
  return [v4int(a!), Number(b)];
};
const in4 = (n: number, [base, bits]: [number, number]) => bits === 0 || Math.floor(n / 2 ** (32 - bits)) === Math.floor(base / 2 ** (32 - bits));

// IANA IPv4 special-purpose registry (RFC 6890 and successors): nothing in these may be reached.
const REFUSED_V4 = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24',
  '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
].map(cidr4);
// Anycast service ranges ipaddr.js also sets apart (AS112, AMT); refusing them costs nothing.
const ALSO_REFUSED_V4 = ['192.175.48.0/24', '192.31.196.0/24', '192.52.193.0/24'].map(cidr4);
const oracleRefused4 = (n: number) => [...REFUSED_V4, ...ALSO_REFUSED_V4].some((c) => in4(n, c));

/** An address inside `cidr`. */
const inCidr4 = (c: string) => {
  const [base, bits] = cidr4(c);
  return fc.integer({ min: 0, max: 2 ** (32 - bits) - 1 }).map((off) => v4(base + off));
};
const anyV4 = fc.integer({ min: 0, max: 2 ** 32 - 1 });

/** The ways a URL can name one IPv4 address; all must be judged alike. */
function spellings(a: string): string[] {
  const n = v4int(a);
  const [w, x, y, z] = a.split('.').map(Number) as [number, number, number, number];
  const hex = (k: number) => k.toString(16).padStart(2, '0');
  return [
    `http://${a}/`,
    `http://${n}/`, // one decimal number
    `http://0x${n.toString(16)}/`, // one hexadecimal number
    `http://${w}.${(x << 16) | (y << 8) | z}/`, // a.b (b: 24 bits)
    `http://0${w.toString(8)}.${x}.${y}.${z}/`, // octal first part
    `https://${a}.:8443/path`, // trailing dot, other port
    `http://[::ffff:${a}]/`, // IPv4-mapped IPv6
    `http://[::ffff:${hex(w)}${hex(x)}:${hex(y)}${hex(z)}]/`,
    `http://[64:ff9b::${a}]/`, // NAT64 (RFC 6052 well-known prefix)
  ];
}

function refusedUrl(p: EgressPolicy, url: string): boolean {
  try {
    p.checkHost(EgressPolicy.parseUrl(url));
    return false;
  } catch (e) {
    if (e instanceof EgressRefused) return true;
    throw e;
  }
}

t.test('WHATWG host parsing: numeric spellings become the dotted address before the check', async (t) => {
  t.equal(new URL('http://2130706433/').hostname, '127.0.0.1');
  t.equal(new URL('http://127.1/').hostname, '127.0.0.1');
  t.equal(new URL('http://0x7f.1/').hostname, '127.0.0.1');
  t.equal(new URL('http://0177.0.0.1/').hostname, '127.0.0.1');
  t.equal(new URL('http://%31%32%37.0.0.1/').hostname, '127.0.0.1', 'percent-encoded');
  t.equal(new URL('http://①②⑦.0.0.1/').hostname, '127.0.0.1', 'full-width digits (IDNA mapping)');
  t.equal(new URL('http://0/').hostname, '0.0.0.0');
  for (const u of ['http://2130706433/', 'http://127.1/', 'http://%31%32%37.0.0.1/', 'http://①②⑦.0.0.1/', 'http://0/', 'http://[::1]/', 'http://[::]/', 'http://[::127.0.0.1]/']) {
    t.ok(refusedUrl(strict, u), `refused: ${u}`);
  }
});

t.test('every IPv4 address is judged by the registry, in every spelling (property)', async (t) => {
  fc.assert(
    fc.property(anyV4, (n) => {
      const a = v4(n);
      const want = oracleRefused4(n);
      if ((strict.refusal(a) !== null) !== want) return false;
      return spellings(a).every((u) => refusedUrl(strict, u) === want);
    }),
    { numRuns: 3000 },
  );
  t.pass('3000 random addresses');
});

t.test('each refused IPv4 range, sampled (property)', async (t) => {
  const ranges = ['0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16', '198.18.0.0/15', '224.0.0.0/4', '240.0.0.0/4'];
  for (const r of ranges) {
    fc.assert(fc.property(inCidr4(r), (a) => spellings(a).every((u) => refusedUrl(strict, u))), { numRuns: 200 });
    t.pass(`${r}: every spelling refused`);
  }
  t.ok(refusedUrl(strict, 'http://255.255.255.255/'), 'broadcast');
});

t.test('IPv6: loopback, unspecified, unique local, link-local, multicast, outside 2000::/3 refused; global unicast allowed (property)', async (t) => {
  const word = fc.integer({ min: 0, max: 0xffff });
  const words = (n: number) => fc.array(word, { minLength: n, maxLength: n });
  const hex = (ws: number[]) => ws.map((w) => w.toString(16)).join(':');
  const prefixed = (first: number, mask: number) =>
    fc.tuple(word, words(7)).map(([w, rest]) => `${((first & mask) | (w & ~mask & 0xffff)).toString(16)}:${hex(rest)}`);
  const refusedRanges: [string, fc.Arbitrary<string>][] = [
    ['fc00::/7 unique local', prefixed(0xfc00, 0xfe00)],
    ['fe80::/10 link-local', prefixed(0xfe80, 0xffc0)],
    ['ff00::/8 multicast', prefixed(0xff00, 0xff00)],
    ['::/96 IPv4-compatible', words(2).map((w) => `::${hex(w)}`)],
    ['2001:db8::/32 documentation', words(6).map((w) => `2001:db8:${hex(w)}`)],
    ['4000::/2 not global unicast', prefixed(0x4000, 0xc000)],
  ];
  for (const [name, arb] of refusedRanges) {
    fc.assert(fc.property(arb, (a) => strict.refusal(a) !== null && refusedUrl(strict, `http://[${a}]:8080/`)), { numRuns: 300 });
    t.pass(`${name}: refused`);
  }
  // 2a00::/12 (a regional registry's block) holds no special-purpose range.
  fc.assert(fc.property(prefixed(0x2a00, 0xfff0), (a) => strict.refusal(a) === null && !refusedUrl(strict, `https://[${a}]/`)), { numRuns: 300 });
  t.pass('2a00::/12: allowed');
  for (const a of ['::1', '::', 'fd00:ec2::254', 'fe80::1%eth0', '2002:7f00:1::1', '2001::1', '64:ff9b:1::1']) t.not(strict.refusal(a), null, `refused: ${a}`);
  t.equal(strict.refusal('2606:4700:4700::1111'), null);
  t.equal(strict.refusal('64:ff9b::8.8.8.8'), null, 'NAT64 of a public address is allowed');
  t.equal(strict.refusal('::ffff:8.8.8.8'), null, 'IPv4-mapped public address is allowed');
});

t.test('metadata services: refused by name (no DNS query) and by address', async (t) => {
  for (const h of ['metadata.google.internal', 'METADATA.google.internal.', 'metadata', 'metadata.goog', 'instance-data', 'instance-data.ec2.internal', 'instance-data.eu-west-1.compute.internal', 'x.metadata.google.internal']) {
    t.ok(isMetadataName(h), h);
    t.ok(refusedUrl(strict, `http://${h}/computeMetadata/v1/`), `refused: ${h}`);
  }
  for (const h of ['metadata.example.com', 'my-metadata.internal', 'example.com']) t.notOk(isMetadataName(h), `not a metadata name: ${h}`);
  for (const a of ['169.254.169.254', '100.100.100.200', 'fd00:ec2::254', '::ffff:169.254.169.254', '64:ff9b::a9fe:a9fe']) t.not(strict.refusal(a), null, a);
});

t.test('the allow list: unlocks what it names, never unspecified, link-local, multicast, broadcast or metadata', async (t) => {
  const p = new EgressPolicy({ allowCidrs: ' 10.0.0.0/8, 192.168.1.5, fd12::/16,127.0.0.1/32' });
  t.equal(p.refusal('10.1.2.3'), null);
  t.equal(p.refusal('192.168.1.5'), null, 'a bare address is one host');
  t.not(p.refusal('192.168.1.6'), null);
  t.equal(p.refusal('fd12::7'), null);
  t.not(p.refusal('fd13::7'), null);
  t.equal(p.refusal('127.0.0.1'), null);
  t.equal(p.refusal('::ffff:127.0.0.1'), null, 'the IPv4-mapped form of an allowed address');
  t.not(p.refusal('127.0.0.2'), null);
  t.not(p.refusal('::1'), null);
  t.ok(refusedUrl(p, 'http://metadata.google.internal/'), 'metadata names stay refused');
  const all = new EgressPolicy({ allowCidrs: '0.0.0.0/0,::/0' });
  for (const a of ['0.0.0.0', '169.254.169.254', '224.0.0.1', '255.255.255.255', '100.100.100.200', '::', 'fe80::1', 'ff02::1', 'fd00:ec2::254', '::ffff:169.254.169.254']) {
    t.not(all.refusal(a), null, `never: ${a}`);
  }
  t.equal(all.refusal('10.0.0.1'), null);
  t.throws(() => parseCidrList('10.0.0.0/33'), /WEBHOOK_ALLOW_CIDRS/);
  t.throws(() => new EgressPolicy({ allowCidrs: 'not-an-address' }));
  t.same(parseCidrList(''), []);
});

t.test('URL syntax: absolute http(s) only, no credentials', async (t) => {
  for (const u of ['ftp://example.com/', 'not a url', '/relative', 'http://user:pw@example.com/', 'http://user@example.com/', 'file:///etc/passwd', 'gopher://127.0.0.1:6379/_']) {
    t.throws(() => EgressPolicy.parseUrl(u), EgressUrlError, u);
  }
  t.equal(EgressPolicy.parseUrl('https://Hooks.Example.com/x?y=1').host, 'hooks.example.com');
});

t.test('DNS: every resolved address is checked; a failure is not a refusal', async (t) => {
  const r = await new EgressPolicy().resolve(new URL('http://localhost/')).catch((e) => e);
  t.type(r, EgressRefused, 'localhost (system resolver: /etc/hosts) resolves to loopback');
  t.match(r.reason, /^localhost resolves to 127\.0\.0\.1 \(loopback\)/);
  const mixed = new EgressPolicy({ resolver: async () => [{ address: '8.8.8.8', family: 4 }, { address: '10.0.0.7', family: 4 }] });
  const m = await mixed.resolve(new URL('http://mixed.example/')).catch((e) => e);
  t.type(m, EgressRefused, 'one refused address among public ones refuses the name');
  t.match(m.reason, /10\.0\.0\.7 \(private\)/);
  const six = new EgressPolicy({ resolver: async () => [{ address: '2a00:1450::1', family: 6 }, { address: '::ffff:127.0.0.1', family: 6 }] });
  t.type(await six.resolve(new URL('http://six.example/')).catch((e) => e), EgressRefused);
  const ok = new EgressPolicy({ resolver: async () => [{ address: '8.8.8.8', family: 4 }, { address: '8.8.8.8', family: 4 }, { address: '2a00:1450::1', family: 6 }] });
  t.same((await ok.resolve(new URL('http://ok.example/'))).addresses.map((a) => a.address), ['8.8.8.8', '2a00:1450::1'], 'deduplicated');
  let asked = 0;
  const metadata = new EgressPolicy({ resolver: async () => (asked++, []) });
  await t.rejects(metadata.resolve(new URL('http://metadata.google.internal/')), EgressRefused);
  t.equal(asked, 0, 'a metadata name is refused before any DNS query');
  const none = new EgressPolicy({ resolver: async () => Promise.reject(Object.assign(new Error('nope'), { code: 'ENOTFOUND' })) });
  const e = await none.resolve(new URL('http://gone.example/')).catch((x) => x);
  t.notOk(e instanceof EgressRefused);
  t.equal(e.code, 'ENOTFOUND');
  const slow = new EgressPolicy({ resolver: () => new Promise(() => {}), resolveTimeoutMs: 100 });
  t.equal((await slow.resolve(new URL('http://slow.example/')).catch((x) => x)).code, 'ETIMEOUT');
});

t.test('pinnedLookup answers with the checked addresses only, for that host only', async (t) => {
  const target = { url: new URL('http://h.example/'), host: 'h.example', addresses: [{ address: '127.0.0.1', family: 4 }, { address: '::1', family: 6 }] as LookupAddress[] };
  const look = pinnedLookup(target);
  const ask = (host: string, opts: object) =>
    new Promise<unknown>((resolve) => (look as unknown as (h: string, o: object, cb: (...a: unknown[]) => void) => void)(host, opts, (...a) => resolve(a)));
  t.same(await ask('h.example', {}), [null, '127.0.0.1', 4]);
  t.same(await ask('h.example', { all: true }), [null, target.addresses]);
  t.same(await ask('h.example', { family: 6 }), [null, '::1', 6]);
  t.same(await ask('h.example', { all: true, family: 4 }), [null, [target.addresses[0]]]);
  t.match(await ask('other.example', {}), [{ code: 'ENOTFOUND' }]);
});

// --- egressPost against real listeners on the loopback interface ---

interface Listener {
  server: Server;
  port: number;
  hits: { host: string | undefined; url: string | undefined; body: string }[];
}

async function listen(host: string, handler: (req: IncomingMessage, res: ServerResponse) => void = (_q, r) => r.end('ok')): Promise<Listener> {
  const l: Listener = { server: null as unknown as Server, port: 0, hits: [] };
  l.server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d));
    req.on('end', () => {
      l.hits.push({ host: req.headers.host, url: req.url, body });
      handler(req, res);
    });
  });
  await new Promise<void>((r) => l.server.listen(0, host, r));
  l.port = (l.server.address() as AddressInfo).port;
  t.teardown(() => {
    l.server.closeAllConnections();
    return new Promise<void>((r) => l.server.close(() => r()));
  });
  return l;
}

const opts = { headers: { 'Content-Type': 'application/json' }, body: '{"a":1}', timeoutMs: 2000 };

t.test('egressPost: refused targets are never connected to; the customer-facing error is generic', async (t) => {
  const l = await listen('127.0.0.1');
  for (const u of [`http://127.0.0.1:${l.port}/`, `http://localhost:${l.port}/`, `http://2130706433:${l.port}/`, `http://[::ffff:127.0.0.1]:${l.port}/`]) {
    const r = await egressPost(strict, u, opts);
    t.match(r, { status: null, error: 'address not allowed', address: null }, u);
    t.match(r.detail, /loopback/, 'the reason is in the detail (for the log)');
  }
  t.equal(l.hits.length, 0, 'nothing reached the listener');
});

t.test('egressPost with the allow list: delivered with the host name as Host; redirects not followed; generic errors', async (t) => {
  const p = new EgressPolicy({ allowCidrs: '127.0.0.1/32' });
  const inside = await listen('127.0.0.2');
  const l = await listen('127.0.0.1', (req, res) => {
    if (req.url === '/redirect') res.writeHead(307, { Location: `http://127.0.0.2:${inside.port}/` }).end();
    else if (req.url === '/redirect-allowed') res.writeHead(302, { Location: `http://127.0.0.1:${l.port}/landed` }).end();
    else if (req.url === '/silent') return; // never answers
    else if (req.url === '/500') res.writeHead(500).end('no');
    else res.end('ok');
  });
  t.match(await egressPost(p, `http://localhost:${l.port}/hook?x=1`, opts), { status: 200, error: null, address: '127.0.0.1' });
  t.match(l.hits.at(-1), { host: `localhost:${l.port}`, url: '/hook?x=1', body: '{"a":1}' }, 'Host is the URL host, path and query kept');
  t.match(await egressPost(p, `http://127.0.0.1:${l.port}/redirect`, opts), { status: 307, error: 'HTTP 307' });
  t.match(await egressPost(p, `http://127.0.0.1:${l.port}/redirect-allowed`, opts), { status: 302, error: 'HTTP 302' });
  t.equal(inside.hits.length, 0, 'the redirect to 127.0.0.2 was not followed');
  t.notOk(l.hits.some((h) => h.url === '/landed'), 'nor one to an allowed address');
  t.match(await egressPost(p, `http://127.0.0.1:${l.port}/500`, opts), { status: 500, error: 'HTTP 500' });
  const start = Date.now();
  t.match(await egressPost(p, `http://127.0.0.1:${l.port}/silent`, { ...opts, timeoutMs: 300 }), { status: null, error: 'timeout' });
  t.ok(Date.now() - start < 2000, 'the deadline holds');
  // A closed port: find one by opening and closing a listener.
  const gone = await listen('127.0.0.1');
  const closedPort = gone.port;
  gone.server.close();
  await new Promise((r) => setTimeout(r, 50));
  t.match(await egressPost(p, `http://127.0.0.1:${closedPort}/`, opts), { status: null, error: 'connection refused' });
  t.match(await egressPost(p, `https://127.0.0.1:${l.port}/`, opts), { status: null, error: 'connection failed' }, 'TLS to a plain-HTTP port');
  t.match(await egressPost(new EgressPolicy({ resolver: async () => [] }), 'http://nothing.example/', opts), { status: null, error: 'connection failed' }, 'no address');
  t.match(await egressPost(p, 'ftp://127.0.0.1/', opts), { error: 'address not allowed' });
});

t.test('egressPost pins the checked addresses: DNS answering differently later (rebinding) changes nothing', async (t) => {
  const p0 = await listen('127.0.0.1');
  const other = await listen('127.0.0.2');
  let calls = 0;
  // First answer: the allowed address; every answer after that: one the allow list leaves out.
  const resolver = async (): Promise<LookupAddress[]> => (calls++ === 0 ? [{ address: '127.0.0.1', family: 4 }] : [{ address: '127.0.0.2', family: 4 }]);
  const p = new EgressPolicy({ allowCidrs: '127.0.0.1/32', resolver });
  t.match(await egressPost(p, `http://rebind.example:${p0.port}/`, opts), { status: 200, error: null, address: '127.0.0.1' });
  t.equal(calls, 1, 'one resolution per delivery: the HTTP client asked no one else');
  t.equal(p0.hits.length, 1);
  t.match(await egressPost(p, `http://rebind.example:${other.port}/`, opts), { error: 'address not allowed' }, 'the next delivery checks the new answer');
  t.equal(other.hits.length, 0);
});

t.test('egressPost over TLS names the URL host as server name (SNI), and none for an address', async (t) => {
  const hellos: Buffer[] = [];
  const tcp = createTcpServer((sock) => {
    sock.once('data', (d) => {
      hellos.push(d);
      sock.destroy();
    });
  });
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => tcp.close(() => r())));
  const port = (tcp.address() as AddressInfo).port;
  const p = new EgressPolicy({ allowCidrs: '127.0.0.1/32', resolver: async () => [{ address: '127.0.0.1', family: 4 }] });
  t.match(await egressPost(p, `https://hooks.example.test:${port}/`, opts), { error: 'connection failed' });
  t.ok(hellos[0]?.includes('hooks.example.test'), 'the ClientHello carries the host name');
  t.match(await egressPost(p, `https://127.0.0.1:${port}/`, opts), { error: 'connection failed' });
  t.ok(hellos[1], 'a ClientHello arrived');
  t.notOk(hellos[1]?.includes('127.0.0.1'), 'no server name for an address');
});
