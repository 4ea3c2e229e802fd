// Deleting artifacts (DELETE /api/artifacts/{id}) and their retention (RETENTION_ARTIFACTS_DAYS, run
// by the worker's retention job), against the real NATS object store, Postgres, Redis and processes:
// a delete takes the bytes (the object store's messages), the row and the quota artifact_bytes
// (a gateway lets the next upload in); another customer's id is 404, a viewer 403, a second delete
// 404; a download racing with the delete never ends short as if whole; aged artifacts go, younger
// ones stay, and a deletion left half-done is finished by the job.
import t from 'tap';
import http from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { testStack, post, get, request, eventually } from '../helpers/stack.js';
import { upload } from '../helpers/http.js';
import { bucketNames } from '../../lib/store/artifacts.js';

const MiB = 1024 * 1024;
const QUOTA = 48 * MiB;
const s = await testStack(t, 'artifactdelete', {
  env: {
    QUOTA_ARTIFACT_BYTES: String(QUOTA),
    // The retention job runs every second here; only rows backdated by this file are old enough.
    RETENTION_SWEEP_MS: '1000',
    RETENTION_ARTIFACTS_DAYS: '30',
  },
});
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const objStream = `OBJ_${bucketNames(s.env.STREAM_NAME!).objects}`;
const jsm = await s.nc.jetstreamManager();
const objMessages = async () => (await jsm.streams.info(objStream)).state.messages;
const ing = (customer: string, m: string, rest: string) => `${s.gatewayUrl}/api/ingest/${customer}/${m}/agent/${rest}`;

/** Uploads `data` for `customer` from machine `m`; the artifact id and upload id once the row is in Postgres. */
async function uploadArtifact(customer: string, token: string, m: string, data: Buffer) {
  const i = await post(ing(customer, m, 'artifact-init'), token, { filename: `${m}.bin`, size: data.length, sha256: sha256(data) });
  if (i.status !== 201) throw new Error(`init ${i.status} ${JSON.stringify(i.body)}`);
  for (let n = 0; n < i.body.chunks; n++) {
    const r = await upload('PUT', ing(customer, m, `artifact-chunk/${i.body.upload_id}/${n}`), token, data.subarray(n * i.body.chunk_size, (n + 1) * i.body.chunk_size), {
      'Content-Type': 'application/octet-stream',
    });
    if (r.status !== 200) throw new Error(`chunk ${n}: ${r.status}`);
  }
  const c = await post(ing(customer, m, `artifact-complete/${i.body.upload_id}`), token, '');
  if (c.status !== 200) throw new Error(`complete ${c.status} ${JSON.stringify(c.body)}`);
  const id = c.body.artifact_id as string;
  await eventually(async () => (await s.pool.query('SELECT 1 FROM artifacts WHERE id = $1', [id])).rowCount === 1, 15_000, `artifact ${id} stored`);
  return { id, uploadId: i.body.upload_id as string, chunks: i.body.chunks as number };
}

const del = (id: string, token: string) => request('DELETE', `${s.apiUrl}/api/artifacts/${id}`, token);
const usage = async (customerId: string) =>
  (await s.pool.query<{ bytes: string; artifacts: number }>('SELECT bytes, artifacts FROM artifact_usage WHERE customer_id = $1', [customerId])).rows[0];

const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');

t.test('a delete takes the bytes, the row and the quota; viewer 403, another customer 404, twice 404', async (t) => {
  const before = await objMessages();
  const keep = await uploadArtifact(s.customer.slug, s.token, 'keep', randomBytes(2 * MiB + 5));
  const doomedData = randomBytes(3 * MiB);
  const doomed = await uploadArtifact(s.customer.slug, s.token, 'gone', doomedData);
  t.equal(await objMessages(), before + 2 * (keep.chunks + doomed.chunks), 'one data and one meta message per chunk');
  t.match(await usage(s.customer.id), { bytes: String(5 * MiB + 5), artifacts: 2 });

  const other = await s.newCustomer('other');
  const otherAdmin = await s.newUser('admin', { customer: other.customer });
  const foreign = await del(doomed.id, otherAdmin.jwt);
  t.equal(foreign.status, 404, "another customer's admin: 404, as if there were no such artifact");
  t.equal((await del(doomed.id, viewer.jwt)).status, 403, 'a viewer may not delete');
  t.equal((await del(doomed.id, s.token)).status, 403, 'an API token (viewer) may not delete');
  t.equal((await del('not-a-uuid', admin.jwt)).status, 400);
  t.equal(await objMessages(), before + 2 * (keep.chunks + doomed.chunks), 'nothing deleted by the refused requests');

  const r = await del(doomed.id, admin.jwt);
  t.equal(r.status, 204, JSON.stringify(r.body));
  t.equal(await objMessages(), before + 2 * keep.chunks, "the deleted artifact's chunks are gone from the object store, the other's stay");
  t.equal((await s.pool.query('SELECT 1 FROM artifacts WHERE id = $1', [doomed.id])).rowCount, 0, 'the row is gone');
  t.match(await usage(s.customer.id), { bytes: String(2 * MiB + 5), artifacts: 1 }, 'artifact_usage counts only what is left');
  t.equal((await get(`${s.apiUrl}/api/artifacts/${doomed.id}/download`, admin.jwt)).status, 404, 'its download: 404');
  t.equal((await get(`${s.apiUrl}/api/artifacts/${keep.id}/download`, admin.jwt)).status, 200, 'the other one still downloads');
  t.equal((await del(doomed.id, admin.jwt)).status, 404, 'a second delete: 404');
  // The upload record went with it: the upload cannot be completed again (which would queue its row anew).
  t.equal((await get(ing(s.customer.slug, 'gone', `artifact-status/${doomed.uploadId}`), s.token)).status, 404, 'its upload record is gone');
  t.equal((await post(ing(s.customer.slug, 'gone', `artifact-complete/${doomed.uploadId}`), s.token, '')).status, 404, 'completing it again: 404');
  const q = await get(`${s.apiUrl}/api/quotas`, admin.jwt);
  t.match(q.body.quotas.artifact_bytes, { stored: 2 * MiB + 5, artifacts: 1 }, 'GET /api/quotas shows the freed room');
});

