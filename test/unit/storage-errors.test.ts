// What a failed write means (lib/infra/storage-errors.ts), decided positively: data only for the codes
// listed as proving the data at fault, an outage for everything else; a reason that names the
// class and code, never the server's text. The texts below were captured from the real servers
// (ClickHouse 18.16.1, PostgreSQL 15.18, Redis 7.0.15, nats-server 2.10 through nats.js) with
// the worker's own insert formats where one produces the error.
import t from 'tap';
import pg from 'pg';
import { ReplyError } from 'ioredis';
import { NatsError } from 'nats';
import { ClickHouseError, parseError } from '@clickhouse/client';
import { classifyFailure, clickhouseCode, asUnavailable, isUnavailable, DependencyUnavailableError, CH_DATA, PG_DATA } from '../../lib/infra/storage-errors.js';
import { DecodeError } from '../../lib/contract/messages.js';

/** What @clickhouse/client throws for a server error: its own parser, fed the server's text. */
const chError = (text: string) => parseError(new Error(text));
/** What pg throws: a DatabaseError with the SQLSTATE in `code`. */
const pgError = (code: string, message: string) => Object.assign(new pg.DatabaseError(message, message.length, 'error'), { code });

// ClickHouse 18.16.1, captured: the server's text, as the client's Error carries it.
const CH_1816 = {
  // TabSeparated into fleet.heartbeats (received_at, received_ms): "x\ty\n".
  41: 'Code: 41, e.displayText() = DB::Exception: Cannot parse datetime: (at row 1)\n\nRow 1:\nColumn 0,   name: received_at, type: DateTime, ERROR: text "x<TAB>y<LINE FEED>" is not like DateTime\n\n, e.what() = DB::Exception\n',
  // TabSeparated: a UInt64 column given "abc".
  27: 'Code: 27, e.displayText() = DB::Exception: Cannot parse input: expected \\n before: abc\\n: (at row 1)\n\nRow 1:\nColumn 0,   name: received_at, type: DateTime, parsed text: "2020-01-01 00:00:00"\nColumn 1,   name: received_ms, type: UInt64,   ERROR: text "abc<LINE FEED>" is not like UInt64\n\n, e.what() = DB::Exception\n',
  // TabSeparated: a Date column given "notadate".
  38: 'Code: 38, e.displayText() = DB::Exception: Cannot parse date: value is too short: (at row 1)\n\nRow 1:\nColumn 0,   name: d, type: Date, ERROR: text "notadate<LINE FEED>" is not like Date\n\n, e.what() = DB::Exception\n',
  // TabSeparated: FixedString(2) given "abcdef".
  131: 'Code: 131, e.displayText() = DB::Exception: Too large value for FixedString(2): (at row 1)\n\nRow 1:\nColumn 0,   name: fs, type: FixedString(2), parsed text: "abcdef"ERROR\n\n, e.what() = DB::Exception\n',
  // JSONEachRow: a String column given a number.
  26: 'Code: 26, e.displayText() = DB::Exception: Cannot parse JSON string: expected opening quote: (while read the value of key s): (at row 1)\n, e.what() = DB::Exception\n',
  // JSONEachRow: a lone surrogate.
  25: 'Code: 25, e.displayText() = DB::Exception: Cannot parse escape sequence: missing second part of surrogate pair: (while read the value of key s), e.what() = DB::Exception\n',
  // toUInt8('abc').
  6: "Code: 6, e.displayText() = DB::Exception: Cannot parse string 'abc' as UInt8: syntax error at begin of string. Note: there are toUInt8OrZero and toUInt8OrNull functions, which returns zero/NULL instead of throwing exception., e.what() = DB::Exception\n",
  // Values: 1e100 into Int64.
  321: 'Code: 321, e.displayText() = DB::Exception: Expression returns value NULL, that is out of range of type Int64, at: 1e100), e.what() = DB::Exception\n',
} as const;
const CH_1816_OUTAGES = {
  // The outages found from outside: DETACH TABLE, and inserts faster than merges.
  60: "Code: 60, e.displayText() = DB::Exception: Table fleet.heartbeats doesn't exist., e.what() = DB::Exception\n",
  252: 'Code: 252, e.displayText() = DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts., e.what() = DB::Exception\n',
  159: 'Code: 159, e.displayText() = DB::Exception: Timeout exceeded: elapsed 1.004 seconds, maximum: 1, e.what() = DB::Exception\n',
  81: "Code: 81, e.displayText() = DB::Exception: Database nodb doesn't exist, e.what() = DB::Exception\n",
  192: 'Code: 192, e.displayText() = DB::Exception: Unknown user nobody, e.what() = DB::Exception\n',
  193: 'Code: 193, e.displayText() = DB::Exception: Wrong password for user default, e.what() = DB::Exception\n',
  // A table of another schema version: not the data's fault.
  16: 'Code: 16, e.displayText() = DB::Exception: No such column nope in table heartbeats, e.what() = DB::Exception\n',
  117: 'Code: 117, e.displayText() = DB::Exception: Unknown field found while parsing JSONEachRow format: nope: (at row 1)\n, e.what() = DB::Exception\n',
  53: 'Code: 53, e.displayText() = DB::Exception: Type mismatch in IN or VALUES section. Expected: UInt8. Got: String, e.what() = DB::Exception\n',
  // A distributed read whose replica is gone (remote('127.0.0.1:1', system.one)): a NetException.
  279: 'Code: 279, e.displayText() = DB::NetException: All connection tries failed. Log: \n\nCode: 210, e.displayText() = DB::NetException: Connection refused (127.0.0.1:1), e.what() = DB::NetException\n\n, e.what() = DB::NetException\n',
  210: 'Code: 210, e.displayText() = DB::NetException: Connection refused (127.0.0.1:1), e.what() = DB::NetException\n',
} as const;

