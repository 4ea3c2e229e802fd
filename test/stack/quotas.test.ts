// Quotas per customer against the real servers: artifact bytes (507 at init, across two gateways,
// released when an upload expires), live streams per customer (429 while another customer's stream
// opens and gets its events), webhooks and whitelist rules at create (409), and overrides set with
// `fleet quota set`, shown by GET /api/quotas and in force without a restart.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { testStack, post, get, request, eventually } from '../helpers/stack.js';
import { openStream } from '../helpers/lights.js';
import { ROOT } from '../../deploy/service-process.js';
import { usageKeys, parseReservation } from '../../lib/store/artifact-usage.js';

const CHUNK = 64 * 1024;
const SIZE = 3 * CHUNK + 100; // four chunks
const s = await testStack(t, 'quotas', {
  env: {
    ARTIFACT_CHUNK_BYTES: String(CHUNK),
    // Uploads left open expire after 15 s and are swept at once (the release test); the others complete well before.
    ARTIFACT_UPLOAD_TTL_S: '15',
    ARTIFACT_SWEEP_MS: '300',
    ARTIFACT_EXPIRY_GRACE_S: '0',
    QUOTA_STREAM_CONNECTIONS: '2',
    WEBHOOK_ALLOW_CIDRS: '127.0.0.1/32',
  },
});
const gateways = [s.gatewayUrl, (await s.startGateway()).url];
await s.procs.find((p) => p.name === 'api')!.waitFor((l) => l.msg === 'live traffic-light stream subscribed');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const ing = (customer: string, rest: string, gw = s.gatewayUrl, machine = 'm1') => `${gw}/api/ingest/${customer}/${machine}/agent/${rest}`;

