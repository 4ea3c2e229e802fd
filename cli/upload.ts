// `fleet upload`: a file to the gateway as a chunked, resumable artifact upload.
//
//   init -> PUT every missing chunk (PARALLEL at a time, read from the file at its offset, so memory
//   stays at PARALLEL chunks) -> complete. The upload id is remembered in a small state file under
//   $XDG_CACHE_HOME/fleet/uploads (default ~/.cache/fleet/uploads), keyed by the file's path and the
//   destination; a run that was interrupted (Ctrl-C, a crash, a lost network) resumes from the
//   gateway's artifact-status, sending only the chunks it lacks. A chunk refused with 429/503 or
//   lost to a network error is retried with backoff (honouring Retry-After).
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, stat, readFile, writeFile, mkdir, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join, resolve, basename } from 'node:path';
import cliProgress from 'cli-progress';

/** A gateway answer: JSON (fields as documented in docs/api.md) or text. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the answers of several endpoints, read field by field
type Answer = any;

export interface UploadOptions {
  url: string;
  token: string;
  customer: string;
  machine: string;
  software: string;
  file: string;
  contentType?: string;
  parallel: number;
  /** Send at most this many chunks in this run, then stop (the next run resumes). */
  maxChunks?: number;
  stateDir?: string;
  progress: boolean;
  log(line: string): void;
}

export type UploadResult =
  | { done: true; artifactId: string; uploadId: string; resumed: boolean; sent: number }
  | { done: false; uploadId: string; resumed: boolean; sent: number; missing: number };

interface State {
  upload_id: string;
  url: string;
  customer: string;
  machine: string;
  software: string;
  file: string;
  size: number;
  mtime_ms: number;
  sha256: string;
}

export class UploadError extends Error {}

export function defaultStateDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'fleet', 'uploads');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function sha256File(file: string): Promise<string> {
  const h = createHash('sha256');
  for await (const b of createReadStream(file, { highWaterMark: 1024 * 1024 })) h.update(b as Buffer);
  return h.digest('hex');
}

