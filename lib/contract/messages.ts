// The message format on the queue, in one place.
//
// Stream `${STREAM_NAME}` (work-queue retention, file storage) holds two subjects:
//
//   `${SUBJECT_PREFIX}.reports`     one message = a batch of accepted reports: {"v":1,"r":[WireReport, …]}.
//                                  The gateway groups the reports that arrive together into one
//                                  publish (one PubAck for many requests: see bench/README.md), and
//                                  answers each request only after that PubAck. Nats-Msg-Id is the
//                                  batch id, so a retried publish is deduplicated by JetStream.
//   `${SUBJECT_PREFIX}.rejections`  one message = one rejection-log record (RejectionRecord).
//
// Stream `${STREAM_NAME}_HB` (the heartbeat lane: work-queue retention, file storage, the same
// size limit) holds one subject:
//
//   `${SUBJECT_PREFIX}.heartbeats`  the same batches as `.reports`, holding heartbeats only.
//
// Heartbeats drive the traffic light, so they never queue behind other reports: a gateway groups
// them apart and publishes them here, and every worker pulls this stream with a consumer of its
// own (the same durable name), so a backlog of large reports (a customer's full-rate metrics,
// diagnostics of 1 MiB) delays no heartbeat (docs/architecture.md "Lanes"). A heartbeat in the
// main stream (a dead letter replayed, a message from before the lane) is applied the same way.
//
// Report kinds `metrics` (body `{items: [MetricRecord, …]}`: the records of one request that were
// new to the gateway) and `artifact` (body: the completed upload record, ArtifactReport) travel in
// the same batches; workers/metrics.ts and workers/artifacts.ts apply them.
//
// Stream `${STREAM_NAME}_DLQ` holds `${SUBJECT_PREFIX}-dlq.reports.<customer slug>` (`._none`: no
// customer known): each one report whose data storage (or the worker's own check) proved at fault,
// as a batch of one holding the report's bytes as queued (reportSlices), the reason and the
// report's identity in headers; or a message that is not a batch at all, byte for byte. Outages
// never make dead letters (lib/infra/storage-errors.ts). lib/store/dead-letters.ts defines that format and reads it.
//
// Core NATS (not stored) `${SUBJECT_PREFIX}.control.<topic>`: hints that control data changed, so
// replicas refresh their caches at once instead of at the next poll.
//   `…control.commands`  {"i":[[customer id, machine slug, software slug], …]}: the open agent
//                        commands of these instances changed (queued, delivered, acked, cancelled,
//                        expired, timed out); every gateway re-reads them (lib/store/commands.ts).
//   `…control.timeout-rules`  a customer id (UTF-8 text): its timeout rules changed; every worker
//                        drops its cached copies of them (lib/store/timeout-rules.ts).
//   `…control.light.<customer id>`  {"v":1,"events":[…]}: that customer's traffic-light changes
//                        (LightEvent, lib/domain/traffic-light.ts LightMessage), for the api's
//                        live stream (api/light-stream.ts); a dashboard that missed one re-reads.
// lib/infra/hints.ts publishes and reads them: best effort, each reader also polls.
//
// The codec. One report on the wire (WireReport) has short keys, so a batch of 512 small reports
// stays small; everything past the codec works on the readable Report. encodeReport, toReport and
// toWire are the only code that knows the short keys, besides the envelope check (lib/domain/report-check.ts
// envelopeRefusal, which judges what was queued). The mapping:
//
//   wire  Report              meaning
//   id    id                  report id (UUID): the key that makes every write idempotent
//   k     kind                report kind, or `command_ack`
//   c     customerId          customer id (UUID), as authorised by the token
//   cs    customer            customer slug
//   m     machine             machine slug (from the path)
//   s     software            software slug (from the path)
//   t     tokenId             API token id (UUID)
//   at    receivedAt          gateway receive time, ms since the epoch
//   ik    idempotencyKey      Idempotency-Key header (absent: none sent)
//   dc    deliveredCommands   agent command ids handed out in the answer (absent: none)
//   ci    commandId           kind `command_ack`: the acknowledged command's id
//   b     body                the request body exactly as the agent sent it (validated JSON)
//
// The keys are written in that order (encodeReport), `b` last: the gateway splices the raw body in
// without re-serialising it. A worker decodes a message (decodeBatch: wire reports), keeps each
// wire report for the envelope check and its bytes for a dead letter (reportSlices), and applies
// the readable reports (toReport).
import type { ReportKind } from './schemas/ingest.js';

export const MESSAGE_VERSION = 1;

