// The gateway's ingest decisions, apart from the transport: what each kind of report is allowed
// and needs, and which refusal a request earns at each step. Pure functions over what
// gateway/http/request.ts copied out of the request, so they are tested without uWS
// (test/unit/admission.test.ts); gateway/ingest.ts runs them in order; gateway/http/ does the I/O.
import { isUtf8 } from 'node:buffer';
import { HttpError, badRequest, forbidden, unprocessable } from '../lib/contract/errors.js';
import { isSlug, isUuid } from '../lib/contract/ids.js';
import { SNAPSHOT_MAX_BYTES, BatchKinds, type BatchKind } from '../lib/contract/schemas/ingest.js';
import type { ReportChecker, CheckedKind } from '../lib/domain/report-check.js';
import type { Validator } from '../lib/contract/validation.js';
import type { RequestHead } from './types.js';
import type { TokenInfo } from './token-cache.js';
import type { IngestPath } from './types.js';
import { scanJson, isOverLimit, type JsonLimits, type JsonOverLimit } from './json-scan.js';

import type { JsonKind } from './types.js';
export type { JsonKind };

export interface KindPolicy {
  /** Its schema in lib/domain/report-check.ts; null: the route brings its own validator. */
  schema: CheckedKind | null;
  /** It can create a machine, so the licence's device limit applies. */
  createsMachines: boolean;
  /** Pending agent commands go out in its answer (and are recorded as delivered). */
  offersCommands: boolean;
  /** The path ends in a command id that must name one of the instance's commands. */
  namesCommand: boolean;
}

export const KINDS: Record<JsonKind, KindPolicy> = {
  heartbeat: { schema: 'heartbeat', createsMachines: true, offersCommands: true, namesCommand: false },
  diagnostics: { schema: 'diagnostics', createsMachines: true, offersCommands: false, namesCommand: false },
  status: { schema: 'status', createsMachines: true, offersCommands: true, namesCommand: false },
  // Help texts describe a software, not an instance: no machine is made.
  help: { schema: 'help', createsMachines: false, offersCommands: false, namesCommand: false },
  metrics: { schema: null, createsMachines: true, offersCommands: false, namesCommand: false },
  'artifact-init': { schema: null, createsMachines: true, offersCommands: false, namesCommand: false },
  command_ack: { schema: 'command_ack', createsMachines: false, offersCommands: false, namesCommand: true },
};

/** The slugs of a path (a batch's path has only the customer; its entries name machine and software). */
export function pathRefusal(path: Pick<IngestPath, 'customer'> & Partial<IngestPath>): HttpError | null {
  const bad = !isSlug(path.customer) ? 'customer' : path.machine !== undefined && !isSlug(path.machine) ? 'machine' : path.software !== undefined && !isSlug(path.software) ? 'software' : null;
  if (bad === null) return null;
  return badRequest(`invalid ${bad} slug ${JSON.stringify(path[bad]!.slice(0, 80))}: must match ^[a-z0-9][a-z0-9-]*$ (1 to 64 characters)`);
}

