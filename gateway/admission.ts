// The gateway's ingest decisions, apart from the transport: what each kind of report is allowed
// and needs, and which refusal a request earns at each step. Pure functions over what
// gateway/request.ts copied out of the request, so they are tested without uWS
// (test/admission-units.test.ts); gateway/server.ts runs them in order and does the I/O.
import { isUtf8 } from 'node:buffer';
import { HttpError, badRequest, forbidden, unprocessable } from '../lib/errors.js';
import { isSlug, isUuid } from '../lib/ids.js';
import { SNAPSHOT_MAX_BYTES } from '../lib/schemas/ingest.js';
import type { ReportChecker, CheckedKind } from '../lib/report-check.js';
import type { RequestHead } from './request.js';
import type { TokenInfo } from './token-cache.js';
import type { IngestPath } from './types.js';

/** The kinds that arrive as a JSON body on the ingest path. */
export type JsonKind = 'heartbeat' | 'diagnostics' | 'status' | 'help' | 'metrics' | 'artifact-init' | 'command_ack';

export interface KindPolicy {
  /** Its schema in lib/report-check.ts; null: the route brings its own validator. */
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

export function pathRefusal(path: IngestPath): HttpError | null {
  const bad = !isSlug(path.customer) ? 'customer' : !isSlug(path.machine) ? 'machine' : !isSlug(path.software) ? 'software' : null;
  if (bad === null) return null;
  return badRequest(`invalid ${bad} slug ${JSON.stringify(path[bad].slice(0, 80))}: must match ^[a-z0-9][a-z0-9-]*$ (1 to 64 characters)`);
}

export function parseBearer(h: string): string | null {
  if (h.length < 8 || h.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  const t = h.slice(7).trim();
  return t.length > 0 && t.length <= 512 ? t : null;
}

export const missingBearer = () => forbidden('missing bearer token: send Authorization: Bearer <API token>');

export function authorise(t: TokenInfo, customer: string): HttpError | null {
  if (t.revoked) return forbidden('token revoked');
  if (!t.scopes.includes('ingest')) return forbidden('token lacks the ingest scope');
  if (t.customer !== customer) return forbidden(`token not authorised for customer ${customer}`);
  return null;
}

export function isJson(ct: string): boolean {
  if (ct === 'application/json') return true;
  const semi = ct.indexOf(';');
  return (semi === -1 ? ct : ct.slice(0, semi)).trim().toLowerCase() === 'application/json';
}

/** Before the body: the command id of an ack, Content-Type, Idempotency-Key, the announced size. */
export function headRefusal(kind: JsonKind, head: RequestHead, commandId: string, bodyLimit: number): HttpError | null {
  if (KINDS[kind].namesCommand && !isUuid(commandId)) return badRequest(`invalid command id ${JSON.stringify(commandId.slice(0, 80))}: must be a UUID`);
  if (!isJson(head.contentType)) return new HttpError(415, `Content-Type must be application/json, got ${JSON.stringify(head.contentType.slice(0, 100))}`);
  if (head.idempotencyKey.length > 256) return badRequest('Idempotency-Key longer than 256 characters');
  if (head.contentLength !== '' && Number(head.contentLength) > bodyLimit) {
    return new HttpError(413, `body of ${head.contentLength} bytes is over the limit of ${bodyLimit} bytes`);
  }
  return null;
}

/** The body as a JSON object (an empty body counts as `{}`), or why not. */
export function parseJsonObject(raw: Buffer): Record<string, unknown> | HttpError {
  if (raw.length === 0) return {};
  // JSON is UTF-8 (RFC 8259); decoding would turn bad bytes into U+FFFD and store that.
  if (!isUtf8(raw)) return badRequest('the body is not valid UTF-8');
  let data: unknown;
  try {
    data = JSON.parse(raw.toString('utf8'));
  } catch (e) {
    return badRequest(`malformed JSON: ${(e as Error).message}`);
  }
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    return unprocessable('the body must be a JSON object', [{ path: '/', message: 'must be object' }]);
  }
  return data as Record<string, unknown>;
}

/** Beyond the schema: the snapshot's own size limit (413), free trees and typed leaves (lib/report-check.ts). */
export function deepRefusal(kind: JsonKind, data: Record<string, unknown>, rawSize: number, checker: ReportChecker): HttpError | null {
  if (kind === 'status' && data.snapshot !== undefined && rawSize > SNAPSHOT_MAX_BYTES && Buffer.byteLength(JSON.stringify(data.snapshot)) > SNAPSHOT_MAX_BYTES) {
    return new HttpError(413, `snapshot larger than ${SNAPSHOT_MAX_BYTES} bytes`);
  }
  const schema = KINDS[kind].schema;
  if (schema === null) return null;
  const refused = checker.deep(schema, data);
  return refused ? unprocessable(refused.detail, refused.errors) : null;
}
