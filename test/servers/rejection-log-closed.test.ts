// The gateway's rejection log on a NATS connection that is already closed while the gateway still
// believes it connected (a gateway shutting down drains NATS while requests keep arriving on open
// connections): refusals are buffered or counted, never thrown. A throw ended the gateway with
// exit code 1 in the cluster's rolling-restart test (test/cluster/failover.test.ts).
import t from 'tap';
import { connectNats } from '../../lib/infra/nats.js';
import { RejectionLog, type Rejection } from '../../gateway/rejection-log.js';

const nc = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:24222', 'rejection-log-closed');

const rejection = (i: number): Rejection => ({
    at: Date.now(), customer_id: '', customer: 'c', token_id: '', method: 'POST', path: `/api/ingest/c/m${i}/agent/heartbeat`, status: 403, detail: 'invalid token', body_size: 0, remote: `10.0.0.${i % 250}`,
  });

t.test('records on a closed connection: buffered, nothing thrown', async (t) => {
  let connected = false;
  const log = new RejectionLog(nc, 'test.rejection-log-closed', 1000, 1000, () => connected);
  t.teardown(() => log.close());
  log.record(rejection(1)); // NATS "away": buffered
  await nc.close();
  connected = true; // the gateway has not noticed yet
  t.doesNotThrow(() => {
    for (let i = 2; i < 10; i++) log.record(rejection(i));
  }, 'a closed connection throws nothing to the request path');
  t.equal(log.written, 0);
  t.equal(log.lost, 0, 'all buffered (up to its limit), none lost');
  t.doesNotThrow(() => log.flushDropped());
});
