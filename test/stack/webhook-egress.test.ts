// Webhooks cannot reach internal addresses (SSRF): refused at registration with one generic 400,
// and refused again by the worker at delivery, for rows that got in some other way (registered
// before, under another allow list, or written by hand): the receiver sees no request at all and
// the customer sees only `address not allowed`. This stack has no WEBHOOK_ALLOW_CIDRS.
//
// No request here ever leaves the loopback interface: the refused addresses are refused before
// any connection, and the only listeners are on 127.0.0.1.
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { stored } from '../helpers/lights.js';

const s = await testStack(t, 'egress', {
  env: { HEARTBEAT_TIMEOUT_S: '2', WEBHOOK_BACKOFF_MS: '100', WEBHOOK_ATTEMPTS: '2', LIGHT_SWEEP_INTERVAL_MS: '1000' },
});
const admin = await s.newUser('admin');

// A listener on 127.0.0.1 that counts what reaches it.
const hits: string[] = [];
const listener = createServer((req, res) => {
  hits.push(`${req.method} ${req.url}`);
  res.end('ok');
});
await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
t.teardown(() => new Promise<void>((r) => listener.close(() => r())));
const port = (listener.address() as AddressInfo).port;

t.test('registration: every internal form is refused with 400 and the same generic detail', async (t) => {
  const urls = [
    'http://169.254.169.254/latest/meta-data/iam/security-credentials/',
    `http://127.0.0.1:${port}/`,
    `http://localhost:${port}/`, // a host name that resolves to 127.0.0.1
    'http://[::1]/',
    'http://0.0.0.0/',
    'http://10.0.0.1/',
    'http://2130706433/', // decimal 127.0.0.1
    'http://127.1/',
    'http://0x7f.1/',
    'http://0177.0.0.1/',
    'http://metadata.google.internal/computeMetadata/v1/',
    'http://metadata/',
    'http://instance-data/latest/',
    'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:169.254.169.254]/',
    'http://[64:ff9b::a9fe:a9fe]/', // NAT64 of 169.254.169.254
    'http://[fd00:ec2::254]/',
    'http://[fe80::1]/',
    'http://100.64.0.1/',
    'http://172.16.0.1/',
    'http://192.168.1.1/',
    'http://224.0.0.1/',
    'http://255.255.255.255/',
    'https://127.0.0.1/',
  ];
  const details = new Set<string>();
  for (const url of urls) {
    const r = await post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url });
    t.equal(r.status, 400, `400 for ${url}`);
    t.type(r.body.detail, 'string');
    details.add(r.body.detail);
  }
  t.same([...details], ['url: address not allowed; webhooks must point to public internet addresses'], 'one generic detail for all');
  t.same((await get(`${s.apiUrl}/api/webhooks`, admin.jwt)).body.items, [], 'nothing was registered');
  t.equal(hits.length, 0, 'registration never connects');
});

t.test('delivery: rows that point at 127.0.0.1 (by address or by name) are never posted to; the customer sees "address not allowed"', async (t) => {
  // Written straight into Postgres, as rows registered before this policy (or under an allow list
  // since removed) would be.
  const ids: string[] = [];
  for (const url of [`http://127.0.0.1:${port}/by-address`, `http://localhost:${port}/by-name`, `http://2130706433:${port}/decimal`]) {
    const r = await s.pool.query<{ id: string }>(`INSERT INTO webhooks (customer_id, url, secret, description) VALUES ($1, $2, 'an-old-secret-of-16+', 'old row') RETURNING id`, [s.customer.id, url]);
    ids.push(r.rows[0]!.id);
  }
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/m1/agent/heartbeat`, s.token, {})).status, 200);
  await eventually(async () => (await stored(s, 'm1'))?.light === 'red', 10_000, 'red');
  for (const id of ids) {
    const d = await eventually(async () => {
      const r = await get(`${s.apiUrl}/api/webhooks/${id}/deliveries?state=failed`, admin.jwt);
      return r.body.items?.length === 1 ? r.body.items : null;
    }, 15_000, 'failed delivery');
    t.match(d[0], { to: 'red', state: 'failed', attempts: 2, last_status: null, last_error: 'address not allowed' });
  }
  const hooks = (await get(`${s.apiUrl}/api/webhooks`, admin.jwt)).body.items;
  t.same(
    hooks.map((h: { last_error: string; consecutive_failures: number }) => [h.last_error, h.consecutive_failures]),
    ids.map(() => ['address not allowed', 2]),
    'the webhooks show the generic error only',
  );
  t.equal(hits.length, 0, 'the listener on 127.0.0.1 got no request');
  // The reason is in the worker's log, for operators.
  const worker = s.procs.find((p) => p.name === 'worker')!;
  const logged = worker.lines.filter((l) => l.msg === 'webhook delivery failed');
  t.ok(logged.some((l) => /localhost resolves to 127\.0\.0\.1 \(loopback\)/.test(String(l.detail))), 'the log says why (by name)');
  t.ok(logged.some((l) => /^127\.0\.0\.1 \(loopback\)$/.test(String(l.detail))), 'the log says why (by address)');
});