// PostgreSQL 15.18, captured (code and message of pg's DatabaseError).
const PG_15 = {
  '22001': 'value too long for type character varying(2)',
  '22003': 'value "99999999999999999999" is out of range for type bigint',
  '22007': 'invalid input syntax for type timestamp with time zone: "not a time"',
  '22008': 'timestamp out of range: "1e+17"',
  '22021': 'invalid byte sequence for encoding "UTF8": 0x00',
  '22P02': 'invalid input syntax for type uuid: "not-a-uuid"',
  '22P05': 'unsupported Unicode escape sequence',
  '23502': 'null value in column "n" of relation "t" violates not-null constraint',
  '23503': 'insert or update on table "machines" violates foreign key constraint "machines_customer_id_fkey"',
  '23514': 'new row for relation "t" violates check constraint "t_c_check"',
  '54000': 'index row size 3720 exceeds btree version 4 maximum 2704 for index "big_s_idx"',
} as const;
const PG_15_OUTAGES = {
  // ALTER SYSTEM SET default_transaction_read_only = on, then a reload.
  '25006': 'cannot execute INSERT in a read-only transaction',
  // The role's password changed.
  '28P01': 'password authentication failed for user "pwrole"',
  '28000': 'role "nobody" does not exist',
  '3D000': 'database "nodb" does not exist',
  // A schema the code does not expect.
  '42703': 'column "nope" does not exist',
  '42P01': 'relation "nope" does not exist',
  // Two workers creating the same row at once: the retry succeeds.
  '23505': 'duplicate key value violates unique constraint "machines_customer_id_slug_key"',
  '57P01': 'terminating connection due to administrator command',
  '40P01': 'deadlock detected',
} as const;

