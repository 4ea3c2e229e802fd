// What a failed write means, decided in one place for every server the workers write to. The
// classification is positive: a failure is the data's fault only when the error carries a code
// that proves it (the lists below, per server and version); everything else is an outage.
//
//   data    the server refused a value of this report (cannot parse, out of range, constraint), or
//           the worker's own check proves it cannot be stored (lib/domain/report-check.ts, the envelope,
//           a message that is not a batch): the report that carries it is dead-lettered alone, at once.
//   outage  anything else: a server down, restarting, read-only, full, a table missing, a password
//           changed, an error code not listed, a bug in the worker. Nothing is dead-lettered for an
//           outage, however long it lasts: the report waits (retried with a growing delay) and the
//           worker says what it waits for (/readyz, fleet_worker_outage).
//
// An outage is `whole` when the server as a whole refuses (every report of a batch would fail
// alike: unreachable, read-only, full, a table missing): the batch then waits as it is. Any other
// outage is isolated first (workers/isolate.ts), so one report that trips a bug holds up only
// its own message.
//
// `reason` is safe to show the customer whose report failed: the server, the error class and its
// code, never the server's message (ClickHouse quotes neighbouring rows of the batch, Postgres
// quotes values and names: other customers' data). The full error goes to the service log only.
//
// The codes, and where they come from:
//
//   Postgres 15 (SQLSTATE, https://www.postgresql.org/docs/15/errcodes-appendix.html): the data
//   codes are PG_DATA below; texts captured from PostgreSQL 15.18 are in
//   test/unit/storage-errors.test.ts. Not data although they look like it: 23505 (a unique
//   violation is two workers creating the same row at once; the retry succeeds), 25006 (the server
//   is read-only), 28xxx (a password or role changed), 42xxx (a schema the code does not expect).
//
//   ClickHouse 18.16 and current releases (error codes are stable across versions): CH_DATA. 18.16
//   writes `Code: 27, e.displayText() = DB::Exception: …` without the `(ERROR_NAME)` suffix that
//   @clickhouse/client needs to build a ClickHouseError, so the code is read from that text too.
//   Not data although they look like it: 117 INCORRECT_DATA (also "unknown field": a table of
//   another schema version), 53 TYPE_MISMATCH, 16 NO_SUCH_COLUMN_IN_TABLE, 60 UNKNOWN_TABLE.
//
//   Redis 7: no error proves the data at fault. Every value the worker hands Redis is computed by
//   the worker (keys from ids, times from the envelope, which the worker's own check covers); OOM,
//   MISCONF, READONLY, LOADING, BUSY and the rest are outages.
//
//   NATS (the dead-letter stream refusing a publish): an outage of `nats`.
import { ClickHouseError } from '@clickhouse/client';
import { DecodeError } from '../contract/messages.js';

export type FailureKind = 'data' | 'outage';

/** What an outage waits for; `worker` is the worker's own code (a bug, an error nothing names). */
export const DEPENDENCIES = ['postgres', 'clickhouse', 'redis', 'nats', 'worker'] as const;
export type Dependency = (typeof DEPENDENCIES)[number];

export interface Failure {
  kind: FailureKind;
  /** Customer-safe: server, class and code; never the server's text. */
  reason: string;
  /** The server that refused (data) or that the report waits for (outage). */
  dependency: Dependency;
  /** Outage: the server as a whole refuses; every report of a batch would fail alike. */
  whole: boolean;
}

/** A dependency is not there (thrown by adapters that detect it themselves, e.g. a closed pool). */
export class DependencyUnavailableError extends Error {
  constructor(
    readonly dependency: Dependency,
    message: string,
    cause?: unknown,
  ) {
    super(message, { cause });
    this.name = 'DependencyUnavailableError';
  }
}

/**
 * Postgres 15 SQLSTATEs that prove a value of the statement is at fault. The worker's statements
 * are fixed; what varies is the reports' values, so these come from a report.
 */