/** One accepted report, as the workers apply it. `body` is the request body exactly as the agent sent it (validated JSON). */
export interface Report {
  /** Report id (UUID): the key that makes every write idempotent. Derived from Idempotency-Key when given. */
  id: string;
  kind: ReportKind | 'command_ack';
  /** Customer id (UUID) and slug, as authorised by the token. */
  customerId: string;
  customer: string;
  /** Machine and software slugs from the path. */
  machine: string;
  software: string;
  /** API token id (UUID). */
  tokenId: string;
  /** Gateway receive time, ms since the epoch: the traffic light uses this, never the agent's clock. */
  receivedAt: number;
  /** Idempotency-Key header, when the client sent one. */
  idempotencyKey?: string;
  /** Agent commands the gateway handed out in the answer to this report (ids): recorded as delivered. */
  deliveredCommands?: string[];
  /** kind `command_ack`: the acknowledged command's id (the body is the CommandAck). */
  commandId?: string;
  body: unknown;
}

/** One report as queued: Report under the short keys of the header's table. Only the codec and the envelope check read it. */
export interface WireReport {
  id: string;
  k: ReportKind | 'command_ack';
  c: string;
  cs: string;
  m: string;
  s: string;
  t: string;
  at: number;
  ik?: string;
  dc?: string[];
  ci?: string;
  b: unknown;
}

export interface ReportBatch {
  v: number;
  r: WireReport[];
}

export interface RejectionRecord {
  id: string;
  at: number;
  customer_id: string;
  customer: string;
  token_id: string;
  method: string;
  path: string;
  status: number;
  detail: string;
  body_size: number;
  remote: string;
  /** Rejections from the same source that were counted but not written (rate limit of the log). */
  dropped: number;
}

export function subjects(prefix: string) {
  return {
    reports: `${prefix}.reports`,
    rejections: `${prefix}.rejections`,
    heartbeats: `${prefix}.heartbeats`,
    deadLetter: `${prefix}-dlq.reports`,
    control: (topic: string) => `${prefix}.control.${topic}`,
  };
}

/** The heartbeat lane's stream (of a partition's main stream). */
export function heartbeatStream(streamName: string): string {
  return `${streamName}_HB`;
}

/** The lanes: heartbeats have a stream of their own in every partition. */
export type Lane = 'reports' | 'heartbeats';
export const laneOf = (kind: string): Lane => (kind === 'heartbeat' ? 'heartbeats' : 'reports');

/**
 * The ingest partition of a machine's reports: FNV-1a (32 bits) of `<customer id>/<machine slug>`
 * modulo the number of partitions. Stable across processes and versions (gateways, dead-letter
 * replay and the bench must agree), and every report of one machine, so of each of its instances,
 * lands in one partition and keeps its order there.
 */
export function partitionOf(customerId: string, machine: string, partitions: number): number {
  if (partitions <= 1) return 0;
  let h = 0x811c9dc5;
  const key = `${customerId}/${machine}`;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % partitions;
}

/** One partition's streams and subjects (`partitions` = 1: the names of a stack without partitions). */
export interface IngestPartition {
  partition: number;
  /** The main stream (`reports` and `rejections` subjects) and the heartbeat lane's. */
  streams: Record<Lane, string>;
  subjects: { reports: string; heartbeats: string; rejections: string };
}

/**
 * The ingest partitions (docs/architecture.md "Partitions"). One partition keeps the names of
 * before: streams `${STREAM_NAME}` and `${STREAM_NAME}_HB`, subjects `${SUBJECT_PREFIX}.reports`,
 * `.heartbeats`, `.rejections`. N > 1: partition p has streams `${STREAM_NAME}_<p>` and
 * `${STREAM_NAME}_<p>_HB`, subjects `${SUBJECT_PREFIX}.p<p>.reports` (`.heartbeats`, `.rejections`).
 */
export function ingestPartition(streamName: string, prefix: string, partition: number, partitions: number): IngestPartition {
  const main = partitions <= 1 ? streamName : `${streamName}_${partition}`;
  const p = partitions <= 1 ? prefix : `${prefix}.p${partition}`;
  return {
    partition,
    streams: { reports: main, heartbeats: heartbeatStream(main) },
    subjects: { reports: `${p}.reports`, heartbeats: `${p}.heartbeats`, rejections: `${p}.rejections` },
  };
}

export function ingestPartitions(streamName: string, prefix: string, partitions: number): IngestPartition[] {
  return Array.from({ length: Math.max(1, partitions) }, (_, i) => ingestPartition(streamName, prefix, i, partitions));
}