t.test('ClickHouse 18.16: the client builds no ClickHouseError, the code is read from the text', async (t) => {
  for (const [code, text] of Object.entries({ ...CH_1816, ...CH_1816_OUTAGES })) {
    const e = chError(text);
    t.notOk(e instanceof ClickHouseError, `${code}: a plain Error (no "(ERROR_NAME)" suffix in 18.16's text)`);
    t.equal(clickhouseCode(e), code, `${code}: read from the text`);
  }
  t.equal(clickhouseCode(new Error('Cannot parse input: Code: 27, e.displayText() = DB::Exception')), null, 'only at the start of the message');
  t.equal(clickhouseCode(new Error('connect ECONNREFUSED 127.0.0.1:8123')), null);
});

t.test('ClickHouse 18.16, captured: the listed codes are data, with a reason that quotes nothing', async (t) => {
  for (const [code, text] of Object.entries(CH_1816)) {
    const f = classifyFailure(chError(text));
    t.same(f, { kind: 'data', reason: `ClickHouse refused a value (${code} ${CH_DATA[code]})`, dependency: 'clickhouse', whole: false }, `${code}`);
    t.notMatch(f.reason, /row|column|received|abc|Int64/i, `${code}: no server text`);
  }
});

t.test('ClickHouse 18.16, captured: a table away, too many parts, a login, a schema: outages of the whole server', async (t) => {
  for (const [code, text] of Object.entries(CH_1816_OUTAGES)) {
    const f = classifyFailure(chError(text));
    t.equal(f.kind, 'outage', `${code}: an outage`);
    t.equal(f.dependency, 'clickhouse', `${code}: of ClickHouse`);
    t.match(f.reason, new RegExp(`^ClickHouse error ${code}\\b`));
  }
  for (const code of [60, 252, 159, 81, 192, 193, 279, 210]) t.ok(classifyFailure(chError(CH_1816_OUTAGES[code as 60])).whole, `${code}: the whole table or server`);
  for (const code of [16, 117, 53]) t.notOk(classifyFailure(chError(CH_1816_OUTAGES[code as 16])).whole, `${code}: isolated first (it might be one report)`);
  t.same(classifyFailure(chError(CH_1816_OUTAGES[60])), { kind: 'outage', reason: 'ClickHouse error 60 UNKNOWN_TABLE', dependency: 'clickhouse', whole: true });
  t.same(classifyFailure(chError(CH_1816_OUTAGES[252])), { kind: 'outage', reason: 'ClickHouse error 252 TOO_MANY_PARTS', dependency: 'clickhouse', whole: true });
  // NetException, not Exception: a replica away during a distributed read is ClickHouse's outage.
  t.same(classifyFailure(chError(CH_1816_OUTAGES[279])), { kind: 'outage', reason: 'ClickHouse error 279 ALL_CONNECTION_TRIES_FAILED', dependency: 'clickhouse', whole: true });
  t.equal(clickhouseCode(new Error('Code: 210. DB::NetException: Connection refused (127.0.0.1:1). (NETWORK_ERROR)')), '210', 'current releases too');
  // Server-side Poco and std exceptions, in the formats of ClickHouse's HTTP handler (not captured).
  t.same(classifyFailure(chError('Code: 1000, e.code() = 104, e.displayText() = Connection reset by peer, e.what() = Connection reset by peer\n')), { kind: 'outage', reason: 'ClickHouse error 1000 POCO_EXCEPTION', dependency: 'clickhouse', whole: true });
  t.equal(clickhouseCode(new Error('Poco::Exception. Code: 1000, e.code() = 0, e.displayText() = Timeout (version 18.16.1)')), '1000');
  t.same(classifyFailure(chError('Code: 1001. std::bad_alloc\n')), { kind: 'outage', reason: 'ClickHouse error 1001', dependency: 'clickhouse', whole: false });
  t.equal(clickhouseCode(new Error('Code: 60 is not a ClickHouse error text')), null, 'a text that only begins alike');
});