t.test('the quota frees at the gateway: an upload refused before the delete is taken after it', async (t) => {
  const c = await s.newCustomer('full');
  const cAdmin = await s.newUser('admin', { customer: c.customer });
  const big = await uploadArtifact(c.customer.slug, c.token, 'big', randomBytes(40 * MiB));
  const init = () => post(ing(c.customer.slug, 'next', 'artifact-init'), c.token, { filename: 'next.bin', size: 10 * MiB });
  await eventually(async () => (await init()).status === 507, 10_000, 'the quota full at the gateway');
  t.equal((await del(big.id, cAdmin.jwt)).status, 204);
  const ok = await eventually(async () => {
    const r = await init();
    return r.status === 201 ? r : null;
  }, 10_000, 'the gateway counts the freed bytes (CACHE_REFRESH_MS)');
  t.equal(ok.status, 201);
});

t.test('a download racing with the delete breaks off; it never ends short as if it were whole', async (t) => {
  const data = randomBytes(40 * MiB);
  const a = await uploadArtifact(s.customer.slug, s.token, 'race', data);
  const res = await new Promise<http.IncomingMessage>((resolve, reject) =>
    http.get(`${s.apiUrl}/api/artifacts/${a.id}/download`, { headers: { Authorization: `Bearer ${admin.jwt}` } }, resolve).on('error', reject),
  );
  t.equal(res.statusCode, 200);
  t.equal(Number(res.headers['content-length']), data.length);
  const parts: Buffer[] = [];
  const ended = new Promise<'end' | 'broken'>((resolve) => {
    res.on('end', () => resolve('end'));
    res.on('error', () => resolve('broken'));
    res.on('aborted', () => resolve('broken'));
    res.on('close', () => resolve(res.complete ? 'end' : 'broken'));
  });
  // Read one piece, then stop reading while the artifact is deleted.
  await new Promise<void>((resolve) => res.once('data', (b: Buffer) => (parts.push(b), res.pause(), resolve())));
  t.equal((await del(a.id, admin.jwt)).status, 204, 'deleted while the download is under way');
  res.on('data', (b: Buffer) => parts.push(b));
  res.resume();
  const how = await ended;
  const got = Buffer.concat(parts);
  if (how === 'end') {
    // Everything was in flight before the chunks went: then it must be the whole file.
    t.equal(got.length, data.length, 'a download that ends normally has every byte');
    t.equal(sha256(got), sha256(data), 'and they are the artifact');
  } else {
    t.ok(got.length < data.length, `the download broke off after ${got.length} of ${data.length} bytes (the client sees an error, not a short file)`);
  }
  t.equal((await get(`${s.apiUrl}/api/artifacts/${a.id}/download`, admin.jwt)).status, 404, 'a download started after the delete: 404');
});

t.test('retention: artifacts uploaded longer ago than RETENTION_ARTIFACTS_DAYS go, younger stay; a half-done deletion is finished', async (t) => {
  const c = await s.newCustomer('aged');
  const before = await objMessages();
  const old1 = await uploadArtifact(c.customer.slug, c.token, 'old1', randomBytes(MiB + 1));
  const old2 = await uploadArtifact(c.customer.slug, c.token, 'old2', randomBytes(10));
  const young = await uploadArtifact(c.customer.slug, c.token, 'young', randomBytes(MiB));
  const halfDone = await uploadArtifact(c.customer.slug, c.token, 'half', randomBytes(2 * MiB));
  t.equal(await objMessages(), before + 2 * (old1.chunks + old2.chunks + young.chunks + halfDone.chunks));
  // Two past the 30 days, one just inside; one marked as an api request that lost NATS leaves it.
  await s.pool.query(`UPDATE artifacts SET uploaded_at = now() - interval '31 days' WHERE id = ANY($1::uuid[])`, [[old1.id, old2.id]]);
  await s.pool.query(`UPDATE artifacts SET uploaded_at = now() - interval '29 days' WHERE id = $1`, [young.id]);
  await s.pool.query(`UPDATE artifacts SET deleting_at = now() WHERE id = $1`, [halfDone.id]);
  const mid = (await s.pool.query('SELECT machine_id FROM artifacts WHERE id = $1', [halfDone.id])).rows[0].machine_id;
  t.same((await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, c.token)).body.items, [], 'an artifact being deleted is not listed');
  t.equal((await get(`${s.apiUrl}/api/artifacts/${halfDone.id}/download`, c.token)).status, 404, 'nor downloaded');

  await eventually(
    async () => (await s.pool.query('SELECT count(*)::int AS n FROM artifacts WHERE customer_id = $1', [c.customer.id])).rows[0].n === 1,
    20_000,
    'the retention job deleted the aged and the half-deleted artifacts',
  );
  t.same((await s.pool.query('SELECT id FROM artifacts WHERE customer_id = $1', [c.customer.id])).rows.map((r) => r.id), [young.id], 'the younger one stays');
  t.equal(await objMessages(), before + 2 * young.chunks, 'only its chunks are left in the object store');
  t.match(await usage(c.customer.id), { bytes: String(MiB), artifacts: 1 });
  const dl = await get(`${s.apiUrl}/api/artifacts/${young.id}/download`, c.token);
  t.equal(dl.status, 200, 'and it downloads');
});