/** The partition (streams and subjects) a stream of ingestStreamOf belongs to, with the stream's lane. */
export function partitionOfStream(streamName: string, prefix: string, name: string): (IngestPartition & { lane: Lane; label: string }) | null {
  const of = ingestStreamOf(streamName, name);
  if (!of) return null;
  // Any count above one names partition p alike.
  const p = of.partition === null ? ingestPartition(streamName, prefix, 0, 1) : ingestPartition(streamName, prefix, of.partition, of.partition + 2);
  return { ...p, lane: of.lane, label: of.partition === null ? 'unpartitioned' : String(of.partition) };
}

/** Every stream of `partitions` ingest partitions that workers consume: each partition's main stream and heartbeat lane. */
export function ingestStreams(streamName: string, partitions = 1): string[] {
  return ingestPartitions(streamName, '', partitions).flatMap((p) => [p.streams.reports, p.streams.heartbeats]);
}

/**
 * Whether `name` is one of the ingest streams of `streamName` under any number of partitions (a
 * worker consumes every one that exists: partitions made by a gateway with a larger
 * STREAM_PARTITIONS, or the unpartitioned streams left from before a change of it); its lane
 * and partition, else null.
 */
export function ingestStreamOf(streamName: string, name: string): { lane: Lane; partition: number | null } | null {
  if (!name.startsWith(streamName)) return null;
  const m = /^(?:_(\d{1,3}))?(_HB)?$/.exec(name.slice(streamName.length));
  if (!m) return null;
  return { lane: m[2] ? 'heartbeats' : 'reports', partition: m[1] === undefined ? null : Number(m[1]) };
}

export function deadLetterStream(streamName: string): string {
  return `${streamName}_DLQ`;
}

const enc = new TextEncoder();

/**
 * The bytes of one report without re-serialising the body: the gateway has the validated raw body
 * and only wraps it. Slugs and ids are validated to [a-z0-9-], so they need no escaping.
 */
export function encodeReport(r: Omit<Report, 'body'>, rawBody: Uint8Array | null): Buffer {
  const head =
    `{"id":"${r.id}","k":"${r.kind}","c":"${r.customerId}","cs":"${r.customer}","m":"${r.machine}","s":"${r.software}","t":"${r.tokenId}","at":${r.receivedAt}` +
    (r.idempotencyKey === undefined ? '' : `,"ik":${JSON.stringify(r.idempotencyKey)}`) +
    // Command ids are UUIDs (from the gateway's memory or checked on the path): no escaping needed.
    (r.deliveredCommands === undefined || r.deliveredCommands.length === 0 ? '' : `,"dc":["${r.deliveredCommands.join('","')}"]`) +
    (r.commandId === undefined ? '' : `,"ci":"${r.commandId}"`) +
    ',"b":';
  if (rawBody === null || rawBody.length === 0) return Buffer.from(head + '{}}');
  // One buffer written in place (Buffer.from of the head, then concat, made and copied two).
  // Without an idempotency key the head is ASCII (slugs, UUIDs, a number): a character is a byte,
  // written as latin1 without measuring it first (Buffer.byteLength was 4 % of a batch's CPU).
  const ascii = r.idempotencyKey === undefined;
  const headBytes = ascii ? head.length : Buffer.byteLength(head);
  const out = Buffer.allocUnsafe(headBytes + rawBody.length + 1);
  out.write(head, 0, headBytes, ascii ? 'latin1' : 'utf8');
  out.set(rawBody, headBytes);
  out[headBytes + rawBody.length] = 0x7d; // }
  return out;
}

/**
 * The readable report of a wire report (an object). Values are taken as they are: a wire report
 * that fails envelopeRefusal maps all the same (the worker judges the wire one), and a key the wire
 * lacks is absent (the optional ones) or undefined.
 */
export function toReport(w: WireReport): Report {
  const r: Report = { id: w.id, kind: w.k, customerId: w.c, customer: w.cs, machine: w.m, software: w.s, tokenId: w.t, receivedAt: w.at, body: w.b };
  if (w.ik !== undefined) r.idempotencyKey = w.ik;
  if (w.dc !== undefined) r.deliveredCommands = w.dc;
  if (w.ci !== undefined) r.commandId = w.ci;
  return r;
}

/**
 * The wire report of a readable one (toReport's inverse, the body left as it is): what the envelope
 * check judges once a worker has applied a report, whose receive time the idempotency settle may
 * have replaced with the first copy's (workers/apply-batch.ts).
 */
export function toWire(r: Report): WireReport {
  const w: WireReport = { id: r.id, k: r.kind, c: r.customerId, cs: r.customer, m: r.machine, s: r.software, t: r.tokenId, at: r.receivedAt, b: r.body };
  if (r.idempotencyKey !== undefined) w.ik = r.idempotencyKey;
  if (r.deliveredCommands !== undefined) w.dc = r.deliveredCommands;
  if (r.commandId !== undefined) w.ci = r.commandId;
  return w;
}