export const PG_DATA: Readonly<Record<string, string>> = {
  '22001': 'string_data_right_truncation',
  '22003': 'numeric_value_out_of_range',
  '22007': 'invalid_datetime_format',
  '22008': 'datetime_field_overflow',
  '22021': 'character_not_in_repertoire',
  '22P02': 'invalid_text_representation',
  '22P05': 'untranslatable_character',
  '23502': 'not_null_violation',
  '23503': 'foreign_key_violation',
  '23514': 'check_violation',
  '54000': 'program_limit_exceeded',
};
/** Postgres outages of the server as a whole: connection, resources, shutdown, read-only, login, races. */
const PG_WHOLE_CLASSES = new Set(['08', '28', '3D', '53', '57', '58']);
const PG_WHOLE_CODES = new Set(['25006', '40001', '40P01', '55P03', '55006', '23505']);
const PG_NAMES: Readonly<Record<string, string>> = {
  ...PG_DATA,
  '23505': 'unique_violation',
  '25006': 'read_only_sql_transaction',
  '28000': 'invalid_authorization_specification',
  '28P01': 'invalid_password',
  '3D000': 'invalid_catalog_name',
  '40001': 'serialization_failure',
  '40P01': 'deadlock_detected',
  '42703': 'undefined_column',
  '42P01': 'undefined_table',
  '53300': 'too_many_connections',
  '57P01': 'admin_shutdown',
  '57P03': 'cannot_connect_now',
};

/**
 * ClickHouse codes (18.16 and current releases) that prove a value of the inserted rows is at
 * fault: it cannot be parsed as its column's type, or does not fit it.
 */
export const CH_DATA: Readonly<Record<string, string>> = {
  '6': 'CANNOT_PARSE_TEXT',
  '25': 'CANNOT_PARSE_ESCAPE_SEQUENCE',
  '26': 'CANNOT_PARSE_QUOTED_STRING',
  '27': 'CANNOT_PARSE_INPUT_ASSERTION_FAILED',
  '38': 'CANNOT_PARSE_DATE',
  '41': 'CANNOT_PARSE_DATETIME',
  '72': 'CANNOT_PARSE_NUMBER',
  '131': 'TOO_LARGE_STRING_SIZE',
  '321': 'VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE',
  '349': 'CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN',
};
/** ClickHouse outages of the server or a table as a whole. */
const CH_WHOLE: Readonly<Record<string, string>> = {
  '32': 'ATTEMPT_TO_READ_AFTER_EOF',
  '60': 'UNKNOWN_TABLE',
  '81': 'UNKNOWN_DATABASE',
  '159': 'TIMEOUT_EXCEEDED',
  '160': 'TOO_SLOW',
  '164': 'READONLY',
  '192': 'UNKNOWN_USER',
  '193': 'WRONG_PASSWORD',
  '202': 'TOO_MANY_SIMULTANEOUS_QUERIES',
  '209': 'SOCKET_TIMEOUT',
  '210': 'NETWORK_ERROR',
  '236': 'ABORTED',
  '241': 'MEMORY_LIMIT_EXCEEDED',
  '242': 'TABLE_IS_READ_ONLY',
  '252': 'TOO_MANY_PARTS',
  '279': 'ALL_CONNECTION_TRIES_FAILED',
  '285': 'TOO_FEW_LIVE_REPLICAS',
  '286': 'UNFINISHED',
  '319': 'UNKNOWN_STATUS_OF_INSERT',
  '425': 'SYSTEM_ERROR',
  '516': 'AUTHENTICATION_FAILED',
  '999': 'KEEPER_EXCEPTION',
  '1000': 'POCO_EXCEPTION',
};

/**
 * 18.16: `Code: 60, e.displayText() = DB::Exception: …`; current: `Code: 60. DB::Exception: …`.
 * Network failures between servers are `DB::NetException` (a replica killed while a distributed
 * read or a replicated insert talks to it: codes 210, 279, 32): read too, else they were no
 * ClickHouse error at all, and a read through the api answered 500 instead of 503. A server-side
 * Poco or std exception (1000 POCO_EXCEPTION: a socket or file; 1001 STD_EXCEPTION) is written
 * `Code: 1000, e.code() = 104, e.displayText() = …` or `Code: 1001. …`, sometimes after
 * `Poco::Exception. ` (the formats of ClickHouse's HTTP handler and getCurrentExceptionMessage).
 */
const CH_TEXT = /^(?:[A-Za-z:]*[Ee]xception\. )?Code: (\d{1,5})(?:, e\.displayText\(\) = DB::[A-Za-z]*Exception|, e\.code\(\) = -?\d+|\. )/;

/** The ClickHouse error code of `e`, whichever the server's version; null when it is not one. */
export function clickhouseCode(e: unknown): string | null {
  if (e instanceof ClickHouseError) return e.code;
  const message = (e as { message?: unknown })?.message;
  if (typeof message !== 'string') return null;
  return CH_TEXT.exec(message)?.[1] ?? null;
}

const NET_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED',
  'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'ERR_SOCKET_CLOSED',
]);

