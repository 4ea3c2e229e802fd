// Chunked, resumable artifact uploads through two gateways, and the listing and streamed download
// through the api, against the real NATS (KV + object store), Postgres and workers.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { upload } from '../helpers/http.js';
import { bucketNames } from '../../lib/store/artifacts.js';

const s = await testStack(t, 'artifacts');
const gw2 = (await s.startGateway()).url;
const gateways = [s.gatewayUrl, gw2];
const ing = (m: string, sw: string, rest: string, gw = s.gatewayUrl, customer = s.customer.slug) => `${gw}/api/ingest/${customer}/${m}/${sw}/${rest}`;
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const MiB = 1024 * 1024;
const objStream = `OBJ_${bucketNames(s.env.STREAM_NAME!).objects}`;

// A refused chunk may be answered before its body is read (test/helpers/http.ts `upload`).
const put = (url: string, token: string | null, body: Buffer, headers: Record<string, string> = {}) =>
  upload('PUT', url, token, body, { 'Content-Type': 'application/octet-stream', ...headers });

async function download(url: string, token: string, headers: Record<string, string> = {}) {
  const r = await fetch(url, { headers: { Authorization: `Bearer ${token}`, ...headers } });
  return { status: r.status, headers: r.headers, buf: Buffer.from(await r.arrayBuffer()) };
}

/** Sends the chunks `ns` of `data`, `parallel` at a time, alternating the two gateways. */
async function sendChunks(m: string, sw: string, id: string, data: Buffer, chunkSize: number, ns: number[], parallel = 4) {
  let next = 0;
  const statuses: number[] = [];
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < ns.length) {
        const i = next++;
        const n = ns[i]!;
        const r = await put(ing(m, sw, `artifact-chunk/${id}/${n}`, gateways[i % 2]), s.token, data.subarray(n * chunkSize, (n + 1) * chunkSize));
        statuses.push(r.status);
      }
    }),
  );
  return statuses;
}

async function uploadWhole(m: string, sw: string, data: Buffer, init: Record<string, unknown> = {}) {
  const i = await post(ing(m, sw, 'artifact-init'), s.token, { filename: `${sw}.bin`, size: data.length, sha256: sha256(data), ...init });
  if (i.status !== 201) throw new Error(`init ${i.status} ${JSON.stringify(i.body)}`);
  await sendChunks(m, sw, i.body.upload_id, data, i.body.chunk_size, Array.from({ length: i.body.chunks }, (_, n) => n));
  const c = await post(ing(m, sw, `artifact-complete/${i.body.upload_id}`), s.token, '');
  if (c.status !== 200) throw new Error(`complete ${c.status} ${JSON.stringify(c.body)}`);
  return { uploadId: i.body.upload_id as string, artifactId: c.body.artifact_id as string };
}