function fleet(...args: string[]) {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function setQuota(slug: string, ...opts: string[]) {
  const r = fleet('quota', 'set', slug, ...opts);
  if (r.code !== 0) throw new Error(`fleet quota set ${slug} ${opts.join(' ')}: ${r.code} ${r.err}`);
  return JSON.parse(r.out);
}

let probes = 0;
/**
 * Waits until both gateways have every override set so far: a probe customer's override, set after
 * them, is seen by a gateway (413 for an artifact over its artifact_max_bytes of 1 byte) only with
 * a refresh that read the earlier ones too (one query, one snapshot).
 */
async function overridesInForce() {
  const p = await s.newCustomer(`probe${++probes}`);
  setQuota(p.customer.slug, '--artifact-max-bytes', '1');
  for (const gw of gateways) {
    await eventually(async () => (await post(ing(p.customer.slug, 'artifact-init', gw), p.token, { filename: 'probe', size: 2 })).status === 413, 10_000, `the overrides in force on ${gw}`);
  }
}

async function put(url: string, token: string, body: Buffer) {
  const r = await fetch(url, { method: 'PUT', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/octet-stream' }, body });
  await r.arrayBuffer();
  return r.status;
}

/** init, every chunk (alternating the gateways), complete: the artifact id. */
async function upload(customer: string, token: string, data: Buffer, machine = 'm1') {
  const i = await post(ing(customer, 'artifact-init', gateways[0], machine), token, { filename: 'f.bin', size: data.length, sha256: sha256(data) });
  if (i.status !== 201) throw new Error(`init ${i.status} ${JSON.stringify(i.body)}`);
  for (let n = 0; n < i.body.chunks; n++) {
    const st = await put(ing(customer, `artifact-chunk/${i.body.upload_id}/${n}`, gateways[n % 2], machine), token, data.subarray(n * CHUNK, (n + 1) * CHUNK));
    if (st !== 200) throw new Error(`chunk ${n}: ${st}`);
  }
  const c = await post(ing(customer, `artifact-complete/${i.body.upload_id}`, gateways[1], machine), token, '');
  if (c.status !== 200) throw new Error(`complete ${c.status} ${JSON.stringify(c.body)}`);
  return { uploadId: i.body.upload_id as string, artifactId: c.body.artifact_id as string };
}

/** A live stream that should be refused: its status, headers and body (a stream that opens is closed at once). */
async function streamAttempt(url: string, token: string) {
  const ac = new AbortController();
  const r = await fetch(url, { headers: { Authorization: `Bearer ${token}` }, signal: ac.signal });
  if (r.ok) {
    ac.abort();
    return { status: r.status, headers: r.headers, body: { detail: '' } };
  }
  return { status: r.status, headers: r.headers, body: (await r.json()) as { detail: string } };
}

async function quotas(token: string) {
  const r = await get(`${s.apiUrl}/api/quotas`, token);
  if (r.status !== 200) throw new Error(`GET /api/quotas: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

async function metric(url: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.split(' ').pop()) : 0;
}

t.test("a customer at its artifact quota gets 507 on every gateway; another customer's upload of the same size is stored", async (t) => {
  const full = await s.newCustomer('full');
  const other = await s.newCustomer('roomy');
  const shown = setQuota(full.customer.slug, '--artifact-bytes', String(2 * SIZE));
  t.match(shown.quotas.artifact_bytes, { limit: 2 * SIZE, source: 'override' });
  await overridesInForce();

  await upload(full.customer.slug, full.token, randomBytes(SIZE));
  await upload(full.customer.slug, full.token, randomBytes(SIZE));
  for (const gw of gateways) {
    const r = await post(ing(full.customer.slug, 'artifact-init', gw), full.token, { filename: 'one-too-many.bin', size: SIZE });
    t.equal(r.status, 507, `${gw}: over the quota`);
    t.match(r.body.detail, `artifact_bytes = ${2 * SIZE} bytes`, 'the detail names the quota and its value');
    t.match(r.body.detail, `holds ${2 * SIZE} bytes`, 'and what the customer holds');
  }
  // One byte still fits? No: the quota is full to the byte. A zero-byte artifact still fits.
  t.equal((await post(ing(full.customer.slug, 'artifact-init'), full.token, { filename: 'b', size: 1 })).status, 507);
  t.equal((await post(ing(full.customer.slug, 'artifact-init'), full.token, { filename: 'empty', size: 0 })).status, 201);

  // The other customer, the same size, the same gateways: stored, and downloads byte for byte.
  const data = randomBytes(SIZE);
  const { artifactId } = await upload(other.customer.slug, other.token, data, 'm2');
  const mid = await eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=m2`, other.token)).body.items?.[0]?.machine_id, 10_000, 'the machine');
  const item = await eventually(async () => (await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, other.token)).body.items?.find((a: { id: string }) => a.id === artifactId), 10_000, 'the artifact row');
  const dl = await fetch(`${s.apiUrl}${item.download}`, { headers: { Authorization: `Bearer ${other.token}` } });
  t.equal(dl.status, 200);
  t.equal(sha256(Buffer.from(await dl.arrayBuffer())), sha256(data), 'stored: the download has the checksum of what was sent');

  // What the api shows: stored (the rows), nothing reserved once the artifacts are written.
  const q = await eventually(async () => {
    const b = await quotas(full.token);
    return b.quotas.artifact_bytes.stored === 2 * SIZE && b.quotas.artifact_bytes.reserved === 0 ? b : null;
  }, 10_000, 'the artifacts counted as stored');
  t.match(q.quotas.artifact_bytes, { limit: 2 * SIZE, source: 'override', used: 2 * SIZE, artifacts: 2, uploads_in_progress: 1, scope: 'customer' }, 'the empty upload is in progress');
  t.match((await quotas(other.token)).quotas.artifact_bytes, { source: 'default', stored: SIZE });

  // The refusals are in the customer's rejection log and in the gateways' metric.
  const logged = await eventually(async () => {
    const rows = (await get(`${s.apiUrl}/api/ingest-rejections?status=507`, full.token)).body.items ?? [];
    return rows.length >= 3 ? rows : null;
  }, 10_000, 'the 507s in the rejection log');
  t.match(logged[0], { status: 507, path: `/api/ingest/${full.customer.slug}/m1/agent/artifact-init`, detail: /artifact_bytes = / });
  const counted = (await Promise.all(gateways.map((gw) => metric(gw, 'fleet_quota_refusals_total', 'quota="artifact_bytes"')))).reduce((a, b) => a + b, 0);
  t.equal(counted, 3, 'fleet_quota_refusals_total{quota="artifact_bytes"} on the two gateways');
});

