// The parts of the login limiter that need no server (api/login-guard.ts): which client an address
// counts as, the bounded queue of password checks, and the device cookie. test/servers/login-limits.test.ts
// holds the limits against the real api and Redis.
import t from 'tap';
import { clientNet, HashGate, LoginGuard } from '../../api/login-guard.js';
import { createMetrics } from '../../lib/infra/metrics.js';
import type { Redis } from '../../lib/infra/redis.js';

t.test('clientNet: IPv4 as it is, IPv6 by its /64, IPv4-mapped as IPv4', async (t) => {
  t.equal(clientNet('192.0.2.7'), '192.0.2.7');
  t.equal(clientNet('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::/64');
  t.equal(clientNet('2001:0db8:0001:0002:ffff:ffff:ffff:ffff'), '2001:db8:1:2::/64', 'any spelling of the /64');
  t.equal(clientNet('2001:db8:1:2::'), '2001:db8:1:2::/64');
  t.not(clientNet('2001:db8:1:3::1'), clientNet('2001:db8:1:2::1'), 'the next /64 is another client');
  t.equal(clientNet('::ffff:192.0.2.7'), '192.0.2.7');
  t.equal(clientNet('::ffff:c000:207'), '192.0.2.7');
  t.equal(clientNet('fe80::1%eth0'), 'fe80:0:0:0::/64', 'a zone index is dropped');
  t.equal(clientNet('::1'), '0:0:0:0::/64');
  t.equal(clientNet('not an address'), 'not an address', 'anything else counts as itself');
});

t.test('HashGate: concurrency slots, then a FIFO queue, then null', async (t) => {
  const g = new HashGate(2, 2);
  const order: string[] = [];
  const a = g.enter();
  const b = g.enter();
  const c = g.enter();
  const d = g.enter();
  t.ok(a && b && c && d, 'two run, two wait');
  t.equal(g.enter(), null, 'the fifth is refused at once');
  t.equal(g.waitingCount, 2);
  void c!.then(() => order.push('c'));
  void d!.then(() => order.push('d'));
  await a;
  await b;
  g.leave(1);
  await new Promise((r) => setImmediate(r));
  t.same(order, ['c'], 'the first in line gets the freed slot');
  t.ok(g.enter(), 'room in the queue again');
  g.leave(1);
  await new Promise((r) => setImmediate(r));
  t.same(order, ['c', 'd'], 'first come, first served');
  t.ok(g.retryAfterS() >= 1, 'Retry-After at least 1 s');
  const slow = new HashGate(1, 10);
  slow.enter();
  for (let i = 0; i < 10; i++) slow.enter();
  for (let i = 0; i < 11; i++) slow.leave(2); // checks of 2 s each
  for (let i = 0; i < 10; i++) slow.enter();
  t.ok(slow.retryAfterS() >= 10, `the line ahead worked off at 2 s a check (${slow.retryAfterS()} s)`);
});

t.test('device cookies: signed, naming the user, tamper-evident, per secret', async (t) => {
  const guard = (secret: string) => new LoginGuard({ redis: null as unknown as Redis, prefix: 'x:', secret, metrics: createMetrics('api'), limits: {} as never });
  const g = guard('s'.repeat(32));
  const user = '4b0e4f4e-1f7e-4a53-9a57-0c3c7cfa6a11';
  const c = g.signDevice(user, 'AAAAAAAAAAAAAAAAAAAAAA');
  t.same(g.readDevice(c), { userId: user, nonce: 'AAAAAAAAAAAAAAAAAAAAAA' });
  t.equal(g.readDevice(c.replace(user, '00000000-1f7e-4a53-9a57-0c3c7cfa6a11')), null, 'another user in the same cookie');
  t.equal(g.readDevice(`${c.slice(0, -1)}${c.endsWith('A') ? 'B' : 'A'}`), null, 'a changed signature');
  t.equal(guard('t'.repeat(32)).readDevice(c), null, 'signed with another secret');
  t.equal(g.readDevice(undefined), null);
  t.equal(g.readDevice('x'.repeat(500)), null);
});