async function machineId(m: string): Promise<string> {
  return eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=${m}`, s.token)).body.items?.[0]?.machine_id, 5000, `machine ${m}`);
}

function shuffle<T>(a: T[]): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

const SIZE = 50 * 1000 * 1000;
const big = randomBytes(SIZE);
let bigArtifact = '';

t.test('50 MB in shuffled chunks over two gateways, one chunk twice, interrupted and resumed: downloads byte-identical', async (t) => {
  const init = await post(ing('m1', 'agent', 'artifact-init'), s.token, { filename: 'core dump "1".bin', size: SIZE, sha256: sha256(big), content_type: 'application/x-core' });
  t.equal(init.status, 201);
  const { upload_id: id, chunk_size: cs, chunks } = init.body;
  t.equal(cs, MiB);
  t.equal(chunks, Math.ceil(SIZE / MiB));
  t.ok(Date.parse(init.body.expires_at) > Date.now() + 86_000_000, 'expires in 24 h');

  const order = shuffle(Array.from({ length: chunks }, (_, n) => n));
  const firstPart = order.slice(0, 20);
  t.same(await sendChunks('m1', 'agent', id, big, cs, firstPart), firstPart.map(() => 200), 'first part stored');

  // The same chunk again (a retry), and another chunk on both gateways at the same moment.
  const again = await put(ing('m1', 'agent', `artifact-chunk/${id}/${firstPart[0]}`, gw2), s.token, big.subarray(firstPart[0]! * cs, (firstPart[0]! + 1) * cs));
  t.equal(again.status, 200, 'a chunk sent twice is a no-op');
  t.equal(again.body.received.length, 20);
  const raced = order[20]!;
  const both = await Promise.all(gateways.map((gw) => put(ing('m1', 'agent', `artifact-chunk/${id}/${raced}`, gw), s.token, big.subarray(raced * cs, (raced + 1) * cs))));
  t.same(both.map((r) => r.status), [200, 200], 'the same chunk on two gateways at once');

  // Interrupted here. Resume from the status endpoint.
  const early = await post(ing('m1', 'agent', `artifact-complete/${id}`), s.token, '');
  t.equal(early.status, 409, 'complete with chunks missing: 409');
  t.match(early.body.detail, /chunks missing/);
  const st = await get(ing('m1', 'agent', `artifact-status/${id}`, gw2), s.token);
  t.equal(st.status, 200);
  t.equal(st.body.state, 'open');
  t.same(st.body.received, [...firstPart, raced].sort((a, b) => a - b));
  t.equal(st.body.missing.length, chunks - 21);
  t.same(await sendChunks('m1', 'agent', id, big, cs, shuffle([...st.body.missing])), st.body.missing.map(() => 200), 'the rest stored');

  const done = await post(ing('m1', 'agent', `artifact-complete/${id}`, gw2), s.token, '');
  t.equal(done.status, 200, JSON.stringify(done.body));
  bigArtifact = done.body.artifact_id;
  const repeat = await post(ing('m1', 'agent', `artifact-complete/${id}`), s.token, '');
  t.same(repeat.body, { artifact_id: bigArtifact }, 'completing again answers the same artifact');
  const after = await get(ing('m1', 'agent', `artifact-status/${id}`), s.token);
  t.match(after.body, { state: 'complete', artifact_id: bigArtifact, missing: [] });

  // Every chunk stored once: one data message and one meta message per chunk, nothing orphaned.
  const info = await (await s.nc.jetstreamManager()).streams.info(objStream);
  t.equal(info.state.messages, 2 * chunks, 'no chunk stored twice');

  const mid = await machineId('m1');
  const list = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, s.token);
    return l.body.items?.length === 1 ? l.body : null;
  }, 5000, 'artifact listed');
  t.match(list.items[0], { id: bigArtifact, machine: 'm1', software: 'agent', filename: 'core dump "1".bin', size: SIZE, sha256: sha256(big), content_type: 'application/x-core' });
  t.equal(list.total, 1);

  const dl = await download(`${s.apiUrl}${list.items[0].download}`, s.token);
  t.equal(dl.status, 200);
  t.equal(dl.headers.get('content-length'), String(SIZE));
  t.equal(dl.headers.get('content-type'), 'application/x-core');
  t.equal(dl.headers.get('accept-ranges'), 'bytes');
  t.match(dl.headers.get('content-disposition'), /^attachment; filename="core dump _1_.bin"; filename\*=UTF-8''core%20dump%20%221%22.bin$/);
  t.equal(dl.buf.length, SIZE);
  t.equal(sha256(dl.buf), sha256(big), 'byte-identical');
});

t.test('Range downloads: 206 with Content-Range, across chunk boundaries; 416 past the end', async (t) => {
  const url = `${s.apiUrl}/api/artifacts/${bigArtifact}/download`;
  const cases: [string, number, number][] = [
    ['bytes=0-99', 0, 99],
    [`bytes=${MiB - 1000}-${MiB + 999}`, MiB - 1000, MiB + 999],
    [`bytes=${3 * MiB - 1}-${5 * MiB}`, 3 * MiB - 1, 5 * MiB],
    ['bytes=-500', SIZE - 500, SIZE - 1],
    [`bytes=${SIZE - 10}-`, SIZE - 10, SIZE - 1],
    [`bytes=${SIZE - 10}-${SIZE + 1000}`, SIZE - 10, SIZE - 1],
  ];
  for (const [range, start, end] of cases) {
    const r = await download(url, s.token, { Range: range });
    t.equal(r.status, 206, range);
    t.equal(r.headers.get('content-range'), `bytes ${start}-${end}/${SIZE}`);
    t.equal(r.headers.get('content-length'), String(end - start + 1));
    t.ok(r.buf.equals(big.subarray(start, end + 1)), `${range}: the right bytes`);
  }
  for (const range of [`bytes=${SIZE}-`, `bytes=${SIZE + 5}-${SIZE + 10}`, 'bytes=-0']) {
    const r = await download(url, s.token, { Range: range });
    t.equal(r.status, 416, range);
    t.equal(r.headers.get('content-range'), `bytes */${SIZE}`);
    t.type(JSON.parse(r.buf.toString()).detail, 'string');
  }
  const head = await fetch(url, { method: 'HEAD', headers: { Authorization: `Bearer ${s.token}` } });
  t.equal(head.status, 200);
  t.equal(head.headers.get('content-length'), String(SIZE));
  t.equal((await head.arrayBuffer()).byteLength, 0);
});

t.test('complete with a chunk missing, or with a wrong sha256: 409', async (t) => {
  const data = randomBytes(Math.floor(2.5 * MiB));
  const i = await post(ing('m2', 'agent', 'artifact-init'), s.token, { filename: 'a.log', size: data.length, sha256: sha256(data) });
  const id = i.body.upload_id;
  t.equal(i.body.chunks, 3);
  await sendChunks('m2', 'agent', id, data, MiB, [0, 2]);
  const c = await post(ing('m2', 'agent', `artifact-complete/${id}`), s.token, '');
  t.equal(c.status, 409);
  t.match(c.body.detail, /1 of 3 chunks missing: 1\b/);

  const wrong = await post(ing('m2', 'agent', 'artifact-init'), s.token, { filename: 'b.log', size: data.length, sha256: 'ab'.repeat(32) });
  await sendChunks('m2', 'agent', wrong.body.upload_id, data, MiB, [0, 1, 2]);
  const w = await post(ing('m2', 'agent', `artifact-complete/${wrong.body.upload_id}`), s.token, '');
  t.equal(w.status, 409);
  t.match(w.body.detail, new RegExp(`sha256 ${sha256(data)}, not ${'ab'.repeat(32)}`));
  t.equal((await get(ing('m2', 'agent', `artifact-status/${wrong.body.upload_id}`), s.token)).body.state, 'open', 'not completed');

  // Without a sha256 at init there is nothing to compare: complete succeeds, the listing shows null.
  const none = await uploadWhole('m2', 'nosha', data, { sha256: undefined });
  const mid = await machineId('m2');
  const l = await eventually(async () => (await get(`${s.apiUrl}/api/machines/${mid}/artifacts?software=nosha`, s.token)).body.items?.[0]);
  t.equal(l.id, none.artifactId);
  t.equal(l.sha256, null);
});

t.test('chunk and init validation', async (t) => {
  const data = randomBytes(MiB + 10);
  const i = await post(ing('m3', 'agent', 'artifact-init'), s.token, { filename: 'c.bin', size: data.length });
  const id = i.body.upload_id;
  const chunk = (n: number | string, body: Buffer, headers: Record<string, string> = {}, m = 'm3', upload = id) =>
    put(ing(m, 'agent', `artifact-chunk/${upload}/${n}`), s.token, body, headers);
  const checks: [string, Promise<{ status: number; body: any }>, number][] = [
    ['wrong content type', chunk(0, data.subarray(0, MiB), { 'Content-Type': 'application/json' }), 415],
    ['over the chunk size', chunk(0, data.subarray(0, MiB + 1)), 413],
    ['a short chunk', chunk(0, data.subarray(0, 100)), 422],
    ['the last chunk too long', chunk(1, data.subarray(0, 11)), 422],
    ['chunk number out of range', chunk(2, data.subarray(0, 10)), 422],
    ['negative chunk number', chunk('-1', data.subarray(0, 10)), 400],
    ['ill-formed upload id', chunk(0, data.subarray(0, 10), {}, 'm3', 'nope'), 400],
    ['unknown upload', chunk(0, data.subarray(0, MiB), {}, 'm3', '00000000-0000-4000-8000-000000000000'), 404],
    ['another machine', chunk(0, data.subarray(0, MiB), {}, 'm9'), 404],
    ['no token', put(ing('m3', 'agent', `artifact-chunk/${id}/0`), null, data.subarray(0, MiB)), 403],
    ['init: too large', post(ing('m3', 'agent', 'artifact-init'), s.token, { filename: 'x', size: 3 * 1024 ** 3 }), 413],
    ['init: no filename', post(ing('m3', 'agent', 'artifact-init'), s.token, { size: 1 }), 422],
    ['init: negative size', post(ing('m3', 'agent', 'artifact-init'), s.token, { filename: 'x', size: -1 }), 422],
    ['init: bad sha256', post(ing('m3', 'agent', 'artifact-init'), s.token, { filename: 'x', size: 1, sha256: 'xyz' }), 422],
    ['init: bad slug', post(ing('M3', 'agent', 'artifact-init'), s.token, { filename: 'x', size: 1 }), 400],
    ['status: ill-formed id', get(ing('m3', 'agent', 'artifact-status/xyz'), s.token), 400],
    ['chunk: wrong method', get(ing('m3', 'agent', `artifact-chunk/${id}/0`), s.token), 405],
  ];
  for (const [what, p, status] of checks) {
    const r = await p;
    t.equal(r.status, status, what);
    t.type(r.body?.detail, 'string', `${what}: {"detail"}`);
  }
  t.equal((await chunk(0, data.subarray(0, MiB))).status, 200, 'the right chunk is still accepted');
  t.same((await get(ing('m3', 'agent', `artifact-status/${id}`), s.token)).body.received, [0]);
});

t.test("another customer's token or ids: 403 on ingest, 404 on reads", async (t) => {
  const data = randomBytes(1000);
  const mine = await uploadWhole('m4', 'agent', data);
  const other = await s.newCustomer('art-other');
  const id = mine.uploadId;
  t.equal((await post(ing('m4', 'agent', 'artifact-init'), other.token, { filename: 'x', size: 1 })).status, 403);
  t.equal((await put(ing('m4', 'agent', `artifact-chunk/${id}/0`), other.token, data)).status, 403);
  t.equal((await get(ing('m4', 'agent', `artifact-status/${id}`), other.token)).status, 403);
  t.equal((await post(ing('m4', 'agent', `artifact-complete/${id}`), other.token, '')).status, 403);
  // The other customer's own path with our upload id: not found.
  const theirs = (rest: string) => ing('m4', 'agent', rest, s.gatewayUrl, other.customer.slug);
  t.equal((await get(theirs(`artifact-status/${id}`), other.token)).status, 404);
  t.equal((await put(theirs(`artifact-chunk/${id}/0`), other.token, data)).status, 404);
  t.equal((await post(theirs(`artifact-complete/${id}`), other.token, '')).status, 404);
  // Read API.
  const mid = await machineId('m4');
  await eventually(async () => (await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, s.token)).body.items?.length === 1);
  t.equal((await get(`${s.apiUrl}/api/artifacts/${mine.artifactId}/download`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/artifacts/not-a-uuid/download`, s.token)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/artifacts/00000000-0000-4000-8000-000000000000/download`, s.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/artifacts/${mine.artifactId}/download`, null)).status, 401);
  const viewer = await s.newUser('viewer');
  const v = await download(`${s.apiUrl}/api/artifacts/${mine.artifactId}/download`, viewer.jwt);
  t.equal(v.status, 200, 'a viewer may download');
  t.ok(v.buf.equals(data));
});

