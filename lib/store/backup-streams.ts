// JetStream streams in a backup: each stream's messages, read one by one by sequence number (a
// message get: no consumer, so it works on the work-queue streams, which refuse a second consumer)
// and written to a file of frames; restored by publishing each message again, in order, on the
// target's stream (its subject mapped to the target's names).
//
// A frame: u32 (big endian) length of the meta JSON, the meta JSON ({seq, subject, time,
// headers: [[name, value], …]}), u32 length of the data, the data. Plain bytes, so an artifact's
// chunks are kept exactly; the file's SHA-256 is in the manifest.
//
// Why not the server's snapshot API ($JS.API.STREAM.SNAPSHOT/RESTORE): it restores a stream only
// under its own name, with its consumers, and nats.js 2 has no client for it; reading and
// republishing the messages restores into a stack with other names (STREAM_NAME, SUBJECT_PREFIX)
// and is built from calls this project already uses. The price: sequence numbers and stored times
// are new in the target (nothing of the app keys on them; the dead-letter tools show the new ones).
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { headers as natsHeaders, type JetStreamManager, type JetStreamClient, type StoredMsg } from 'nats';
import { JetStreamApiCodes, jsApiCode } from '../infra/jetstream-errors.js';

export interface StreamFileSummary {
  /** Messages written. */
  messages: number;
  /** Sequence numbers of the first and last message written (0 when none). */
  first_seq: number;
  last_seq: number;
  bytes: number;
  sha256: string;
}

/** A message get of a sequence the stream does not hold (acked from a work queue, or deleted). */
const isGone = (e: unknown) => jsApiCode(e) === JetStreamApiCodes.NoMessageFound || jsApiCode(e) === JetStreamApiCodes.SequenceNotFound;

/** Headers the server judges against the stream it is stored in: meaningless in another stream. */
const dropHeader = (name: string) => /^Nats-Expected-/i.test(name) || /^Nats-Msg-Id$/i.test(name);

const GETS_IN_FLIGHT = 32;

/** JetStream direct get (nats.js has it on the manager, its typings do not declare it; lib/store/artifacts.ts reads chunks so). */
type DirectGet = { direct: { getMessage(stream: string, q: { seq: number; next_by_subj: string }): Promise<StoredMsg> } };

/**
 * Writes every message of `stream` from its first sequence up to `upTo` (inclusive) that is still
 * there when asked for. A message gone meanwhile (a worker acked it) is skipped: the caller takes
 * its database snapshots after this returns, so whatever such a message did is in them.
 */
export async function writeStreamFile(jsm: JetStreamManager, stream: string, upTo: number, file: string): Promise<StreamFileSummary> {
  const out = createWriteStream(file);
  const hash = createHash('sha256');
  const sum: StreamFileSummary = { messages: 0, first_seq: 0, last_seq: 0, bytes: 0, sha256: '' };
  const write = async (b: Buffer) => {
    hash.update(b);
    sum.bytes += b.length;
    if (!out.write(b)) await once(out, 'drain');
  };
  try {
    const info = await jsm.streams.info(stream);
    // The next message at or after `seq` (a direct get, where the stream allows it: KV buckets and
    // object stores do): a long run of deleted messages (superseded KV revisions, deleted
    // artifacts' chunks) is crossed in one request instead of one per sequence number.
    const nextFrom = async (seq: number): Promise<number> => {
      if (!info.config.allow_direct) return seq;
      try {
        return (await (jsm as unknown as DirectGet).direct.getMessage(stream, { seq, next_by_subj: '>' })).seq;
      } catch (e) {
        if (isGone(e) || (e as { code?: string }).code === '404') return upTo + 1;
        throw e;
      }
    };
    for (let seq = Math.max(info.state.first_seq, 1); seq <= upTo; ) {
      const seqs = Array.from({ length: Math.min(GETS_IN_FLIGHT, upTo - seq + 1) }, (_, i) => seq + i);
      const msgs = await Promise.all(
        seqs.map((s) =>
          jsm.streams.getMessage(stream, { seq: s }).catch((e: unknown) => {
            if (isGone(e)) return null;
            throw e;
          }),
        ),
      );
      seq += seqs.length;
      if (msgs.every((m) => m === null) && seq <= upTo) seq = await nextFrom(seq);
      for (const m of msgs) {
        if (!m) continue;
        const frame = encodeFrame(m);
        await write(frame);
        sum.messages++;
        if (sum.first_seq === 0) sum.first_seq = m.seq;
        sum.last_seq = m.seq;
      }
    }
  } finally {
    out.end();
    await once(out, 'close');
  }
  sum.sha256 = hash.digest('hex');
  return sum;
}

