// Dead letters, in one place: the format the workers write (deadLetterOf, called by
// workers/ingest-consumer.ts) and the reading side the `fleet dead-letters` command, the api's
// admin routes and the workers' gauge share (DeadLetters: list, show, replay, counts).
//
// A dead letter is one message in stream `${STREAM_NAME}_DLQ` (file storage, 30 days):
//
//   subject  `${SUBJECT_PREFIX}-dlq.reports.<customer slug>`, or `….reports._none` when no customer
//            is known (a message that is not a batch). Dead letters written before this format sit
//            on `${SUBJECT_PREFIX}-dlq.reports` itself. The customer in the subject lets the server
//            count dead letters per customer (stream info per subject: no scan) and lets a listing
//            by customer skip every other customer's dead letters on the server.
//   data     the report, byte for byte as queued, as a one-report batch (lib/contract/messages.ts
//            encodeBatch); a rejection-log record as its JSON; an undecodable message as it was.
//   headers  HEADERS below: the customer-safe reason, its kind and class, the deliveries, where it
//            came from (subject, stream sequence), the report's id, customer, kind, machine and
//            software, and when it was dead-lettered.
//
// Replay republishes a dead letter's data to the ingest stream (a dead letter's data is already a
// normal report batch; it is checked to decode as one and sent byte for byte), waits for the
// PubAck, then deletes the dead letter. The report keeps its id, so the workers' idempotent writes
// store it once however often it arrives. The republish carries Nats-Msg-Id `replay-<stream>-<seq>`:
// two replays of one dead letter within the ingest stream's duplicate window (2 minutes) are one
// message, and a replay interrupted between the PubAck and the delete can be run again at once.
import { headers as natsHeaders, type JetStreamClient, type JetStreamManager, type MsgHdrs, type NatsConnection, type StoredMsg } from 'nats';
import { decodeBatch, deadLetterStream, ingestPartitions, partitionOf, subjects, toReport, type IngestPartition, type RejectionRecord, type Report } from '../contract/messages.js';
import { isSlug } from '../contract/ids.js';
import { JetStreamApiCodes, jsApiCode } from '../infra/jetstream-errors.js';
import type { DeadLetterDetailT, DeadLetterListT, DeadLetterReportT, DeadLetterT, RenderedBodyT, ReplayAnswerT, ReplayItemT } from '../contract/schemas/dead-letters.js';

/** The headers of a dead letter. */
export const HEADERS = {
  /** The customer-safe reason: server, error class and code, field; never the server's text. */
  error: 'Fleet-Error',
  /** lib/infra/storage-errors.ts's kind: data (older dead letters: unknown). */
  errorKind: 'Fleet-Error-Kind',
  /** The class fleet_worker_dead_letters_total counts it under: data, decode (older dead letters: unknown). */
  failure: 'Fleet-Failure',
  deliveries: 'Fleet-Deliveries',
  /** Where it was queued: the ingest subject and the ingest stream's sequence number. */
  subject: 'Fleet-Subject',
  streamSeq: 'Fleet-Stream-Seq',
  reportId: 'Fleet-Report-Id',
  customerId: 'Fleet-Customer-Id',
  customer: 'Fleet-Customer',
  kind: 'Fleet-Report-Kind',
  machine: 'Fleet-Machine',
  software: 'Fleet-Software',
  /** ISO 8601, by the worker's clock. */
  at: 'Fleet-Dead-Lettered-At',
} as const;

/** The customer token of dead letters with no known customer (never a slug: slugs start with [a-z0-9]). */
export const NO_CUSTOMER = '_none';

/** Limits of the reading side (docs/operations.md, "Dead letters"). */
export const LIMITS = {
  /** Dead letters one list call examines at most; `next_seq` continues. */
  listScan: 10_000,
  /** Dead letters one replay call examines at most to find its selection. */
  replayScan: 100_000,
  listDefault: 100,
  listMax: 1000,
  replayDefault: 1000,
  replayMax: 10_000,
  /** Characters of one rendered body, and its levels of nesting. */
  bodyChars: 64 * 1024,
  bodyDepth: 64,
  /** Reports of one dead letter shown with their bodies, and report ids in a summary. */
  showReports: 20,
  summaryIds: 100,
} as const;

