// What a failed write means, decided in one place for every server the workers write to:
//
//   unavailable  the server or the connection, not the data (down, restarting, overloaded, timed
//                out): retry for as long as it takes; never dead-letter for this.
//   data         the server refused this data (out of range, cannot parse, constraint): the report
//                that carries it is dead-lettered alone, at once.
//   unknown      anything else (a bug, a schema the code does not expect): retried a few times
//                (WORKER_MAX_DELIVER), then dead-lettered alone.
//
// `reason` is safe to show the customer whose report failed: the server, the error class and its
// code, never the server's message (ClickHouse quotes neighbouring rows of the batch, Postgres
// quotes values and names: other customers' data). The full error goes to the service log only.
import { ClickHouseError } from '@clickhouse/client';
import { DecodeError } from './messages.js';

export type FailureKind = 'unavailable' | 'data' | 'unknown';

export interface Failure {
  kind: FailureKind;
  /** Customer-safe: server, class and code; never the server's text. */
  reason: string;
}

/** A dependency is not there (thrown by adapters that detect it themselves, e.g. a closed pool). */
export class DependencyUnavailableError extends Error {
  constructor(
    readonly dependency: string,
    message: string,
    cause?: unknown,
  ) {
    super(message, { cause });
    this.name = 'DependencyUnavailableError';
  }
}

/** Postgres SQLSTATE classes (https://www.postgresql.org/docs/current/errcodes-appendix.html). */
const PG_UNAVAILABLE_CLASSES = ['08', '53', '57', '58'];
// Serialization failure, deadlock, lock not available.
const PG_UNAVAILABLE_CODES = new Set(['40001', '40P01', '55P03']);
// A unique violation: every write here is an upsert, so it means a concurrent writer got there
// first (two workers creating the same row): not the data's fault, and the retry succeeds.
const PG_RACE_CODES = new Set(['23505']);
const PG_DATA_CLASSES = ['22', '23', '54'];
const PG_NAMES: Record<string, string> = {
  '22001': 'string_data_right_truncation',
  '22003': 'numeric_value_out_of_range',
  '22007': 'invalid_datetime_format',
  '22008': 'datetime_field_overflow',
  '22021': 'character_not_in_repertoire',
  '22P02': 'invalid_text_representation',
  '22P05': 'untranslatable_character',
  '23502': 'not_null_violation',
  '23503': 'foreign_key_violation',
  '23505': 'unique_violation',
  '23514': 'check_violation',
  '54000': 'program_limit_exceeded',
};

// ClickHouse server codes that say "not now" rather than "not this": memory limit, too many parts,
// too many simultaneous queries, timeouts, network, table read-only (replica), keeper.
const CH_UNAVAILABLE = new Set(['159', '160', '202', '209', '210', '241', '242', '252', '425', '999']);
const CH_DATA: Record<string, string> = {
  '6': 'CANNOT_PARSE_TEXT',
  '26': 'CANNOT_PARSE_QUOTED_STRING',
  '27': 'CANNOT_PARSE_INPUT_ASSERTION_FAILED',
  '32': 'ATTEMPT_TO_READ_AFTER_EOF',
  '38': 'CANNOT_PARSE_DATE',
  '41': 'CANNOT_PARSE_DATETIME',
  '53': 'TYPE_MISMATCH',
  '69': 'ARGUMENT_OUT_OF_BOUND',
  '70': 'CANNOT_CONVERT_TYPE',
  '72': 'CANNOT_PARSE_NUMBER',
  '117': 'INCORRECT_DATA',
  '131': 'TOO_LARGE_STRING_SIZE',
  '321': 'VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE',
};

const NET_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED',
  'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'ERR_SOCKET_CLOSED',
]);

// Messages of client libraries that mean the connection, not the data (pg, ioredis, nats.js,
// @clickhouse/client); none of them carries a code to test instead.
const UNAVAILABLE_TEXT =
  /connect ECONNREFUSED|socket hang up|Connection terminated|Timeout error|timeout exceeded|read ECONNRESET|Client has encountered a connection error|Connection is closed|MaxRetriesPerRequest|Stream isn't writeable|the database system is (starting up|shutting down|in recovery mode)|Client was closed and is not queryable|CONNECTION_CLOSED|DISCONNECT|no responders/i;

/** Postgres errors carry a five-character SQLSTATE in `code`; node errors an upper-case name. */
const isSqlState = (c: unknown): c is string => typeof c === 'string' && /^[0-9A-Z]{5}$/.test(c) && /[0-9]/.test(c.slice(0, 2));

export function classifyFailure(e: unknown): Failure {
  if (e instanceof DependencyUnavailableError) return { kind: 'unavailable', reason: `${e.dependency} unavailable` };
  if (e instanceof DecodeError) return { kind: 'data', reason: 'queue message cannot be decoded' };
  if (e instanceof ClickHouseError) {
    if (CH_UNAVAILABLE.has(e.code)) return { kind: 'unavailable', reason: `ClickHouse ${e.code}` };
    const name = CH_DATA[e.code];
    if (name) return { kind: 'data', reason: `ClickHouse refused a value (${e.code} ${name})` };
    return { kind: 'unknown', reason: `ClickHouse error ${e.code}` };
  }
  const err = e as { code?: unknown; message?: unknown; cause?: unknown; name?: unknown };
  const code = err?.code;
  if (isSqlState(code)) {
    const cls = code.slice(0, 2);
    if (PG_UNAVAILABLE_CLASSES.includes(cls) || PG_UNAVAILABLE_CODES.has(code)) return { kind: 'unavailable', reason: `Postgres ${code}` };
    const name = PG_NAMES[code] ? ` ${PG_NAMES[code]}` : '';
    if (PG_RACE_CODES.has(code)) return { kind: 'unknown', reason: `Postgres ${code}${name} (concurrent write)` };
    if (PG_DATA_CLASSES.includes(cls)) return { kind: 'data', reason: `Postgres refused a value (${code}${name})` };
    return { kind: 'unknown', reason: `Postgres error ${code}${name}` };
  }
  if (code !== undefined && NET_CODES.has(String(code))) return { kind: 'unavailable', reason: 'connection failed' };
  if (typeof err?.message === 'string' && UNAVAILABLE_TEXT.test(err.message)) return { kind: 'unavailable', reason: 'connection failed' };
  if (err?.cause) {
    const inner = classifyFailure(err.cause);
    if (inner.kind !== 'unknown') return inner;
  }
  // Redis refuses writes when out of memory (`OOM command not allowed`): full, not wrong.
  if (err?.name === 'ReplyError' && typeof err.message === 'string' && /^(OOM|LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN)/.test(err.message)) {
    return { kind: 'unavailable', reason: 'Redis busy' };
  }
  return { kind: 'unknown', reason: `internal error (${typeof err?.name === 'string' ? err.name : 'Error'})` };
}

export const isUnavailable = (e: unknown): boolean => classifyFailure(e).kind === 'unavailable';

/**
 * At an adapter (lib/db/postgres.ts, lib/db/clickhouse.ts): a failure that means the server is not
 * there becomes a DependencyUnavailableError naming it, so callers need not know each client's
 * errors; anything else is returned unchanged.
 */
export function asUnavailable(dependency: string, e: unknown): unknown {
  if (e instanceof DependencyUnavailableError || classifyFailure(e).kind !== 'unavailable') return e;
  return new DependencyUnavailableError(dependency, `${dependency} unavailable: ${(e as Error)?.message ?? e}`, e);
}
