// Memory stays flat while a large artifact streams: the api's RSS is sampled while it serves a
// download of ARTIFACT_RSS_MB (default 256) MiB, the gateway's while it takes the upload. A process
// that buffered the artifact would grow by at least its size; streaming ones grow by what V8 lets
// garbage Buffers reach before it collects them (its external-memory trigger, about 64 MiB),
// whatever the size. The bound here is 128 MiB.
// `ARTIFACT_RSS_MB=1024 npm test -- artifact-memory` measures a 1 GiB artifact (see docs/operations.md).
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { testStack, post } from '../helpers/stack.js';

const MB = Number(process.env.ARTIFACT_RSS_MB ?? 256);
const MiB = 1024 * 1024;
const SIZE = MB * MiB;
const s = await testStack(t, 'artmem');
const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
const pidOf = (name: string) => s.procs.find((p) => p.name === name)!.child.pid!;

/** Samples a process's RSS every 20 ms while `fn` runs: [before, peak]. */
async function sampled(pid: number, fn: () => Promise<void>): Promise<[number, number]> {
  const before = rssOf(pid);
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 20);
  try {
    await fn();
  } finally {
    clearInterval(timer);
  }
  return [before, Math.max(peak, rssOf(pid))];
}

/** Chunk n of the test file: random bytes, made distinct per chunk by its number up front. */
const BASE = randomBytes(MiB);
function chunkOf(n: number): Buffer {
  const b = Buffer.from(BASE);
  b.writeUInt32LE(n, 0);
  return b;
}

t.test(`a ${MB} MiB artifact: gateway and api memory stay flat`, async (t) => {
  const hash = createHash('sha256');
  for (let n = 0; n < MB; n++) hash.update(chunkOf(n));
  const sha = hash.digest('hex');
  const ing = (rest: string) => `${s.gatewayUrl}/api/ingest/${s.customer.slug}/m1/agent/${rest}`;
  const init = await post(ing('artifact-init'), s.token, { filename: 'big.bin', size: SIZE, sha256: sha });
  t.equal(init.status, 201);
  const id = init.body.upload_id;

  const upStarted = Date.now();
  let upSecs = 0;
  const [gwBefore, gwPeak] = await sampled(pidOf('gateway'), async () => {
    let next = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < MB) {
          const n = next++;
          const r = await fetch(ing(`artifact-chunk/${id}/${n}`), {
            method: 'PUT',
            headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/octet-stream' },
            body: chunkOf(n),
          });
          await r.arrayBuffer();
          if (r.status !== 200) throw new Error(`chunk ${n}: ${r.status}`);
        }
      }),
    );
    upSecs = (Date.now() - upStarted) / 1000;
    const c = await post(ing(`artifact-complete/${id}`), s.token, '');
    if (c.status !== 200) throw new Error(`complete: ${c.status} ${JSON.stringify(c.body)}`);
  });
  const complete = await post(ing(`artifact-complete/${id}`), s.token, '');
  const url = `${s.apiUrl}/api/artifacts/${complete.body.artifact_id}/download`;
  // Wait for the worker's row, and warm the api's download path up.
  for (let i = 0; i < 100; i++) {
    const r = await fetch(url, { headers: { Authorization: `Bearer ${s.token}`, Range: 'bytes=0-0' } });
    await r.arrayBuffer();
    if (r.status === 206) break;
    await new Promise((r) => setTimeout(r, 100));
  }

  let got = '';
  let bytes = 0;
  const started = Date.now();
  const [apiBefore, apiPeak] = await sampled(pidOf('api'), async () => {
    const r = await fetch(url, { headers: { Authorization: `Bearer ${s.token}` } });
    t.equal(r.status, 200);
    t.equal(r.headers.get('content-length'), String(SIZE));
    const h = createHash('sha256');
    for await (const part of r.body as unknown as AsyncIterable<Uint8Array>) {
      h.update(part);
      bytes += part.length;
    }
    got = h.digest('hex');
  });
  const secs = (Date.now() - started) / 1000;
  t.equal(bytes, SIZE);
  t.equal(got, sha, 'byte-identical');
  const mib = (x: number) => (x / MiB).toFixed(1);
  const report =
    `${MB} MiB artifact: api RSS ${mib(apiBefore)} -> peak ${mib(apiPeak)} MiB (+${mib(apiPeak - apiBefore)}) while streaming at ${(MB / secs).toFixed(0)} MiB/s; ` +
    `gateway RSS ${mib(gwBefore)} -> peak ${mib(gwPeak)} MiB (+${mib(gwPeak - gwBefore)}) while taking the upload at ${(MB / upSecs).toFixed(0)} MiB/s (4 chunks in flight) and completing it (sha256 over the chunks)`;
  t.comment(report);
  process.stderr.write(`[artifact-memory] ${report}\n`);
  t.ok(apiPeak - apiBefore < 128 * MiB, `api grew by ${mib(apiPeak - apiBefore)} MiB (< 128)`);
  t.ok(gwPeak - gwBefore < 128 * MiB, `gateway grew by ${mib(gwPeak - gwBefore)} MiB (< 128)`);
});