/** A header value: one line, bounded. */
const hv = (v: unknown, max = 200): string => String(v ?? '').replace(/[\r\n]+/g, ' ').slice(0, max);

/** The subject token of a customer slug: the slug, or NO_CUSTOMER for anything that is not one. */
export const customerToken = (slug: string | null | undefined): string => (slug && isSlug(slug) ? slug : NO_CUSTOMER);

export interface DeadLetterInput {
  /** The dead-letter subject of lib/contract/messages.ts (`subjects(prefix).deadLetter`); the customer's token is appended. */
  base: string;
  failure: { kind: string; reason: string };
  /** data or decode (older dead letters: unknown): the label of fleet_worker_dead_letters_total. */
  failureClass: string;
  /**
   * The message the report came in; `index`: the report's place in it, which names a dead letter
   * of a report that has no id of its own (not even an object), so that two such reports of one
   * message are two dead letters, not one taken for a retried publish of the other.
   */
  source: { stream: string; seq: number; subject: string; deliveries: number; index?: number };
  report?: Report;
  rejection?: RejectionRecord;
  now?: number;
}

export interface DeadLetterPublish {
  subject: string;
  headers: MsgHdrs;
  /**
   * Nats-Msg-Id: a retried publish of the same dead-lettering is stored once. It names the ingest
   * message (stream and sequence), so a report replayed and dead-lettered again (a new ingest
   * message) is a new dead letter, never taken for a duplicate of the one the replay removed.
   */
  msgID: string;
}

/** Subject, headers and message id of a dead letter: what the worker publishes. */
export function deadLetterOf(d: DeadLetterInput): DeadLetterPublish {
  const r = d.report;
  const rej = d.rejection;
  const customerId = r?.customerId ?? (rej?.customer_id || undefined);
  const customer = r?.customer ?? (rej?.customer_id ? rej.customer : undefined);
  const id = r?.id ?? rej?.id;
  const h = natsHeaders();
  h.set(HEADERS.error, hv(d.failure.reason, 1000));
  h.set(HEADERS.errorKind, hv(d.failure.kind));
  h.set(HEADERS.failure, hv(d.failureClass));
  h.set(HEADERS.deliveries, String(d.source.deliveries));
  h.set(HEADERS.subject, hv(d.source.subject));
  h.set(HEADERS.streamSeq, String(d.source.seq));
  if (id) h.set(HEADERS.reportId, hv(id));
  if (customerId) h.set(HEADERS.customerId, hv(customerId));
  if (customer) h.set(HEADERS.customer, hv(customer));
  if (r) {
    h.set(HEADERS.kind, hv(r.kind));
    h.set(HEADERS.machine, hv(r.machine));
    h.set(HEADERS.software, hv(r.software));
  }
  h.set(HEADERS.at, new Date(d.now ?? Date.now()).toISOString());
  return {
    subject: `${d.base}.${customerToken(customer)}`,
    headers: h,
    msgID: hv(`dlq-${d.source.stream}-${d.source.seq}${id ? `-${id}` : d.source.index !== undefined ? `-#${d.source.index}` : ''}`),
  };
}

// ---------------------------------------------------------------------------------------------
// Reading: filters, rendering.

export class DeadLetterInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DeadLetterInputError';
  }
}