t.test('concurrent inits on two gateways cannot together pass the quota', async (t) => {
  const c = await s.newCustomer('race');
  setQuota(c.customer.slug, '--artifact-bytes', String(2 * SIZE));
  await overridesInForce();
  const answers = await Promise.all(
    Array.from({ length: 8 }, (_, i) => post(ing(c.customer.slug, 'artifact-init', gateways[i % 2]), c.token, { filename: `r${i}.bin`, size: SIZE })),
  );
  const statuses = answers.map((a) => a.status).sort();
  t.same(statuses, [201, 201, 507, 507, 507, 507, 507, 507], 'exactly two fit');
  t.match((await quotas(c.token)).quotas.artifact_bytes, { used: 2 * SIZE, reserved: 2 * SIZE, uploads_in_progress: 2, stored: 0 });
  // A retried init (same Idempotency-Key) is the same upload: it reserves nothing more.
  const d = await s.newCustomer('retry');
  setQuota(d.customer.slug, '--artifact-bytes', String(SIZE));
  await overridesInForce();
  const first = await post(ing(d.customer.slug, 'artifact-init'), d.token, { filename: 'x.bin', size: SIZE }, { 'Idempotency-Key': 'k1' });
  const again = await post(ing(d.customer.slug, 'artifact-init', gateways[1]), d.token, { filename: 'x.bin', size: SIZE }, { 'Idempotency-Key': 'k1' });
  t.equal(first.status, 201);
  t.equal(again.status, 201);
  t.equal(again.body.upload_id, first.body.upload_id);
  t.match((await quotas(d.token)).quotas.artifact_bytes, { reserved: SIZE, uploads_in_progress: 1 });
});

t.test('an upload that expires gives its bytes back', async (t) => {
  const c = await s.newCustomer('expiry');
  setQuota(c.customer.slug, '--artifact-bytes', String(SIZE));
  await overridesInForce();
  const open = await post(ing(c.customer.slug, 'artifact-init'), c.token, { filename: 'left-open.bin', size: SIZE });
  t.equal(open.status, 201);
  t.equal(await put(ing(c.customer.slug, `artifact-chunk/${open.body.upload_id}/0`), c.token, randomBytes(CHUNK)), 200);
  const key = usageKeys(s.env.REDIS_PREFIX!, s.redis).reservations(c.customer.id);
  t.ok(await s.redis.hexists(key, open.body.upload_id), 'reserved in Redis');
  const refused = await post(ing(c.customer.slug, 'artifact-init', gateways[1]), c.token, { filename: 'second.bin', size: SIZE });
  t.equal(refused.status, 507, 'the open upload holds the quota');
  t.match((await quotas(c.token)).quotas.artifact_bytes, { used: SIZE, reserved: SIZE, stored: 0, uploads_in_progress: 1 });

  // At its expiry (15 s) the sweep deletes its chunks and record, then releases the reservation.
  await eventually(async () => !(await s.redis.hexists(key, open.body.upload_id)), 40_000, 'the reservation released');
  t.match((await quotas(c.token)).quotas.artifact_bytes, { used: 0, reserved: 0, uploads_in_progress: 0 });
  const data = randomBytes(SIZE);
  const { artifactId } = await upload(c.customer.slug, c.token, data);
  t.ok(artifactId, 'the same size fits again');
});