export function parseBearer(h: string): string | null {
  if (h.length < 8 || h.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  const t = h.slice(7).trim();
  return t.length > 0 && t.length <= 512 ? t : null;
}

export const missingBearer = () => forbidden('missing bearer token: send Authorization: Bearer <API token>');

/**
 * The token may post for `customer` (and, when the path names one, as `machine`) at `now`: not
 * revoked, not expired, the ingest scope, its own customer, and its machine binding (a batch checks
 * each entry's machine with machineRefusal).
 */
export function authorise(t: TokenInfo, customer: string, machine?: string, now = Date.now()): HttpError | null {
  if (t.revoked) return forbidden('token revoked');
  if (now >= t.expiresMs) return forbidden(`token expired at ${new Date(t.expiresMs).toISOString()}`);
  if (!t.scopes.includes('ingest')) return forbidden('token lacks the ingest scope');
  if (t.customer !== customer) return forbidden(`token not authorised for customer ${customer}`);
  return machine === undefined ? null : machineRefusal(t, machine);
}

/** A machine-bound token (TokenInfo.machine) posting as another machine: 403 naming the binding. */
export function machineRefusal(t: TokenInfo, machine: string): HttpError | null {
  if (t.machineOk === null || t.machineOk(machine)) return null;
  const what = /[*?]/.test(t.machine!) ? 'machines' : 'machine';
  return forbidden(`token bound to ${what} ${t.machine}: it cannot post as ${machine}`);
}

export function isJson(ct: string): boolean {
  if (ct === 'application/json') return true;
  const semi = ct.indexOf(';');
  return (semi === -1 ? ct : ct.slice(0, semi)).trim().toLowerCase() === 'application/json';
}

/** Before the body: the command id of an ack, Content-Type, Idempotency-Key, the announced size. */
export function headRefusal(kind: JsonKind, head: RequestHead, commandId: string, bodyLimit: number): HttpError | null {
  if (KINDS[kind].namesCommand && !isUuid(commandId)) return badRequest(`invalid command id ${JSON.stringify(commandId.slice(0, 80))}: must be a UUID`);
  return contentTypeRefusal(head) ?? idempotencyKeyRefusal(head.idempotencyKey) ?? sizeRefusal(head.contentLength, bodyLimit);
}

function contentTypeRefusal(head: RequestHead): HttpError | null {
  return isJson(head.contentType) ? null : new HttpError(415, `Content-Type must be application/json, got ${JSON.stringify(head.contentType.slice(0, 100))}`);
}

/** The Idempotency-Key header of a single route, and the `idempotency_key` of a batch entry. */
export function idempotencyKeyRefusal(key: string, name = 'Idempotency-Key'): HttpError | null {
  return key.length > 256 ? badRequest(`${name} longer than 256 characters`) : null;
}

/** A body of `size` bytes (announced by Content-Length, or a batch entry's) over the limit: 413. */
export function sizeRefusal(size: string | number, bodyLimit: number): HttpError | null {
  if (size === '' || !(Number(size) > bodyLimit)) return null;
  return new HttpError(413, `body of ${size} bytes is over the limit of ${bodyLimit} bytes`);
}

/** A parsed body, and the byte spans of the values at the span path it was parsed with (gateway/json-scan.ts). */
export interface ParsedBody {
  data: Record<string, unknown>;
  spans: Map<number, [number, number]>;
  /** Each span's value count and depth (JsonScan.shapes). */
  shapes: Map<number, [number, number]>;
}

const NO_SPANS = new Map<number, [number, number]>();
const NO_SHAPES = new Map<number, [number, number]>();

/**
 * The body as a JSON object (an empty body counts as `{}`), or why not: not UTF-8 or not JSON
 * (400), over the depth or value-count limit (422, with the JSON pointer, before anything walks
 * it), not an object (422). `spanPath`: whose byte spans to return (the batch's entry bodies, the
 * metrics records), so that what is queued is the bytes the client sent.
 */
export function parseJsonObject(raw: Buffer, limits: JsonLimits, spanPath: readonly string[] = []): ParsedBody | HttpError {
  if (raw.length === 0) return { data: {}, spans: NO_SPANS, shapes: NO_SHAPES };
  // JSON is UTF-8 (RFC 8259); decoding would turn bad bytes into U+FFFD and store that.
  if (!isUtf8(raw)) return badRequest('the body is not valid UTF-8');
  let data: unknown;
  try {
    data = JSON.parse(raw.toString('utf8'));
  } catch (e) {
    return badRequest(`malformed JSON: ${(e as Error).message}`);
  }
  const scan = scanJson(raw, limits, spanPath);
  if (isOverLimit(scan)) return jsonLimitRefusal(scan);
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    return unprocessable('the body must be a JSON object', [{ path: '/', message: 'must be object' }]);
  }
  return { data: data as Record<string, unknown>, spans: scan.spans, shapes: scan.shapes };
}

/** The 422 of a body over JSON_MAX_DEPTH or JSON_MAX_NODES. */
export function jsonLimitRefusal(o: JsonOverLimit): HttpError {
  return unprocessable(o.detail, [{ path: o.path, message: o.limit === 'depth' ? 'nested too deep' : 'too many values' }]);
}

/**
 * A batch entry's raw body, held to the limits of a single request's body (the same refusal, with
 * the same path). `shape`: its value count and depth from the scan of the whole request; within
 * the limits, its bytes need no second scan (only a body over them is scanned again, for the path).
 */
export function entryJsonRefusal(raw: Buffer, limits: JsonLimits, shape?: [number, number]): HttpError | null {
  if (raw.length === 0) return null;
  if (shape && shape[0] <= limits.maxNodes && shape[1] <= limits.maxDepth) return null;
  const scan = scanJson(raw, limits);
  return isOverLimit(scan) ? jsonLimitRefusal(scan) : null;
}

