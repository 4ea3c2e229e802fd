// The production requirement for NATS (lib/infra/nats.ts): which servers and streams fall short.
import t from 'tap';
import { durabilityShortfalls, versionBelow, NATS_REQUIRED } from '../../lib/infra/nats.js';

t.test('versions are compared part by part', async (t) => {
  t.equal(NATS_REQUIRED.version, '2.10.23');
  for (const v of ['2.9.10', '2.10.22', '2.10.9', '1.99.99', 'v2.10.20']) t.ok(versionBelow(v, '2.10.23'), `${v} is older`);
  for (const v of ['2.10.23', '2.10.24', '2.11.0', '2.12.1', '3.0.0', 'v2.10.23', '2.10.23-RC.1']) t.notOk(versionBelow(v, '2.10.23'), `${v} is not older`);
});

t.test('shortfalls: an old server, fewer than 3 replicas, both, neither', async (t) => {
  t.same(durabilityShortfalls('2.12.1', 3), []);
  t.same(durabilityShortfalls('2.10.23', 5), []);
  t.same(durabilityShortfalls('2.9.10', 3), ['nats-server 2.9.10 is older than 2.10.23']);
  t.same(durabilityShortfalls('2.11.4', 1), ['the stream has 1 replica, fewer than 3']);
  t.same(durabilityShortfalls('2.10.22', 2), ['nats-server 2.10.22 is older than 2.10.23', 'the stream has 2 replicas, fewer than 3']);
});