t.test('reservations: the worker settles a stored artifact; the sweep puts back what Redis lost, settles what a worker left, removes the stale', async (t) => {
  const c = await s.newCustomer('repair');
  const key = usageKeys(s.env.REDIS_PREFIX!, s.redis).reservations(c.customer.id);
  const { uploadId: done } = await upload(c.customer.slug, c.token, randomBytes(SIZE));
  const open = await post(ing(c.customer.slug, 'artifact-init'), c.token, { filename: 'open.bin', size: SIZE });
  t.equal(open.status, 201);
  // The worker that wrote the artifact row settled its reservation (seq of artifact_usage).
  const settled = await eventually(async () => {
    const v = await s.redis.hget(key, done);
    return v && parseReservation(v).seq !== null ? parseReservation(v) : null;
  }, 10_000, 'the stored artifact settled');
  t.equal(settled.size, SIZE);
  t.equal(parseReservation((await s.redis.hget(key, open.body.upload_id))!).seq, null, 'the upload in progress is open');

  // Redis loses the hash: the next sweep (every 300 ms here) puts back the upload in progress only.
  await s.redis.del(key);
  await eventually(async () => s.redis.hexists(key, open.body.upload_id), 10_000, 'the open reservation restored');
  t.notOk(await s.redis.hexists(key, done), 'a stored artifact needs no reservation');
  t.match((await quotas(c.token)).quotas.artifact_bytes, { used: 2 * SIZE, stored: SIZE, reserved: SIZE, uploads_in_progress: 1 });

  // A worker that stopped between its commit and settling: the sweep settles the stored artifact's entry.
  const old = Date.now() - 11 * 60_000;
  await s.redis.hset(key, done, `${SIZE}|${old}`);
  await eventually(async () => parseReservation((await s.redis.hget(key, done)) ?? '0|0').seq !== null, 10_000, 'settled by the sweep');
  t.match((await quotas(c.token)).quotas.artifact_bytes, { used: 2 * SIZE, reserved: SIZE }, 'counted once');

  // Stale entries go: settled over 10 minutes ago (every gateway counts it as stored by then), and
  // open ones whose upload record has not existed for 10 minutes.
  const ghost = '00000000-0000-4000-8000-000000000001';
  await s.redis.hset(key, ghost, `${SIZE}|${old}`);
  await s.redis.hset(key, done, `${SIZE}|${old}|1|${old}`);
  await eventually(async () => !(await s.redis.hexists(key, ghost)) && !(await s.redis.hexists(key, done)), 10_000, 'the stale entries removed');
});

t.test("live streams: over the customer's quota 429 with Retry-After; another customer's stream opens and gets its events", async (t) => {
  const viewer = await s.newUser('viewer');
  const url = `${s.apiUrl}/api/fleet/stream`;
  const mine = [await openStream(url, s.token), await openStream(url, viewer.jwt)];
  t.same(mine.map((x) => x.status), [200, 200], 'two streams: the quota (QUOTA_STREAM_CONNECTIONS=2)');
  const over = await streamAttempt(url, s.token);
  t.equal(over.status, 429);
  t.equal(over.headers.get('retry-after'), '30');
  t.match(over.body.detail, /has 2 live streams open on this api replica/);
  t.match(over.body.detail, /stream_connections = 2 per api replica/);

  const other = await s.newCustomer('watcher');
  const theirs = await openStream(url, other.token);
  t.equal(theirs.status, 200, "another customer's stream opens");
  t.equal((await post(ing(other.customer.slug, 'heartbeat', s.gatewayUrl, 'w1'), other.token, {})).status, 200);
  const ev = await eventually(async () => theirs.lights().find((e) => e.machine === 'w1'), 10_000, 'its event');
  t.match(ev, { from: 'grey', to: 'green' });
  t.ok((await metric(s.apiUrl, 'fleet_quota_refusals_total', 'quota="stream_connections"')) >= 1, 'counted on the api');

  // A stream that ends gives its slot back; an override is in force at the next stream.
  await mine[0]!.close();
  const again = await eventually(async () => {
    const x = await openStream(url, s.token);
    if (x.status === 200) return x;
    await x.close();
    return null;
  }, 10_000, 'a slot free again');
  mine[0] = again;
  const full = await streamAttempt(url, s.token);
  t.equal(full.status, 429, 'full again');
  // Which stream the api no longer counts, if any: ended by the server, and what it said last.
  if (full.status !== 429) t.comment(JSON.stringify({ ended: mine.map((x) => x.ended), last: mine.map((x) => x.raw.slice(-160)), quotas: (await quotas(s.token)).quotas.stream_connections }));
  setQuota(s.customer.slug, '--stream-connections', '3');
  const third = await openStream(url, s.token);
  t.equal(third.status, 200, 'the raised quota, without a restart');
  t.match((await quotas(s.token)).quotas.stream_connections, { limit: 3, source: 'override', used: 3, scope: 'api_replica' });
  await Promise.all([...mine, third, theirs].map((x) => x.close()));
});