// Messages of client libraries that mean the connection (none carries a code to test instead),
// and whose connection it is.
const CONNECTION_TEXT: [RegExp, Dependency][] = [
  [/Connection terminated|the database system is (starting up|shutting down|in recovery mode)|Client was closed and is not queryable|timeout exceeded when trying to connect/i, 'postgres'],
  [/Connection is closed|MaxRetriesPerRequest|max retries per request|Stream isn't writeable/i, 'redis'],
  [/CONNECTION_CLOSED|DISCONNECT|no responders/i, 'nats'],
  [/connect ECONNREFUSED|socket hang up|Timeout error|read ECONNRESET|Client has encountered a connection error/i, 'worker'],
  // A proxy in front of the server (nginx in front of the ClickHouse replicas, deploy/cluster.ts)
  // that reached none: its own error page is the whole answer the client reports.
  [/<title>50[234] [^<]{1,40}<\/title>/, 'worker'],
];

// Redis refuses writes for reasons of its own state, never the value's.
const REDIS_WHOLE = /^(OOM|MISCONF|LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|NOAUTH|WRONGPASS|NOREPLICAS|EXECABORT)\b/;

/** Postgres errors carry a five-character SQLSTATE in `code`; node errors an upper-case name. */
const isSqlState = (c: unknown): c is string => typeof c === 'string' && /^[0-9A-Z]{5}$/.test(c) && /[0-9]/.test(c.slice(0, 2));

const outage = (dependency: Dependency, reason: string, whole: boolean): Failure => ({ kind: 'outage', reason, dependency, whole });

export function classifyFailure(e: unknown): Failure {
  if (e instanceof DependencyUnavailableError) {
    // The adapter names the server; the cause may still say more (a code).
    const inner = e.cause === undefined ? null : classifyFailure(e.cause);
    const reason = inner && inner.dependency !== 'worker' ? inner.reason : `${e.dependency} unavailable`;
    return outage(e.dependency, reason, true);
  }
  if (e instanceof DecodeError) return { kind: 'data', reason: 'queue message cannot be decoded', dependency: 'worker', whole: false };
  const chCode = clickhouseCode(e);
  if (chCode !== null) {
    const data = CH_DATA[chCode];
    if (data) return { kind: 'data', reason: `ClickHouse refused a value (${chCode} ${data})`, dependency: 'clickhouse', whole: false };
    const whole = CH_WHOLE[chCode];
    return outage('clickhouse', `ClickHouse error ${chCode}${whole ? ` ${whole}` : ''}`, whole !== undefined);
  }
  const err = e as { code?: unknown; message?: unknown; cause?: unknown; name?: unknown };
  const code = err?.code;
  if (isSqlState(code)) {
    const name = PG_NAMES[code] ? ` ${PG_NAMES[code]}` : '';
    if (PG_DATA[code]) return { kind: 'data', reason: `Postgres refused a value (${code}${name})`, dependency: 'postgres', whole: false };
    return outage('postgres', `Postgres error ${code}${name}`, PG_WHOLE_CLASSES.has(code.slice(0, 2)) || PG_WHOLE_CODES.has(code));
  }
  const message = typeof err?.message === 'string' ? err.message : '';
  if (err?.name === 'ReplyError') {
    const word = /^[A-Z]+/.exec(message)?.[0] ?? 'ERR';
    return outage('redis', `Redis error ${word}`, REDIS_WHOLE.test(message));
  }
  if (err?.name === 'NatsError') return outage('nats', `NATS error ${typeof code === 'string' ? code : ''}`.trim(), true);
  if (code !== undefined && NET_CODES.has(String(code))) return outage('worker', 'connection failed', true);
  for (const [re, dependency] of CONNECTION_TEXT) if (re.test(message)) return outage(dependency, 'connection failed', true);
  if (err?.cause) {
    const inner = classifyFailure(err.cause);
    if (inner.kind === 'data' || inner.dependency !== 'worker' || inner.whole) return inner;
  }
  return outage('worker', `internal error (${typeof err?.name === 'string' ? err.name : 'Error'})`, false);
}

/** The server as a whole is away: every write to it would fail alike. */
export const isUnavailable = (e: unknown): boolean => {
  const f = classifyFailure(e);
  return f.kind === 'outage' && f.whole;
};

/**
 * At an adapter (lib/infra/postgres.ts, lib/infra/clickhouse.ts): a failure that means the server as a
 * whole refuses becomes a DependencyUnavailableError naming it, so callers need not know each
 * client's errors; anything else is returned unchanged.
 */
export function asUnavailable(dependency: Dependency, e: unknown): unknown {
  if (e instanceof DependencyUnavailableError || !isUnavailable(e)) return e;
  return new DependencyUnavailableError(dependency, `${dependency} unavailable: ${(e as Error)?.message ?? e}`, e);
}