t.test('current ClickHouse: the client builds a ClickHouseError; every listed code is data, any other an outage', async (t) => {
  // The form current releases write (the error name in parentheses, then the version).
  const current = chError("Code: 27. DB::Exception: Cannot parse input: expected '\\t' before: 'abc': (at row 1)\n: While executing ParallelParsingBlockInputFormat. (CANNOT_PARSE_INPUT_ASSERTION_FAILED) (version 24.8.4.13 (official build))");
  t.ok(current instanceof ClickHouseError);
  t.equal(clickhouseCode(current), '27');
  t.equal(classifyFailure(current).kind, 'data');
  for (const [code, name] of Object.entries(CH_DATA)) {
    const e = new ClickHouseError({ message: 'Cannot parse input: expected \\t before: 00000000-neighbour-row', code, type: name });
    t.same(classifyFailure(e), { kind: 'data', reason: `ClickHouse refused a value (${code} ${name})`, dependency: 'clickhouse', whole: false }, `${code} ${name}`);
    // And the same code in 18.16's form.
    t.equal(classifyFailure(chError(`Code: ${code}, e.displayText() = DB::Exception: x, e.what() = DB::Exception\n`)).kind, 'data', `${code} in 18.16's form`);
  }
  for (const code of ['60', '252', '241', '117', '53', '16', '62', '999', '1000', '12345']) {
    const f = classifyFailure(new ClickHouseError({ message: 'x', code, type: 'X_Y_Z' }));
    t.equal(f.kind, 'outage', `${code}: an outage`);
  }
});