t.test('webhooks and whitelist rules over the quota: 409 at create, naming the quota', async (t) => {
  const c = await s.newCustomer('hooks');
  const admin = await s.newUser('admin', { customer: c.customer });
  setQuota(c.customer.slug, '--webhooks', '2', '--whitelist-rules', '1');
  const hook = (i: number) => post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url: `http://127.0.0.1:9/hook${i}` });
  t.equal((await hook(1)).status, 201);
  const second = await hook(2);
  t.equal(second.status, 201);
  const third = await hook(3);
  t.equal(third.status, 409);
  t.match(third.body.detail, /has 2 webhooks, its quota \(webhooks = 2\)/);
  t.equal((await request('DELETE', `${s.apiUrl}/api/webhooks/${second.body.id}`, admin.jwt)).status, 204);
  t.equal((await hook(4)).status, 201, 'room again after a delete');

  const rule = (code: number) => post(`${s.apiUrl}/api/whitelist`, admin.jwt, { code });
  t.equal((await rule(1)).status, 201);
  const over = await rule(2);
  t.equal(over.status, 409);
  t.match(over.body.detail, /whitelist_rules = 1/);
  t.match((await quotas(admin.jwt)).quotas, { webhooks: { limit: 2, used: 2 }, whitelist_rules: { limit: 1, used: 1 } });
  t.ok((await metric(s.apiUrl, 'fleet_quota_refusals_total', 'quota="webhooks"')) >= 1);
  t.ok((await metric(s.apiUrl, 'fleet_quota_refusals_total', 'quota="whitelist_rules"')) >= 1);
});

t.test('fleet quota set: the api shows the override at once, the gateways apply it within CACHE_REFRESH_MS, default puts it back', async (t) => {
  const c = await s.newCustomer('cli');
  const before = fleet('quota', 'show', c.customer.slug);
  t.equal(before.code, 0, before.err);
  const b = JSON.parse(before.out);
  t.match(b.quotas.artifact_max_bytes, { source: 'default', limit: 2 * 1024 ** 3 });
  t.match(b.used, { artifact_bytes: 0, webhooks: 0, whitelist_rules: 0 });

  const set = fleet('quota', 'set', c.customer.slug, '--artifact-max-bytes', '1KiB', '--ingest-requests-per-s', '50', '--ingest-bytes-per-s', '1MB');
  t.equal(set.code, 0, set.err);
  t.match(JSON.parse(set.out).quotas, { artifact_max_bytes: { limit: 1024, source: 'override' }, ingest_requests_per_s: { limit: 50 }, ingest_bytes_per_s: { limit: 1_000_000 } });
  const shown = await quotas(c.token);
  t.match(shown.quotas, {
    artifact_max_bytes: { limit: 1024, default: 2 * 1024 ** 3, source: 'override', unit: 'bytes' },
    ingest_requests_per_s: { limit: 50, source: 'override', unit: 'per_s' },
    ingest_bytes_per_s: { limit: 1_000_000, source: 'override', unit: 'bytes_per_s' },
    webhooks: { source: 'default' },
  });
  t.equal(shown.refresh_ms, 500, 'the time the gateways take, as configured');
  // In force on every gateway without a restart (CACHE_REFRESH_MS is 500 ms here).
  for (const gw of gateways) {
    const r = await eventually(async () => {
      const a = await post(ing(c.customer.slug, 'artifact-init', gw), c.token, { filename: 'big.bin', size: 2048 });
      return a.status === 413 ? a : null;
    }, 10_000, `the override on ${gw}`);
    t.match(r.body.detail, 'artifact_max_bytes = 1024 bytes (1 KiB)');
  }
  const back = fleet('quota', 'set', c.customer.slug, '--artifact-max-bytes', 'default');
  t.equal(back.code, 0, back.err);
  t.match((await quotas(c.token)).quotas, { artifact_max_bytes: { source: 'default' }, ingest_requests_per_s: { limit: 50, source: 'override' } });
  for (const gw of gateways) {
    await eventually(async () => (await post(ing(c.customer.slug, 'artifact-init', gw), c.token, { filename: 'big.bin', size: 2048 })).status === 201, 10_000, `the default again on ${gw}`);
  }

  // Refused: bad values, nothing to change, no such customer.
  for (const args of [['--artifact-bytes', 'lots'], ['--webhooks', '-1'], ['--webhooks', '2.5'], ['--stream-connections', '99999999999'], []]) {
    const r = fleet('quota', 'set', c.customer.slug, ...args);
    t.equal(r.code, 1, `refused: ${args.join(' ') || '(nothing)'}`);
    t.match(r.err, /--artifact-bytes|webhooks|stream_connections|nothing to change/, r.err.trim());
  }
  t.equal(fleet('quota', 'show', 'no-such-customer').code, 1);
});