function encodeFrame(m: StoredMsg): Buffer {
  const hdrs: [string, string][] = [];
  if (m.header) for (const k of m.header.keys()) for (const v of m.header.values(k)) hdrs.push([k, v]);
  const meta = Buffer.from(JSON.stringify({ seq: m.seq, subject: m.subject, time: m.time.toISOString(), headers: hdrs }));
  const head = Buffer.alloc(4);
  head.writeUInt32BE(meta.length);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(m.data.length);
  return Buffer.concat([head, meta, len, Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength)]);
}

export interface StoredFrame {
  seq: number;
  subject: string;
  time: string;
  headers: [string, string][];
  data: Uint8Array;
}

/** The frames of a stream file, in order. */
export async function* readStreamFile(file: string): AsyncGenerator<StoredFrame> {
  let buf: Buffer = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { highWaterMark: 1024 * 1024 })) {
    buf = buf.length ? Buffer.concat([buf, chunk as Buffer]) : (chunk as Buffer);
    for (;;) {
      if (buf.length < 4) break;
      const metaLen = buf.readUInt32BE(0);
      if (buf.length < 8 + metaLen) break;
      const dataLen = buf.readUInt32BE(4 + metaLen);
      const end = 8 + metaLen + dataLen;
      if (buf.length < end) break;
      const meta = JSON.parse(buf.subarray(4, 4 + metaLen).toString('utf8')) as Omit<StoredFrame, 'data'>;
      yield { ...meta, data: Uint8Array.prototype.slice.call(buf.subarray(8 + metaLen, end)) };
      buf = buf.subarray(end);
    }
  }
  if (buf.length > 0) throw new Error(`${file}: ${buf.length} bytes after the last whole message (the file is cut short)`);
}

const PUBLISHES_IN_FLIGHT = 64;

/**
 * Publishes the frames of `file` on the target stream, in their order, each subject passed through
 * `mapSubject` and each body through `mapData` (the object store's metadata names its bucket).
 * Returns how many were stored. The caller purges the target stream first, so a repeated run
 * leaves it exactly as one run does.
 */
export async function publishStreamFile(
  js: JetStreamClient,
  file: string,
  mapSubject: (s: string) => string,
  mapData: (subject: string, d: Uint8Array) => Uint8Array = (_s, d) => d,
): Promise<number> {
  let n = 0;
  let inflight: Promise<unknown>[] = [];
  for await (const f of readStreamFile(file)) {
    const h = natsHeaders();
    let any = false;
    for (const [k, v] of f.headers) {
      if (dropHeader(k)) continue;
      h.append(k, v);
      any = true;
    }
    const subject = mapSubject(f.subject);
    // One connection publishes in order: the server stores them in the order sent, so a rolled-up
    // subject (object metadata, a KV key) keeps its last value.
    inflight.push(js.publish(subject, mapData(subject, f.data), any ? { headers: h } : {}));
    n++;
    if (inflight.length >= PUBLISHES_IN_FLIGHT) {
      await Promise.all(inflight);
      inflight = [];
    }
  }
  await Promise.all(inflight);
  return n;
}