t.test('Postgres 15, captured: the listed SQLSTATEs are data, with a reason that quotes nothing', async (t) => {
  t.same(Object.keys(PG_15).sort(), Object.keys(PG_DATA).sort(), 'every listed code has a captured text');
  for (const [code, message] of Object.entries(PG_15)) {
    const f = classifyFailure(pgError(code, message));
    t.same(f, { kind: 'data', reason: `Postgres refused a value (${code} ${PG_DATA[code]})`, dependency: 'postgres', whole: false }, code);
    t.notMatch(f.reason, /machines|relation|column|"/, `${code}: no server text`);
  }
});

t.test('Postgres 15, captured: read-only, a changed password, a schema, a race: outages', async (t) => {
  for (const [code, message] of Object.entries(PG_15_OUTAGES)) {
    const f = classifyFailure(pgError(code, message));
    t.equal(f.kind, 'outage', code);
    t.equal(f.dependency, 'postgres', code);
    t.match(f.reason, new RegExp(`^Postgres error ${code}`));
  }
  for (const code of ['25006', '28P01', '28000', '3D000', '23505', '57P01', '40P01', '08006', '53300']) t.ok(classifyFailure(pgError(code, 'x')).whole, `${code}: the batch waits whole`);
  for (const code of ['42703', '42P01', 'XX000', '22012', '22023']) t.notOk(classifyFailure(pgError(code, 'x')).whole, `${code}: isolated first`);
  t.same(classifyFailure(pgError('25006', PG_15_OUTAGES['25006'])), { kind: 'outage', reason: 'Postgres error 25006 read_only_sql_transaction', dependency: 'postgres', whole: true });
  t.equal(classifyFailure(pgError('22012', 'division by zero')).kind, 'outage', 'a 22 code not listed proves nothing');
});

t.test('Redis 7, captured: refusing writes is an outage; no Redis error is data', async (t) => {
  const texts = [
    // Captured: maxmemory with noeviction, a SET and a Lua script that writes.
    "OOM command not allowed when used memory > 'maxmemory'.",
    "OOM command not allowed when used memory > 'maxmemory'. script: 219bb33e7c6773035c720850383aa2ebb63d9904, on @user_script:1.",
    // Not captured here (Redis 7 protects CONFIG SET dir): the forms Redis writes.
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled.",
    'READONLY You can\'t write against a read only replica.',
    'LOADING Redis is loading the dataset in memory',
  ];
  for (const m of texts) {
    const f = classifyFailure(new ReplyError(m));
    t.same([f.kind, f.dependency, f.whole], ['outage', 'redis', true], m.slice(0, 40));
    t.notMatch(f.reason, /maxmemory|script/);
  }
  // Captured: values Redis refuses. The worker computes every value it hands Redis (from the
  // envelope, which its own check covers), so these prove nothing about a report.
  for (const m of ["ERR invalid expire time in 'set' command", 'ERR value is not an integer or out of range', 'WRONGTYPE Operation against a key holding the wrong kind of value']) {
    const f = classifyFailure(new ReplyError(m));
    t.same([f.kind, f.dependency, f.whole], ['outage', 'redis', false], `${m}: an outage, isolated first`);
  }
});

t.test('NATS, connections and everything else: outages', async (t) => {
  // js.publish to a stream that is gone, or full with discard new (captured: code "503").
  const nats = new NatsError('503', '503');
  t.same(classifyFailure(nats), { kind: 'outage', reason: 'NATS error 503', dependency: 'nats', whole: true });
  t.same(classifyFailure(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:27099'), { code: 'ECONNREFUSED' })).kind, 'outage');
  t.equal(classifyFailure(new Error('Connection terminated unexpectedly')).dependency, 'postgres');
  t.equal(classifyFailure(new Error('Connection is closed.')).dependency, 'redis');
  t.same(classifyFailure(new TypeError('x is undefined')), { kind: 'outage', reason: 'internal error (TypeError)', dependency: 'worker', whole: false });
  t.same(classifyFailure(new RangeError('Maximum call stack size exceeded')), { kind: 'outage', reason: 'internal error (RangeError)', dependency: 'worker', whole: false });
  t.equal(classifyFailure('a string').kind, 'outage');
  t.equal(classifyFailure(null).kind, 'outage');
  t.equal(classifyFailure(undefined).kind, 'outage');
  t.equal(classifyFailure(new DecodeError('x')).kind, 'data', 'a message that is not a batch is its own fault');
  // A cause is looked at.
  t.equal(classifyFailure(new Error('wrapped', { cause: pgError('22003', 'x') })).kind, 'data');
  t.equal(classifyFailure(new Error('wrapped', { cause: new TypeError('x') })).kind, 'outage');
});

t.test('adapters name the dependency that refuses as a whole, keep its code, and leave other errors alone', async (t) => {
  const away = asUnavailable('clickhouse', chError(CH_1816_OUTAGES[60]));
  t.ok(away instanceof DependencyUnavailableError);
  t.equal((away as DependencyUnavailableError).dependency, 'clickhouse');
  t.same(classifyFailure(away), { kind: 'outage', reason: 'ClickHouse error 60 UNKNOWN_TABLE', dependency: 'clickhouse', whole: true });
  const refused = asUnavailable('postgres', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }));
  t.same(classifyFailure(refused), { kind: 'outage', reason: 'postgres unavailable', dependency: 'postgres', whole: true });
  const data = pgError('22003', 'x');
  t.equal(asUnavailable('postgres', data), data);
  const bug = new TypeError('x');
  t.equal(asUnavailable('postgres', bug), bug, 'a bug is not the server');
  t.ok(isUnavailable(away));
  t.notOk(isUnavailable(bug));
  // nginx 1.22.1 in front of the ClickHouse replicas with none reachable, captured: what
  // @clickhouse/client reports is the proxy's page (no code). ClickHouse is away: 503, not 500.
  const page = '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n';
  const proxied = asUnavailable('clickhouse', chError(page));
  t.ok(proxied instanceof DependencyUnavailableError && proxied.dependency === 'clickhouse', "a proxy's 502 page: ClickHouse unavailable");
  t.notOk(isUnavailable(new Error('<html><head><title>404 Not Found</title></head></html>')), 'a 404 page is not an outage');
});
