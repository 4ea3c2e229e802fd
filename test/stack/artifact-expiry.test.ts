// Incomplete uploads expire and the BullMQ sweep deletes their chunks and record; a completed
// upload's chunks (the artifact) survive it. Short settings: 5 s expiry, a sweep every 300 ms.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { bucketNames } from '../../lib/store/artifacts.js';

const CHUNK = 64 * 1024;
const s = await testStack(t, 'artexpiry', {
  env: { ARTIFACT_UPLOAD_TTL_S: '5', ARTIFACT_SWEEP_MS: '300', ARTIFACT_EXPIRY_GRACE_S: '0', ARTIFACT_CHUNK_BYTES: String(CHUNK) },
});
const ing = (rest: string) => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/m1/agent/${rest}`;
const names = bucketNames(s.env.STREAM_NAME!);
const jsm = await s.nc.jetstreamManager();
const objects = async () => (await jsm.streams.info(`OBJ_${names.objects}`)).state.messages;
const kv = await s.nc.jetstream().views.kv(names.uploads);

async function put(id: string, n: number, body: Buffer) {
  const r = await fetch(ing(`artifact-chunk/${id}/${n}`), { method: 'PUT', headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/octet-stream' }, body });
  await r.arrayBuffer();
  return r.status;
}

t.test('an incomplete upload expires: its chunks and its record are deleted; a completed one stays downloadable', async (t) => {
  const done = randomBytes(2 * CHUNK + 5);
  const d = await post(ing('artifact-init'), s.token, { filename: 'kept.bin', size: done.length, sha256: createHash('sha256').update(done).digest('hex') });
  const left = randomBytes(3 * CHUNK);
  const l = await post(ing('artifact-init'), s.token, { filename: 'left.bin', size: left.length });
  t.equal(d.status, 201);
  t.equal(l.status, 201);
  for (let n = 0; n < 3; n++) t.equal(await put(d.body.upload_id, n, done.subarray(n * CHUNK, (n + 1) * CHUNK)), 200);
  for (const n of [0, 2]) t.equal(await put(l.body.upload_id, n, left.subarray(n * CHUNK, (n + 1) * CHUNK)), 200);
  const c = await post(ing(`artifact-complete/${d.body.upload_id}`), s.token, '');
  t.equal(c.status, 200, JSON.stringify(c.body));
  t.equal(await objects(), 2 * 5, 'five chunks stored (data + meta each)');

  // After the expiry (5 s) the gateway refuses the open upload at once; the sweep deletes it.
  await eventually(async () => (await get(ing(`artifact-status/${l.body.upload_id}`), s.token)).status === 404, 15_000, 'expired upload answers 404');
  t.equal(await put(l.body.upload_id, 1, left.subarray(CHUNK, 2 * CHUNK)), 404, 'no chunks for an expired upload');
  await eventually(async () => (await objects()) === 2 * 3, 10_000, "the expired upload's two chunks deleted, without tombstones");
  await eventually(async () => (await kv.get(l.body.upload_id))?.operation !== 'PUT', 10_000, 'its record deleted');

  // The completed upload: its record is forgotten too (older than the TTL, artifact row there),
  // but its chunks are the artifact and stay.
  await eventually(async () => (await kv.get(d.body.upload_id))?.operation !== 'PUT', 10_000, 'completed record forgotten');
  t.equal(await objects(), 2 * 3, 'the artifact keeps its chunks');
  const mid = (await get(`${s.apiUrl}/api/instances?machine=m1`, s.token)).body.items[0].machine_id;
  const list = await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, s.token);
  t.equal(list.body.items.length, 1);
  const r = await fetch(`${s.apiUrl}${list.body.items[0].download}`, { headers: { Authorization: `Bearer ${s.token}` } });
  t.equal(r.status, 200);
  t.ok(Buffer.from(await r.arrayBuffer()).equals(done), 'still downloads byte-identical');
  // The sweep runs as a BullMQ job under REDIS_PREFIX, with every other queue (workers/jobs.ts).
  t.ok((await s.redis.keys(`${s.env.REDIS_PREFIX}bull:artifact-expiry:*`)).length > 0, 'queue keys under REDIS_PREFIX');
});