/**
 * The limits of a whole batch request, a safety net under the limits of each entry's body (which
 * refuse an entry alone, as its single request would be): twice the depth (the envelope adds 3
 * levels), and the values of as many bodies as its size allows.
 */
export function batchJsonLimits(limits: JsonLimits, batchBodyLimit: number, bodyLimit: number): JsonLimits {
  return { maxDepth: limits.maxDepth * 2, maxNodes: Math.ceil((limits.maxNodes * batchBodyLimit) / bodyLimit) };
}

/** Beyond the schema: the snapshot's own size limit (413), free trees and typed leaves (lib/domain/report-check.ts). */
export function deepRefusal(kind: JsonKind, data: Record<string, unknown>, rawSize: number, checker: ReportChecker): HttpError | null {
  if (kind === 'status' && data.snapshot !== undefined && rawSize > SNAPSHOT_MAX_BYTES && Buffer.byteLength(JSON.stringify(data.snapshot)) > SNAPSHOT_MAX_BYTES) {
    return new HttpError(413, `snapshot larger than ${SNAPSHOT_MAX_BYTES} bytes`);
  }
  const schema = KINDS[kind].schema;
  if (schema === null) return null;
  const refused = checker.deep(schema, data);
  return refused ? unprocessable(refused.detail, refused.errors) : null;
}

/** The schema check of a parsed body (422 with the failing paths). */
export function schemaRefusal(validate: Validator<unknown>, data: unknown): HttpError | null {
  if (validate(data)) return null;
  const errors = validate.errorsOf(data);
  return unprocessable(`schema violation: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
}

// ---- Batch ingest (gateway/batch.ts): the request, then each entry as the single route would see it ----

/** Before a batch's body: Content-Type, no Idempotency-Key header (each entry has its own), the announced size. */
export function batchHeadRefusal(head: RequestHead, batchLimit: number): HttpError | null {
  const header = head.idempotencyKey === '' ? null : badRequest('a batch takes no Idempotency-Key header: give each entry its own idempotency_key');
  return contentTypeRefusal(head) ?? header ?? sizeRefusal(head.contentLength, batchLimit);
}

/** One batch entry, as far as it is checked before the rate: its kind and the path it stands for. */
export interface EntryHead {
  kind: BatchKind;
  path: IngestPath;
}

const entryError = (detail: string, path: string, message: string) => unprocessable(detail, [{ path, message }]);

/**
 * What a batch entry is before its body is looked at, or its refusal: an object (422) of a known
 * kind (422), naming no other customer (403), with machine and software slugs as the path of the
 * single route would have them (400, the same detail). Nothing here costs a rate token, as
 * nothing before the token check does on the single route.
 */
export function entryHeadRefusal(entry: unknown, customer: string): HttpError | EntryHead {
  if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) return entryError('the entry must be a JSON object', '/', 'must be object');
  const e = entry as Record<string, unknown>;
  if (typeof e.kind !== 'string' || !(BatchKinds as readonly string[]).includes(e.kind)) {
    return entryError(`kind must be one of ${BatchKinds.join(', ')}`, '/kind', `must be one of ${BatchKinds.join(', ')}`);
  }
  // The customer is the path's (and the token's); an entry cannot move a report to another.
  if (e.customer !== undefined && e.customer !== customer) return forbidden(`an entry cannot name another customer: every entry of this batch is filed under ${customer}`);
  const path = { customer, machine: typeof e.machine === 'string' ? e.machine : '', software: typeof e.software === 'string' ? e.software : '' };
  return pathRefusal(path) ?? { kind: e.kind as BatchKind, path };
}

/** An entry's Idempotency-Key and body (absent: `{}`, as an empty body is), or the refusal the single route gives. */
export function entryBodyRefusal(entry: Record<string, unknown>): HttpError | { idemKey: string; body: Record<string, unknown> } {
  const key = entry.idempotency_key ?? '';
  if (typeof key !== 'string') return entryError('idempotency_key must be a string', '/idempotency_key', 'must be string');
  const long = idempotencyKeyRefusal(key, 'idempotency_key');
  if (long) return long;
  const body = entry.body === undefined ? {} : entry.body;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return entryError('the body must be a JSON object', '/', 'must be object');
  return { idemKey: key, body: body as Record<string, unknown> };
}