const DURATION = /^(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)$/i;
const UNIT_MS: Record<string, number> = { s: 1000, sec: 1000, m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** `--since`: an ISO 8601 time, or a duration back from `now` (`90s`, `30m`, `2h`, `7d`, `1w`); ms since the epoch. */
export function parseSince(text: string, now = Date.now()): number {
  const s = text.trim();
  const d = DURATION.exec(s);
  if (d) return now - Number(d[1]) * UNIT_MS[d[2]!.toLowerCase()]!;
  const t = /^\d{4}-\d{2}-\d{2}/.test(s) ? Date.parse(s) : NaN;
  if (!Number.isFinite(t)) throw new DeadLetterInputError(`since: ${JSON.stringify(text.slice(0, 64))} is neither an ISO 8601 time (2026-11-20T08:00:00Z) nor a duration (90s, 30m, 2h, 7d, 1w)`);
  return t;
}

export function checkCustomer(c: string): string {
  if (c !== NO_CUSTOMER && !isSlug(c)) throw new DeadLetterInputError(`customer: ${JSON.stringify(c.slice(0, 64))} is not a customer slug (or ${NO_CUSTOMER})`);
  return c;
}

export interface DeadLetterFilter {
  /** Customer slug, or NO_CUSTOMER. */
  customer?: string;
  /** Dead-lettered at or after this time (ms since the epoch). */
  since?: number;
  /** Text the reason, its kind or its class contains (case-insensitive). */
  reason?: string;
}

/**
 * A parsed value pretty-printed as JSON (two spaces), at most `maxChars` characters and `maxDepth`
 * levels (deeper values are summarised as `[… n items]` / `{… n keys}`). Never throws, never
 * recurses deeper than `maxDepth`: a body nested thousands deep is safe.
 */
export function prettyJson(value: unknown, maxChars: number = LIMITS.bodyChars, maxDepth: number = LIMITS.bodyDepth): { text: string; truncated: boolean } {
  const out: string[] = [];
  let len = 0;
  let full = false;
  let truncated = false;
  const put = (s: string) => {
    if (full) return;
    if (len + s.length > maxChars) {
      out.push(s.slice(0, maxChars - len));
      len = maxChars;
      full = truncated = true;
      return;
    }
    out.push(s);
    len += s.length;
  };
  const scalar = (v: unknown): string => {
    if (typeof v === 'string') return JSON.stringify(v.length > maxChars ? v.slice(0, maxChars) : v);
    if (typeof v === 'number') return Number.isFinite(v) ? String(v) : 'null';
    if (typeof v === 'boolean' || v === null) return String(v);
    return JSON.stringify(String(v));
  };
  const walk = (v: unknown, depth: number, indent: string): void => {
    if (full) return;
    if (v === null || typeof v !== 'object') return put(scalar(v));
    const arr = Array.isArray(v);
    const keys = arr ? null : Object.keys(v as object);
    const n = arr ? (v as unknown[]).length : keys!.length;
    if (n === 0) return put(arr ? '[]' : '{}');
    if (depth >= maxDepth) {
      truncated = true;
      return put(arr ? `[… ${n} items]` : `{… ${n} keys}`);
    }
    put(arr ? '[\n' : '{\n');
    const inner = `${indent}  `;
    for (let i = 0; i < n && !full; i++) {
      put(inner);
      if (arr) walk((v as unknown[])[i], depth + 1, inner);
      else {
        put(`${JSON.stringify(keys![i])}: `);
        walk((v as Record<string, unknown>)[keys![i]!], depth + 1, inner);
      }
      put(i < n - 1 ? ',\n' : '\n');
    }
    put(`${indent}${arr ? ']' : '}'}`);
  };
  try {
    walk(value, 0, '');
  } catch (e) {
    truncated = true;
    out.push(`\n… (not shown: ${(e as Error)?.message ?? 'error'})`);
  }
  return { text: out.join('') + (full ? '\n… (truncated)' : ''), truncated };
}

/** A hex dump (offset, 16 bytes, their printable characters), at most `maxChars` characters. */
function hexDump(data: Uint8Array, maxChars: number): { text: string; truncated: boolean } {
  const lines: string[] = [];
  let len = 0;
  for (let off = 0; off < data.length; off += 16) {
    const row = data.subarray(off, off + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    const line = `${off.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  |${ascii}|`;
    if (len + line.length + 1 > maxChars) return { text: `${lines.join('\n')}\n… (truncated)`, truncated: true };
    lines.push(line);
    len += line.length + 1;
  }
  return { text: lines.join('\n'), truncated: false };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Any bytes, rendered for a person: JSON pretty-printed, other text as it is, anything else as hex. Never throws. */
export function renderBytes(data: Uint8Array, maxChars: number = LIMITS.bodyChars): RenderedBodyT {
  try {
    let text: string;
    try {
      text = utf8.decode(data);
    } catch {
      return { format: 'hex', bytes: data.length, ...hexDump(data, maxChars) };
    }
    try {
      return { format: 'json', bytes: data.length, ...prettyJson(JSON.parse(text), maxChars) };
    } catch {
      const truncated = text.length > maxChars;
      return { format: 'text', bytes: data.length, text: truncated ? `${text.slice(0, maxChars)}\n… (truncated)` : text, truncated };
    }
  } catch (e) {
    return { format: 'text', bytes: data.length, text: `(not shown: ${(e as Error)?.message ?? 'error'})`, truncated: true };
  }
}

/** A parsed value (a report's body) rendered like renderBytes' JSON. */
function renderValue(v: unknown): RenderedBodyT {
  let bytes = 0;
  try {
    bytes = Buffer.byteLength(JSON.stringify(v) ?? '');
  } catch {
    bytes = -1; // too deep to serialise again; the rendering below copes
  }
  return { format: 'json', bytes, ...prettyJson(v) };
}

// ---------------------------------------------------------------------------------------------
// One stored dead letter, understood.

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const int = (v: string | null): number | null => (v !== null && /^\d{1,15}$/.test(v) ? Number(v) : null);

/** The single value all reports share, or null. */
function shared(reports: Report[], f: (r: Report) => unknown): string | null {
  const vs = new Set(reports.map((r) => str(f(r))));
  return vs.size === 1 ? [...vs][0]! : null;
}

/** A report batch whose entries look like reports, or null. */
function asReports(data: Uint8Array): Report[] | null {
  try {
    const b = decodeBatch(data);
    if (!b.r.every((r) => r !== null && typeof r === 'object' && !Array.isArray(r))) return null;
    const reports = b.r.map(toReport);
    return reports.every((r) => typeof r.id === 'string' && typeof r.kind === 'string' && typeof r.customerId === 'string') ? reports : null;
  } catch {
    return null;
  }
}

/** A rejection-log record (what the workers dead-letter from the rejections subject), or null. */
function asRejection(data: Uint8Array): RejectionRecord | null {
  try {
    const v = JSON.parse(utf8.decode(data)) as RejectionRecord;
    return v && typeof v === 'object' && !Array.isArray(v) && typeof v.id === 'string' && typeof v.status === 'number' && typeof v.path === 'string' ? v : null;
  } catch {
    return null;
  }
}

export interface Parsed {
  sm: StoredMsg;
  data: Uint8Array;
  summary: DeadLetterT;
  reports: Report[] | null;
  rejection: RejectionRecord | null;
}

/** A stored dead letter understood: its summary from the headers, or (older ones) from its content. */
export function parse(sm: StoredMsg): Parsed {
  const data = sm.data;
  const h = sm.header;
  const hs = (k: string): string | null => (h.has(k) ? h.get(k) : null);
  const reports = asReports(data);
  const rejection = reports ? null : asRejection(data);
  const customer = hs(HEADERS.customer) ?? (reports ? shared(reports, (r) => r.customer) : rejection?.customer_id ? rejection.customer : null);
  const summary: DeadLetterT = {
    seq: sm.seq,
    dead_lettered_at: sm.time.toISOString(),
    customer,
    customer_id: hs(HEADERS.customerId) ?? (reports ? shared(reports, (r) => r.customerId) : rejection?.customer_id || null),
    kind: hs(HEADERS.kind) ?? (reports ? shared(reports, (r) => r.kind) : null),
    machine: hs(HEADERS.machine) ?? (reports ? shared(reports, (r) => r.machine) : null),
    software: hs(HEADERS.software) ?? (reports ? shared(reports, (r) => r.software) : null),
    reports: reports?.length ?? 0,
    report_ids: reports ? reports.slice(0, LIMITS.summaryIds).map((r) => r.id) : rejection ? [rejection.id] : [],
    failure: hs(HEADERS.failure),
    error_kind: hs(HEADERS.errorKind),
    error: hs(HEADERS.error),
    deliveries: int(hs(HEADERS.deliveries)),
    subject: hs(HEADERS.subject),
    stream_seq: int(hs(HEADERS.streamSeq)),
    content: reports ? 'reports' : rejection ? 'rejection' : 'undecodable',
    size: data.length,
  };
  return { sm, data, summary, reports, rejection };
}

function matches(p: Parsed, f: DeadLetterFilter, base: string): boolean {
  const s = p.summary;
  if (f.since !== undefined && p.sm.time.getTime() < f.since) return false;
  // A dead letter on the customer's own subject is the customer's; on the bare subject (no customer
  // known, or written before customers were put in the subject) the content says.
  if (f.customer !== undefined && p.sm.subject === base && customerToken(s.customer) !== f.customer) return false;
  if (f.reason !== undefined) {
    const hay = `${s.error ?? ''}\n${s.error_kind ?? ''}\n${s.failure ?? ''}`.toLowerCase();
    if (!hay.includes(f.reason.toLowerCase())) return false;
  }
  return true;
}

const isMissing = (e: unknown) => jsApiCode(e) === JetStreamApiCodes.NoMessageFound || (e as { code?: string })?.code === '404';

// ---------------------------------------------------------------------------------------------
// The dead-letter stream of one deployment (STREAM_NAME, SUBJECT_PREFIX).

export interface DeadLetterNames {
  streamName: string;
  subjectPrefix: string;
  /** Ingest partitions (STREAM_PARTITIONS): a replayed report goes to its machine's; 1 when not given. */
  streamPartitions?: number;
}

export interface ReplaySelection extends DeadLetterFilter {
  seqs?: number[];
  /** Required when neither seqs nor a filter is given: every dead letter. */
  all?: boolean;
  /** With a filter or all: only dead letters after this sequence number. */
  afterSeq?: number;
}

export class DeadLetters {
  readonly stream: string;
  /** The bare dead-letter subject; customers' dead letters are on `<base>.<customer>`. */
  readonly base: string;
  private readonly subj: ReturnType<typeof subjects>;
  private readonly partitions: IngestPartition[];
  private readonly js: JetStreamClient;
  private jsmP: Promise<JetStreamManager> | null = null;

  constructor(
    private readonly nc: NatsConnection,
    names: DeadLetterNames,
  ) {
    this.stream = deadLetterStream(names.streamName);
    this.subj = subjects(names.subjectPrefix);
    this.partitions = ingestPartitions(names.streamName, names.subjectPrefix, names.streamPartitions ?? 1);
    this.base = this.subj.deadLetter;
    this.js = nc.jetstream();
  }

  private async jsm(): Promise<JetStreamManager> {
    this.jsmP ??= this.nc.jetstreamManager().catch((e) => {
      this.jsmP = null;
      throw e;
    });
    return this.jsmP;
  }

  /** The stored message `seq`, or the next one at or after it on `subject` (wildcards allowed); null: none. */
  private async get(seq: number, subject?: string): Promise<StoredMsg | null> {
    const jsm = await this.jsm();
    try {
      const q = subject ? { seq, next_by_subj: subject } : { seq };
      return await jsm.streams.getMessage(this.stream, q as { seq: number });
    } catch (e) {
      if (isMissing(e)) return null;
      throw e;
    }
  }

  /**
   * The first sequence number dead-lettered at or after `since`: a binary search over the stream
   * (stored in time order), a few dozen requests however large it is.
   */
  private async firstSeqAt(since: number): Promise<number> {
    const info = await (await this.jsm()).streams.info(this.stream);
    let lo = info.state.first_seq;
    let hi = info.state.last_seq + 1;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const m = await this.get(mid, '>');
      if (!m) hi = mid;
      else if (m.time.getTime() < since) lo = m.seq + 1;
      else hi = mid;
    }
    return lo;
  }

  /**
   * Dead letters matching `f` after `afterSeq`, oldest first: up to `limit`, examining at most
   * `maxScan`. A customer filter reads only that customer's subject (and the bare one) on the
   * server; the reason filter is applied here.
   */
  private async scan(f: DeadLetterFilter, afterSeq: number, limit: number, maxScan: number): Promise<{ items: Parsed[]; next: number | null; scanned: number }> {
    let start = Math.max(1, afterSeq + 1);
    if (f.since !== undefined) start = Math.max(start, await this.firstSeqAt(f.since));
    const subjectsToRead = f.customer === undefined ? ['>'] : [`${this.base}.${f.customer}`, this.base];
    const cursors = await Promise.all(subjectsToRead.map(async (subject) => ({ subject, m: await this.get(start, subject) })));
    const items: Parsed[] = [];
    let scanned = 0;
    for (;;) {
      let c = null;
      for (const x of cursors) if (x.m && (!c || x.m.seq < c.m!.seq)) c = x;
      if (!c) return { items, next: null, scanned };
      const m = c.m!;
      scanned++;
      const p = parse(m);
      if (matches(p, f, this.base)) items.push(p);
      if (items.length >= limit || scanned >= maxScan) return { items, next: m.seq, scanned };
      c.m = await this.get(m.seq + 1, c.subject);
    }
  }

  async list(f: DeadLetterFilter & { afterSeq?: number; limit?: number; maxScan?: number }): Promise<DeadLetterListT> {
    const limit = Math.min(Math.max(1, f.limit ?? LIMITS.listDefault), LIMITS.listMax);
    const r = await this.scan(f, f.afterSeq ?? 0, limit, f.maxScan ?? LIMITS.listScan);
    return { items: r.items.map((p) => p.summary), next_seq: r.next, scanned: r.scanned };
  }

  async show(seq: number): Promise<DeadLetterDetailT | null> {
    const sm = await this.get(seq);
    if (!sm) return null;
    const p = parse(sm);
    const headers: Record<string, string> = {};
    for (const k of sm.header.keys()) headers[k] = sm.header.get(k);
    const reports: DeadLetterReportT[] = (p.reports ?? []).slice(0, LIMITS.showReports).map((r) => ({
      id: str(r.id),
      kind: str(r.kind),
      customer: str(r.customer),
      customer_id: str(r.customerId),
      machine: str(r.machine),
      software: str(r.software),
      received_at: typeof r.receivedAt === 'number' && Number.isFinite(r.receivedAt) && Math.abs(r.receivedAt) < 8.64e15 ? new Date(r.receivedAt).toISOString() : null,
      idempotency_key: str(r.idempotencyKey),
      body: renderValue(r.body),
    }));
    return { dead_letter: p.summary, headers, reports, raw: p.reports ? null : renderBytes(p.data) };
  }

  /**
   * Replays the selected dead letters: each report batch (or rejection record) is republished to
   * the ingest stream, its PubAck awaited, then the dead letter is deleted. Undecodable ones are
   * skipped and kept. One at a time, in order.
   */
  async replay(sel: ReplaySelection, opts: { dryRun?: boolean; limit?: number } = {}): Promise<ReplayAnswerT> {
    const filter: DeadLetterFilter = { customer: sel.customer, since: sel.since, reason: sel.reason };
    const filtered = sel.customer !== undefined || sel.since !== undefined || sel.reason !== undefined;
    if (!sel.seqs?.length && !filtered && !sel.all) throw new DeadLetterInputError('say which dead letters: sequence numbers, a filter (customer, since, reason), or all');
    const limit = Math.min(Math.max(1, opts.limit ?? LIMITS.replayDefault), LIMITS.replayMax);
    const dryRun = opts.dryRun === true;
    const items: ReplayItemT[] = [];
    let next: number | null = null;
    const todo: (Parsed | number)[] = [];
    if (sel.seqs?.length) {
      const seqs = [...new Set(sel.seqs)].sort((a, b) => a - b);
      for (const seq of seqs.slice(0, limit)) {
        const sm = await this.get(seq);
        if (!sm) todo.push(seq);
        else {
          const p = parse(sm);
          if (matches(p, filter, this.base) && (filter.customer === undefined || customerToken(p.summary.customer) === filter.customer)) todo.push(p);
        }
      }
      if (seqs.length > limit) next = seqs[limit - 1]!;
    } else {
      const r = await this.scan(filter, sel.afterSeq ?? 0, limit, LIMITS.replayScan);
      todo.push(...r.items);
      next = r.next;
    }
    for (const x of todo) items.push(typeof x === 'number' ? gone(x) : await this.replayOne(x, dryRun));
    const count = (r: ReplayItemT['result']) => items.filter((i) => i.result === r).length;
    return {
      dry_run: dryRun,
      items,
      summary: {
        selected: items.length,
        replayed: count('replayed'),
        would_replay: count('would-replay'),
        skipped: count('skipped') + count('would-skip'),
        failed: count('failed'),
        gone: count('gone'),
      },
      next_seq: next,
    };
  }

  private async replayOne(p: Parsed, dryRun: boolean): Promise<ReplayItemT> {
    const s = p.summary;
    const item = (result: ReplayItemT['result'], detail: string): ReplayItemT => ({ seq: s.seq, report_ids: s.report_ids, customer: s.customer, kind: s.kind, result, detail });
    // Back into the ingest partition of its machine (of its source, for a rejection record).
    const n = this.partitions.length;
    const r0 = p.reports?.[0];
    const target = r0
      ? this.partitions[partitionOf(r0.customerId, r0.machine, n)]!.subjects.reports
      : p.reports
        ? this.partitions[0]!.subjects.reports
        : p.rejection
          ? this.partitions[partitionOf(String(p.rejection.customer_id ?? ''), String(p.rejection.remote ?? ''), n)]!.subjects.rejections
          : null;
    if (!target) return item(dryRun ? 'would-skip' : 'skipped', 'undecodable: neither a report batch nor a rejection record; kept in the dead-letter stream');
    if (dryRun) return item('would-replay', `would republish ${p.reports ? `${p.reports.length} report${p.reports.length === 1 ? '' : 's'}` : 'a rejection record'} to ${target}`);
    let duplicate = false;
    try {
      const ack = await this.js.publish(target, p.data, { msgID: `replay-${this.stream}-${s.seq}` });
      duplicate = ack.duplicate;
    } catch (e) {
      return item('failed', `not republished (${(e as Error)?.message ?? e}); the dead letter stays`);
    }
    const done = duplicate ? 'republished already (a replay of it within the last 2 minutes)' : `republished to ${target}`;
    try {
      await (await this.jsm()).streams.deleteMessage(this.stream, s.seq, false);
    } catch (e) {
      if (jsApiCode(e) === JetStreamApiCodes.SequenceNotFound) return item('replayed', `${done}; removed by another replay meanwhile`);
      return item('replayed', `${done}, but not removed from the dead-letter stream (${(e as Error)?.message ?? e}); a second replay stores it once all the same`);
    }
    return item('replayed', `${done}; removed from the dead-letter stream`);
  }

  /**
   * Dead letters per customer token (slug, or NO_CUSTOMER: the bare subject counts there), from the
   * stream's per-subject counts: one request, whatever the stream holds.
   */
  /** Removes every dead letter of a customer (offboarding: its subject carries the slug); how many went. */
  async purgeCustomer(slug: string): Promise<number> {
    const token = customerToken(slug);
    if (token === NO_CUSTOMER) return 0;
    try {
      return (await (await this.jsm()).streams.purge(this.stream, { filter: `${this.base}.${token}` })).purged;
    } catch (e) {
      if (jsApiCode(e) === JetStreamApiCodes.StreamNotFound) return 0;
      throw e;
    }
  }

  async countByCustomer(): Promise<Map<string, number>> {
    const info = await (await this.jsm()).streams.info(this.stream, { subjects_filter: '>' });
    const out = new Map<string, number>();
    const prefix = `${this.base}.`;
    for (const [subject, n] of Object.entries(info.state.subjects ?? {})) {
      const token = subject.startsWith(prefix) ? subject.slice(prefix.length) : NO_CUSTOMER;
      out.set(token, (out.get(token) ?? 0) + n);
    }
    return out;
  }
}

const gone = (seq: number): ReplayItemT => ({
  seq,
  report_ids: [],
  customer: null,
  kind: null,
  result: 'gone',
  detail: 'no such dead letter: replayed already, expired (30 days) or never there',
});