export async function upload(o: UploadOptions): Promise<UploadResult> {
  const file = resolve(o.file);
  const st = await stat(file);
  if (!st.isFile()) throw new UploadError(`${o.file} is not a file`);
  const base = `${o.url.replace(/\/+$/, '')}/api/ingest/${o.customer}/${o.machine}/${o.software}`;
  const stateDir = o.stateDir ?? defaultStateDir();
  const stateFile = join(stateDir, createHash('sha1').update([file, o.url, o.customer, o.machine, o.software].join('\n')).digest('hex') + '.json');
  const auth = { Authorization: `Bearer ${o.token}` };

  /** fetch with retries on 429, 503 and network errors; any other answer is returned. */
  async function call(method: string, url: string, body?: Buffer | string, headers: Record<string, string> = {}): Promise<{ status: number; body: Answer }> {
    for (let attempt = 1; ; attempt++) {
      let wait = Math.min(30_000, 500 * 2 ** (attempt - 1));
      try {
        const r = await fetch(url, { method, headers: { ...auth, ...headers }, body });
        const text = await r.text();
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          /* not JSON */
        }
        if (r.status !== 429 && r.status !== 503) return { status: r.status, body: parsed };
        const ra = Number(r.headers.get('retry-after'));
        if (ra > 0) wait = ra * 1000;
        if (attempt >= 10) return { status: r.status, body: parsed };
      } catch (e) {
        if (attempt >= 10) throw new UploadError(`${method} ${url}: ${(e as Error).message}`);
      }
      await sleep(wait);
    }
  }
  const detail = (r: { status: number; body: Answer }) => `${r.status} ${typeof r.body === 'object' && r.body?.detail ? r.body.detail : String(r.body).slice(0, 200)}`;

  // Resume?
  let state: State | null = null;
  try {
    const s = JSON.parse(await readFile(stateFile, 'utf8')) as State;
    if (s.size === st.size && s.mtime_ms === st.mtimeMs) state = s;
  } catch {
    /* none */
  }
  let status: { status: number; body: Answer } | null = null;
  if (state) {
    status = await call('GET', `${base}/artifact-status/${state.upload_id}`);
    if (status.status !== 200) {
      o.log(`upload ${state.upload_id} cannot be resumed (${detail(status)}); starting a new one`);
      state = null;
    }
  }
  const resumed = state !== null;
  if (!state) {
    o.log(`hashing ${basename(file)} (${st.size} bytes)`);
    const sha256 = await sha256File(file);
    const init = await call(
      'POST',
      `${base}/artifact-init`,
      JSON.stringify({ filename: basename(file), size: st.size, sha256, ...(o.contentType ? { content_type: o.contentType } : {}) }),
      { 'Content-Type': 'application/json' },
    );
    if (init.status !== 201) throw new UploadError(`artifact-init: ${detail(init)}`);
    state = { upload_id: init.body.upload_id, url: o.url, customer: o.customer, machine: o.machine, software: o.software, file, size: st.size, mtime_ms: st.mtimeMs, sha256 };
    await mkdir(stateDir, { recursive: true });
    await writeFile(stateFile, JSON.stringify(state), { mode: 0o600 });
    status = await call('GET', `${base}/artifact-status/${state.upload_id}`);
    if (status.status !== 200) throw new UploadError(`artifact-status: ${detail(status)}`);
  }
  const s = status!.body as { chunk_size: number; chunks: number; size: number; missing: number[]; state: string; artifact_id: string | null };
  const id = state.upload_id;
  if (resumed) o.log(`resuming upload ${id}: ${s.chunks - s.missing.length} of ${s.chunks} chunks already there`);

  const todo = o.maxChunks !== undefined ? s.missing.slice(0, o.maxChunks) : [...s.missing];
  const chunkLen = (n: number) => Math.max(0, Math.min(s.chunk_size, s.size - n * s.chunk_size));
  const bar = o.progress
    ? new cliProgress.SingleBar(
        { format: 'upload |{bar}| {percentage}% | {value}/{total} bytes | {eta_formatted} left', hideCursor: true, stream: process.stderr },
        cliProgress.Presets.shades_classic,
      )
    : null;
  bar?.start(s.size, s.size - s.missing.reduce((a, n) => a + chunkLen(n), 0));

  let sent = 0;
  const fh = await open(file, 'r');
  try {
    let next = 0;
    let failure: Error | null = null;
    const worker = async () => {
      while (failure === null && next < todo.length) {
        const n = todo[next++]!;
        const buf = Buffer.alloc(chunkLen(n));
        const { bytesRead } = await fh.read(buf, 0, buf.length, n * s.chunk_size);
        if (bytesRead !== buf.length) {
          failure = new UploadError(`${o.file} changed while uploading (short read at chunk ${n})`);
          return;
        }
        const r = await call('PUT', `${base}/artifact-chunk/${id}/${n}`, buf, { 'Content-Type': 'application/octet-stream' });
        if (r.status !== 200) {
          failure = new UploadError(`chunk ${n}: ${detail(r)}`);
          return;
        }
        sent++;
        bar?.increment(buf.length);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(o.parallel, todo.length)) }, worker));
    if (failure) throw failure;
  } finally {
    await fh.close();
    bar?.stop();
  }

  const missing = s.missing.length - sent;
  if (missing > 0) return { done: false, uploadId: id, resumed, sent, missing };
  const done = await call('POST', `${base}/artifact-complete/${id}`);
  if (done.status === 200) {
    await rm(stateFile, { force: true });
    return { done: true, artifactId: done.body.artifact_id, uploadId: id, resumed, sent };
  }
  if (done.status === 409 && /sha256/.test(detail(done))) await rm(stateFile, { force: true }); // this upload can never complete
  throw new UploadError(`artifact-complete: ${detail(done)}`);
}