t.test('the software filter (5.8.0), an empty file, and Idempotency-Key on init', async (t) => {
  const a = await uploadWhole('m5', 'agent', randomBytes(10));
  const e = await uploadWhole('m5', 'edr', randomBytes(20));
  const empty = await uploadWhole('m5', 'edr', Buffer.alloc(0), { filename: 'empty.txt' });
  const mid = await machineId('m5');
  const all = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, s.token);
    return l.body.items?.length === 3 ? l.body : null;
  }, 5000, 'three artifacts');
  t.same(new Set(all.items.map((x: { id: string }) => x.id)), new Set([a.artifactId, e.artifactId, empty.artifactId]));
  const edr = await get(`${s.apiUrl}/api/machines/${mid}/artifacts?software=edr`, s.token);
  t.same(edr.body.items.map((x: { software: string }) => x.software), ['edr', 'edr']);
  t.equal(edr.body.total, 2);
  t.equal((await get(`${s.apiUrl}/api/machines/${mid}/artifacts?software=Bad_Slug`, s.token)).status, 400);
  const paged = await get(`${s.apiUrl}/api/machines/${mid}/artifacts?limit=1`, s.token);
  t.equal(paged.body.items.length, 1);
  t.equal(paged.body.total, 3);

  const dl = await download(`${s.apiUrl}/api/artifacts/${empty.artifactId}/download`, s.token);
  t.equal(dl.status, 200);
  t.equal(dl.headers.get('content-length'), '0');
  t.equal((await download(`${s.apiUrl}/api/artifacts/${empty.artifactId}/download`, s.token, { Range: 'bytes=0-' })).status, 416);

  const body = { filename: 'k.bin', size: 5 };
  const k1 = await post(ing('m5', 'agent', 'artifact-init'), s.token, body, { 'Idempotency-Key': 'init-1' });
  const k2 = await post(ing('m5', 'agent', 'artifact-init'), s.token, body, { 'Idempotency-Key': 'init-1' });
  t.equal(k1.status, 201);
  t.same(k2.body, k1.body, 'a retried init gets the same upload');
  const k3 = await post(ing('m5', 'agent', 'artifact-init'), s.token, { ...body, size: 6 }, { 'Idempotency-Key': 'init-1' });
  t.equal(k3.status, 422, 'the same key with a different body: 422, as on every ingest route');
  const k4 = await post(ing('m6', 'agent', 'artifact-init'), s.token, body, { 'Idempotency-Key': 'init-1' });
  t.equal(k4.status, 201, 'the same key on another machine is another upload');
  t.not(k4.body.upload_id, k1.body.upload_id);
});