const BATCH_OPEN = Buffer.from(`{"v":${MESSAGE_VERSION},"r":[`);
const BATCH_CLOSE = Buffer.from(']}');
const COMMA = Buffer.from(',');

export function encodeBatch(reports: Buffer[]): Buffer {
  const parts: Buffer[] = [BATCH_OPEN];
  for (let i = 0; i < reports.length; i++) {
    if (i > 0) parts.push(COMMA);
    parts.push(reports[i]!);
  }
  parts.push(BATCH_CLOSE);
  return Buffer.concat(parts);
}

export class DecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DecodeError';
  }
}

export function decodeBatch(data: Uint8Array): ReportBatch {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8'));
  } catch (e) {
    throw new DecodeError(`report batch is not JSON: ${(e as Error).message}`);
  }
  const b = parsed as ReportBatch;
  if (!b || typeof b !== 'object' || b.v !== MESSAGE_VERSION || !Array.isArray(b.r)) {
    throw new DecodeError('report batch has an unknown shape or version');
  }
  return b;
}

/**
 * Replaces the strings a batch's reports repeat (customer id and slug, token id, kind, software)
 * with one copy each, kept in `seen` (at most `SHARED_MAX` strings; emptied when full). A worker
 * holds a whole batch, tens of thousands of reports, across its writes: `JSON.parse` gives every
 * report its own copy of each string, and every copy outlived the young generation's collections
 * (copied, then promoted). Only strings are shared; any other value is left for the envelope check.
 */
export function shareRepeated(w: WireReport, seen: Map<string, string>): void {
  if (typeof w.c === 'string') w.c = share(w.c, seen);
  if (typeof w.cs === 'string') w.cs = share(w.cs, seen);
  if (typeof w.t === 'string') w.t = share(w.t, seen);
  if (typeof w.k === 'string') w.k = share(w.k, seen);
  if (typeof w.s === 'string') w.s = share(w.s, seen);
}

const SHARED_MAX = 4096;

function share<T extends string>(v: T, seen: Map<string, string>): T {
  const one = seen.get(v);
  if (one !== undefined) return one as T;
  if (seen.size >= SHARED_MAX) seen.clear();
  seen.set(v, v);
  return v;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

/**
 * The bytes of each report of a batch message exactly as queued, in the order of `decodeBatch`'s
 * `r`, without parsing or re-serialising anything: a dead letter carries its report's own bytes,
 * whatever the report holds (JSON.stringify throws on a tree a few thousand levels deep; this
 * loop keeps no stack). Null when `data` is not a batch this can cut up (not an object with an
 * array `r` written plainly): the caller then keeps the whole message.
 */
export function reportSlices(data: Uint8Array): Uint8Array[] | null {
  let depth = 0;
  let inString = false;
  let stringStart = -1;
  let lastKey: [number, number] | null = null;
  let pendingKey: [number, number] | null = null;
  let slices: Uint8Array[] | null = null;
  /** Inside the top-level `r` array: where the current element starts (-1: none yet). */
  let inR = false;
  let elementStart = -1;
  const close = (end: number) => {
    let e = end;
    while (e > elementStart && isSpace(data[e - 1]!)) e--;
    if (elementStart >= 0 && e > elementStart) slices!.push(data.subarray(elementStart, e));
    elementStart = -1;
  };
  for (let i = 0; i < data.length; i++) {
    const b = data[i]!;
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) {
        inString = false;
        if (depth === 1) pendingKey = [stringStart, i];
      }
      continue;
    }
    if (inR && depth === 2 && elementStart < 0 && !isSpace(b) && b !== 0x2c && b !== 0x5d) elementStart = i;
    if (b === QUOTE) {
      inString = true;
      stringStart = i + 1;
    } else if (b === 0x3a /* : */) {
      if (depth === 1) lastKey = pendingKey;
    } else if (b === 0x7b /* { */ || b === 0x5b /* [ */) {
      depth++;
      if (depth === 2 && b === 0x5b && lastKey && lastKey[1] - lastKey[0] === 1 && data[lastKey[0]] === 0x72 /* r */) {
        // The last `r` wins, as in JSON.parse.
        inR = true;
        slices = [];
        elementStart = -1;
      }
    } else if (b === 0x7d /* } */ || b === 0x5d /* ] */) {
      if (inR && depth === 2) {
        close(i);
        inR = false;
      }
      depth--;
    } else if (b === 0x2c /* , */) {
      if (inR && depth === 2) close(i);
      if (depth === 1) lastKey = null;
    }
  }
  return slices;
}

export function encodeJson(value: unknown): Uint8Array {
  return enc.encode(JSON.stringify(value));
}
