// `fleet ingest-batch`: reports from a file to the gateway's batch endpoint
// (POST /api/ingest/{customer}/batch, docs/api.md "Batch ingest"), for an agent's offline buffer
// or an edge aggregator's collection.
//
// The file is JSON (`{"entries": [...]}` or an array of entries) or NDJSON (one entry per line).
// Entries are sent in batches of at most `batchSize` entries and `maxBytes` bytes. Every entry
// without an `idempotency_key` gets one derived from the file's content and its position, so that
// sending an entry again (a 429 or 503 retried here, or the whole command run again within
// IDEMPOTENCY_TTL_S) stores it once. Entries answered 429 or 503 (alone, or the whole batch) are
// sent again after Retry-After, up to `retries` times; every other refusal is final.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';

export interface IngestBatchOptions {
  url: string;
  token: string;
  customer: string;
  file: string;
  batchSize: number;
  maxBytes: number;
  retries: number;
  log(line: string): void;
}

/** One entry's outcome: the gateway's result for it (docs/api.md), and its position in the file. */
export interface EntryOutcome {
  index: number;
  status: number;
  id?: string;
  detail?: string;
  [field: string]: unknown;
}

export class IngestBatchError extends Error {}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const retryable = (status: number) => status === 429 || status === 503;
/** `{"entries":[]}` around the entries. */
const ENVELOPE = 14;

/** The entries of a file: JSON (an array, or `{entries}`) or NDJSON. */
export function parseEntries(text: string): unknown[] {
  try {
    const v = JSON.parse(text) as unknown;
    if (Array.isArray(v)) return v;
    if (v !== null && typeof v === 'object' && Array.isArray((v as { entries?: unknown }).entries)) return (v as { entries: unknown[] }).entries;
    throw new IngestBatchError('the file must hold an array of entries or {"entries": [...]}');
  } catch (e) {
    if (e instanceof IngestBatchError) throw e;
  }
  const lines = text.split('\n').map((l, i) => [l.trim(), i + 1] as const).filter(([l]) => l !== '');
  return lines.map(([l, n]) => {
    try {
      return JSON.parse(l) as unknown;
    } catch (e) {
      throw new IngestBatchError(`line ${n} is not JSON (${(e as Error).message})`);
    }
  });
}

export async function ingestBatch(o: IngestBatchOptions): Promise<{ outcomes: EntryOutcome[]; accepted: number; refused: number }> {
  const bytes = await readFile(o.file);
  const entries = parseEntries(bytes.toString('utf8'));
  if (entries.length === 0) throw new IngestBatchError(`${o.file} holds no entries`);
  const fileId = createHash('sha256').update(bytes).digest('hex').slice(0, 32);
  // What is sent: each entry, with an idempotency key of its own unless it has one.
  const texts = entries.map((e, i) =>
    JSON.stringify(e !== null && typeof e === 'object' && !Array.isArray(e) && (e as Record<string, unknown>).idempotency_key === undefined ? { ...e, idempotency_key: `fleet-cli:${fileId}:${i}` } : e),
  );
  const outcomes: (EntryOutcome | undefined)[] = new Array(entries.length);
  const url = `${o.url.replace(/\/+$/, '')}/api/ingest/${o.customer}/batch`;

  let todo = entries.map((_, i) => i);
  for (let attempt = 0; todo.length > 0; attempt++) {
    const again: number[] = [];
    let wait = 0;
    for (const chunk of chunks(todo, texts, o.batchSize, o.maxBytes)) {
      const alone = chunk.length === 1 ? Buffer.byteLength(texts[chunk[0]!]!) : 0;
      if (alone + ENVELOPE > o.maxBytes) {
        outcomes[chunk[0]!] = { index: chunk[0]!, status: 413, detail: `entry of ${alone} bytes is larger than a batch may be (${o.maxBytes} bytes)` };
        continue;
      }
      const r = await send(url, o.token, `{"entries":[${chunk.map((i) => texts[i]).join(',')}]}`);
      if (r.status === 200 && Array.isArray(r.body?.results)) {
        chunk.forEach((index, j) => {
          const res = r.body.results[j] as { status: number; retry_after?: number };
          outcomes[index] = { ...res, index };
          if (retryable(res.status)) {
            again.push(index);
            wait = Math.max(wait, Number(res.retry_after ?? 1));
          }
        });
      } else if (retryable(r.status) || r.status === 0) {
        // The whole batch: not one entry accepted (or no answer). Send it again.
        for (const index of chunk) outcomes[index] = { index, status: r.status, detail: r.body?.detail ?? 'no answer' };
        again.push(...chunk);
        wait = Math.max(wait, Number(r.retryAfter ?? 1));
      } else {
        throw new IngestBatchError(`the gateway refused the batch: ${r.status} ${r.body?.detail ?? JSON.stringify(r.body)}`);
      }
    }
    if (again.length === 0 || attempt >= o.retries) break;
    o.log(`${again.length} entries to send again in ${wait} s (attempt ${attempt + 2} of ${o.retries + 1})`);
    await sleep(Math.min(60, Math.max(1, wait)) * 1000);
    todo = again;
  }
  const all = outcomes.map((x, index) => x ?? { index, status: 0, detail: 'not sent' });
  const accepted = all.filter((x) => x.status === 200 || x.status === 202).length;
  return { outcomes: all, accepted, refused: all.length - accepted };
}

/** Consecutive groups of the given entries, each within `size` entries and `maxBytes` bytes of request body. */
function* chunks(indices: number[], texts: string[], size: number, maxBytes: number): Generator<number[]> {
  let cur: number[] = [];
  let len = 0;
  for (const i of indices) {
    const add = Buffer.byteLength(texts[i]!) + 1;
    if (cur.length > 0 && (cur.length >= size || ENVELOPE + len + add > maxBytes)) {
      yield cur;
      cur = [];
      len = 0;
    }
    cur.push(i);
    len += add;
  }
  if (cur.length > 0) yield cur;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the gateway's answer, read field by field
async function send(url: string, token: string, body: string): Promise<{ status: number; body: any; retryAfter: string | null }> {
  try {
    const r = await fetch(url, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body });
    const text = await r.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: r.status, body: parsed, retryAfter: r.headers.get('retry-after') };
  } catch (e) {
    return { status: 0, body: { detail: `no answer: ${(e as Error).message}` }, retryAfter: null };
  }
}
