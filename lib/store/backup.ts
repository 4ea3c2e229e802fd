// `fleet backup <dir>` and `fleet restore <dir>` (docs/operations.md "Backup and restore").
//
// What a backup holds, in the order it is taken (the order is what makes the cut-off exact):
//
//   1. the cut-off: the time C, then each ingest stream's last sequence number L (stream info asked
//      after C: a report whose 200 was sent before C was stored by JetStream before C, so at a
//      sequence ≤ L). The ingest streams are both lanes of every partition that exists (any
//      STREAM_PARTITIONS, and unpartitioned streams left from before a change of it);
//   2. the messages of each ingest stream up to L that are still in it (not yet applied), then the
//      dead-letter stream: streams/*.bin (lib/store/backup-streams.ts);
//   3. Postgres: one REPEATABLE READ snapshot, exported to pg_dump (--snapshot) and counted in the
//      same transaction (postgres.dump, custom format): taken after 2, so every report of 2 that a
//      worker had acked meanwhile is in it;
//   4. the newest heartbeat of each instance that Redis holds and Postgres may not have yet
//      (workers/heartbeat-state.ts: Postgres gets it up to PG_HEARTBEAT_INTERVAL_S later):
//      heartbeats.jsonl.gz;
//   5. ClickHouse: each history table, read FINAL (each row once) as TabSeparated, gzip:
//      clickhouse/<table>.tsv.gz;
//   6. the artifact upload records (KV bucket) and chunks (object store): streams/uploads.bin,
//      streams/artifacts.bin, after 3, so every artifact row of the dump has its chunks;
//   7. manifest.json, last: versions, the cut-off, every file's size and SHA-256, row and message
//      counts. A folder without it is no backup.
//
// "Included": every report acknowledged (answered 200/202) before C is in the backup: applied
// (Postgres, ClickHouse, Redis's newest heartbeat) or as a message of 2, which the target's workers
// apply after the restore (every write is idempotent, so one applied twice is stored once). The
// dumps may hold reports acknowledged after C (the stack keeps ingesting while they are taken);
// the manifest claims none of them: its counts say what each file holds, its cut-off what is
// promised.
//
// Not in a backup: Redis apart from 4 (heartbeat keys, the light census, idempotency and metric
// duplicate registers, login counters, BullMQ jobs: queued webhook deliveries, schedules). A
// restored stack rebuilds what it needs: the traffic light is kept in Postgres (`instance_lights`),
// an instance silent since the backup turns red by the normal rule (the sweep), webhook events not
// yet delivered are in the Postgres outbox. ClickHouse: FINAL rows (duplicates collapse anyway).
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import { createGunzip, createGzip } from 'node:zlib';
import pg from 'pg';
import type { Config } from '../infra/config.js';
import { chIdent, createClickHouse, queryRows, type ClickHouseClient } from '../infra/clickhouse.js';
import { connectNats, ensureIngestPartition, ensureStreams, existingIngestStreams, type NatsConnection } from '../infra/nats.js';
import { createPool, withTx, type Pool } from '../infra/postgres.js';
import { createRedis, redisKeys, scanKeys, type Redis } from '../infra/redis.js';
import { isNotFound } from '../infra/jetstream-errors.js';
import { deadLetterStream, heartbeatStream, ingestStreamOf, ingestStreams, partitionOfStream, subjects, type IngestPartition } from '../contract/messages.js';
import { ArtifactStore, bucketNames } from './artifacts.js';
import { decodeFields, type HeartbeatFields } from './live-heartbeats.js';
import { lockInstances, recheckNowSql, writeHeartbeats } from './instances.js';
import { advanceMachinesLastSeen } from './machines.js';
import { migrate } from './migrate.js';
import { CH_RETENTION_TABLES, dropPartitionSql, listPartitions } from './retention.js';
import { publishStreamFile, writeStreamFile, type StreamFileSummary } from './backup-streams.js';

/**
 * 2: a role per ingest stream of every partition (`ingest_<p>`, `heartbeats_<p>`). Format 1 had
 * the roles `ingest` and `heartbeats` alone, which 2 keeps for unpartitioned streams: a format 1
 * backup restores as one of 2.
 */
export const BACKUP_FORMAT = 2;
const FORMATS_READ = [1, 2];

/** The streams of a stack other than the ingest streams, by their role (the names differ between stacks: STREAM_NAME). */
export const STREAM_ROLES = ['dead_letters', 'uploads', 'artifacts'] as const;
export type StreamRole = (typeof STREAM_ROLES)[number];

export function streamNames(streamName: string): Record<StreamRole, string> {
  const b = bucketNames(streamName);
  return {
    dead_letters: deadLetterStream(streamName),
    uploads: `KV_${b.uploads}`,
    artifacts: `OBJ_${b.objects}`,
  };
}

/**
 * An ingest stream's role in a backup (lib/contract/messages.ts ingestStreamOf): `ingest` and
 * `heartbeats` for the unpartitioned main stream and heartbeat lane (STREAM_PARTITIONS=1),
 * `ingest_<p>` and `heartbeats_<p>` for partition p's. Null for any other stream.
 */
export function ingestRole(streamName: string, name: string): string | null {
  const of = ingestStreamOf(streamName, name);
  if (!of) return null;
  const lane = of.lane === 'heartbeats' ? 'heartbeats' : 'ingest';
  return of.partition === null ? lane : `${lane}_${of.partition}`;
}

/** The partition and stream an ingest role names in the stack of `streamName`; null when `role` is no ingest role. */
export function ingestRoleStream(streamName: string, subjectPrefix: string, role: string): { partition: IngestPartition; stream: string } | null {
  const m = /^(ingest|heartbeats)(_\d{1,3})?$/.exec(role);
  if (!m) return null;
  // The role names the stream as ingestStreamOf reads it: `<STREAM_NAME>[_<p>][_HB]`.
  const main = `${streamName}${m[2] ?? ''}`;
  const p = partitionOfStream(streamName, subjectPrefix, m[1] === 'heartbeats' ? heartbeatStream(main) : main);
  return p && { partition: p, stream: p.streams[p.lane] };
}

/** The subject prefix a role's messages carry, so that a restore can map it to the target's. */
function subjectPrefix(streamName: string, prefix: string, role: string): string {
  const b = bucketNames(streamName);
  if (role === 'dead_letters') return subjects(prefix).deadLetter;
  if (role === 'uploads') return `$KV.${b.uploads}.`;
  if (role === 'artifacts') return `$O.${b.objects}.`;
  return `${prefix}.`; // every ingest subject: `<prefix>.reports`, `<prefix>.p<p>.heartbeats`, …
}

export interface FileEntry {
  file: string;
  bytes: number;
  sha256: string;
}

export interface Manifest {
  format: number;
  backup_id: string;
  started_at: string;
  finished_at: string;
  duration_ms: number;
  /** What is promised: see the module comment. */
  cutoff: {
    at: string;
    /** Each ingest stream's last sequence number at the cut-off, by role (ingestRole); its file holds no message after it. */
    streams: Record<string, number>;
    meaning: string;
  };
  versions: {
    postgres: string;
    clickhouse: string;
    nats: string;
    /** Applied migrations (lib/store/schema.ts) of each database, in the snapshot. */
    postgres_migrations: string[];
    clickhouse_migrations: string[];
  };
  /** Names of the source stack (a restore maps them to the target's). No credentials. */
  source: { stream_name: string; subject_prefix: string; redis_prefix: string; clickhouse_database: string; postgres_database: string };
  postgres: FileEntry & { snapshot_at: string; rows: Record<string, number> };
  heartbeats: FileEntry & { instances: number };
  clickhouse: Record<string, FileEntry & { columns: string[]; rows: number }>;
  /** Every stream, by role: each ingest stream (ingestRole), then STREAM_ROLES. */
  streams: Record<string, StreamEntry>;
  /** Milliseconds per step, for the runbook's "how long". */
  timings: Record<string, number>;
}

export type StreamEntry = FileEntry & Omit<StreamFileSummary, 'bytes' | 'sha256'> & { source_name: string };

export type Progress = (step: string, detail?: string) => void | Promise<void>;

const CUTOFF_MEANING =
  'every report acknowledged before cutoff.at is included: applied in the Postgres and ClickHouse files, or a message of an ingest stream (streams/ingest*.bin or streams/heartbeats*.bin, sequence <= its cutoff.streams), applied by the workers after a restore. The files may also hold reports acknowledged after cutoff.at; they are not promised.';

// ---------------------------------------------------------------- helpers

/** The Postgres client programs: the newest Debian-installed version (never older than the server), else PATH. */
export function pgProgram(name: 'pg_dump' | 'pg_restore'): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(join(root, v, 'bin', name))) return join(root, v, 'bin', name);
  return name;
}

/** libpq settings from a postgres:// URL, the password in PGPASSWORD (never on a command line). */
function pgEnv(url: string): NodeJS.ProcessEnv {
  const u = new URL(url);
  const env: NodeJS.ProcessEnv = { ...process.env, PGHOST: u.hostname, PGPORT: u.port || '5432', PGDATABASE: decodeURIComponent(u.pathname.slice(1)) };
  if (u.username) env.PGUSER = decodeURIComponent(u.username);
  if (u.password) env.PGPASSWORD = decodeURIComponent(u.password);
  const ssl = u.searchParams.get('sslmode');
  if (ssl) env.PGSSLMODE = ssl;
  return env;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} exited with ${code}: ${err.trim()}`))));
  });
}

async function fileEntry(dir: string, file: string): Promise<FileEntry> {
  const hash = createHash('sha256');
  for await (const c of createReadStream(join(dir, file))) hash.update(c as Buffer);
  return { file, bytes: statSync(join(dir, file)).size, sha256: hash.digest('hex') };
}

/** Counts newline-terminated lines passing through. */
function lineCounter(): Transform & { lines: number } {
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) (t as Transform & { lines: number }).lines++;
      cb(null, chunk);
    },
  }) as Transform & { lines: number };
  t.lines = 0;
  return t;
}

async function chColumns(ch: ClickHouseClient, table: string): Promise<string[]> {
  const rows = await queryRows<{ name: string }>(
    ch,
    // 18.16 has no query parameters; the name is one of ours, checked by chIdent.
    `SELECT name FROM system.columns WHERE database = currentDatabase() AND table = '${chIdent(table)}' AND default_kind NOT IN ('MATERIALIZED', 'ALIAS')`,
  );
  return rows.map((r) => chIdent(r.name));
}

// ---------------------------------------------------------------- backup

export interface BackupOptions {
  progress?: Progress;
}

/** Takes a backup of the stack `cfg` names into `dir` (created; must not hold a manifest). */
export async function backup(cfg: Config, dir: string, o: BackupOptions = {}): Promise<Manifest> {
  const say = o.progress ?? (() => {});
  if (existsSync(join(dir, 'manifest.json'))) throw new BackupError(`${dir} holds a backup already (manifest.json); choose an empty folder`);
  mkdirSync(join(dir, 'streams'), { recursive: true });
  mkdirSync(join(dir, 'clickhouse'), { recursive: true });
  const started = Date.now();
  const timings: Record<string, number> = {};
  const timed = async <T>(step: string, fn: () => Promise<T>): Promise<T> => {
    await say(step);
    const t0 = Date.now();
    const r = await fn();
    timings[step] = Date.now() - t0;
    return r;
  };
  const names = streamNames(cfg.streamName);
  const nc = await connectNats(cfg.natsUrl, 'fleet-backup');
  const redis = createRedis(cfg.redisUrl);
  const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });
  try {
    const jsm = await nc.jetstreamManager({ timeout: 20_000 });
    // 1. The cut-off: the time first, then the ingest streams' last sequence numbers: every one
    // that exists, and those of this stack's STREAM_PARTITIONS in any case (one the server does
    // not list fails the backup rather than leave its reports out).
    const cutoffAt = new Date();
    const ingest = new Map<string, string>();
    for (const name of new Set([...(await existingIngestStreams(jsm, cfg.streamName)), ...ingestStreams(cfg.streamName, cfg.streamPartitions)])) {
      ingest.set(ingestRole(cfg.streamName, name)!, name);
    }
    const cut: Record<string, number> = {};
    for (const [role, name] of [...ingest].sort()) cut[role] = (await jsm.streams.info(name)).state.last_seq;
    await say('cutoff', `${cutoffAt.toISOString()} ${Object.entries(cut).map(([role, seq]) => `${role}<=${seq}`).join(' ')}`);

    // 2. The ingest streams' messages not yet applied, then the dead letters.
    const streams: Manifest['streams'] = {};
    const copy = async (role: string, name: string, upTo?: number) => {
      const file = `streams/${role}.bin`;
      let to = upTo;
      if (to === undefined) {
        try {
          to = (await jsm.streams.info(name)).state.last_seq;
        } catch (e) {
          if (!isNotFound(e)) throw e;
          to = 0; // never made (no artifact uploaded yet): an empty file
        }
      }
      let s: StreamFileSummary = { messages: 0, first_seq: 0, last_seq: 0, bytes: 0, sha256: createHash('sha256').digest('hex') };
      if (to > 0) s = await writeStreamFile(jsm, name, to, join(dir, file));
      else writeFileSync(join(dir, file), '');
      streams[role] = { file, source_name: name, messages: s.messages, first_seq: s.first_seq, last_seq: s.last_seq, bytes: s.bytes, sha256: s.sha256 };
      await say(`stream ${role}`, `${s.messages} messages`);
    };
    await timed('streams: ingest and dead letters', async () => {
      for (const role of Object.keys(cut)) await copy(role, ingest.get(role)!, cut[role]);
      await copy('dead_letters', names.dead_letters);
    });

    // 3. Postgres: one snapshot, counted and dumped.
    const pgPart = await timed('postgres', () => dumpPostgres(cfg.databaseUrl, join(dir, 'postgres.dump')));
    const postgres = { ...(await fileEntry(dir, 'postgres.dump')), snapshot_at: pgPart.snapshotAt, rows: pgPart.rows };

    // 4. The newest heartbeats Redis holds.
    const hb = await timed('heartbeats', () => saveHeartbeats(redis, cfg.redisPrefix, join(dir, 'heartbeats.jsonl.gz')));
    const heartbeats = { ...(await fileEntry(dir, 'heartbeats.jsonl.gz')), instances: hb };

    // 5. ClickHouse, table by table.
    const clickhouse: Manifest['clickhouse'] = {};
    await timed('clickhouse', async () => {
      for (const table of CH_RETENTION_TABLES) {
        const columns = await chColumns(ch, table);
        const file = `clickhouse/${table}.tsv.gz`;
        const rows = await exportTable(ch, table, columns, join(dir, file));
        clickhouse[table] = { ...(await fileEntry(dir, file)), columns, rows };
        await say(`clickhouse ${table}`, `${rows} rows`);
      }
    });

    // 6. Artifacts: upload records and chunks.
    await timed('streams: artifacts', async () => {
      await copy('uploads', names.uploads);
      await copy('artifacts', names.artifacts);
    });

    const chVersion = (await queryRows<{ v: string }>(ch, 'SELECT version() AS v'))[0]?.v ?? '';
    const chMigrations = (await queryRows<{ id: string }>(ch, 'SELECT DISTINCT id FROM schema_migrations ORDER BY id')).map((r) => r.id);
    const finished = Date.now();
    const m: Manifest = {
      format: BACKUP_FORMAT,
      backup_id: randomUUID(),
      started_at: new Date(started).toISOString(),
      finished_at: new Date(finished).toISOString(),
      duration_ms: finished - started,
      cutoff: { at: cutoffAt.toISOString(), streams: cut, meaning: CUTOFF_MEANING },
      versions: { postgres: pgPart.version, clickhouse: chVersion, nats: nc.info?.version ?? '', postgres_migrations: pgPart.migrations, clickhouse_migrations: chMigrations },
      source: {
        stream_name: cfg.streamName,
        subject_prefix: cfg.subjectPrefix,
        redis_prefix: cfg.redisPrefix,
        clickhouse_database: cfg.clickhouseDatabase,
        postgres_database: new URL(cfg.databaseUrl).pathname.slice(1),
      },
      postgres,
      heartbeats,
      clickhouse,
      streams,
      timings,
    };
    // 7. The manifest last, whole or not at all.
    writeFileSync(join(dir, 'manifest.json.tmp'), JSON.stringify(m, null, 2) + '\n');
    renameSync(join(dir, 'manifest.json.tmp'), join(dir, 'manifest.json'));
    return m;
  } finally {
    await nc.close();
    redis.disconnect();
    await ch.close();
  }
}

export class BackupError extends Error {}

async function dumpPostgres(url: string, file: string): Promise<{ snapshotAt: string; rows: Record<string, number>; version: string; migrations: string[] }> {
  const c = new pg.Client({ connectionString: url, application_name: 'fleet-backup' });
  await c.connect();
  try {
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const snap = (await c.query<{ id: string; at: Date; version: string }>(`SELECT pg_export_snapshot() AS id, now() AS at, current_setting('server_version') AS version`)).rows[0]!;
    // pg_dump reads the very snapshot counted here, while this transaction stays open.
    const dumped = run(pgProgram('pg_dump'), ['--format=custom', `--snapshot=${snap.id}`, `--file=${file}`], pgEnv(url));
    const tables = (await c.query<{ t: string }>(`SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)).rows.map((r) => r.t);
    const rows: Record<string, number> = {};
    for (const t of tables) rows[t] = Number((await c.query<{ n: string }>(`SELECT count(*) AS n FROM public."${t.replace(/"/g, '""')}"`)).rows[0]!.n);
    const migrations = tables.includes('schema_migrations') ? (await c.query<{ id: string }>('SELECT id FROM schema_migrations ORDER BY id')).rows.map((r) => r.id) : [];
    await dumped;
    await c.query('COMMIT');
    return { snapshotAt: snap.at.toISOString(), rows, version: snap.version, migrations };
  } finally {
    await c.end();
  }
}

/** [instance id, machine id, fields JSON] of each instance's newest heartbeat in Redis, one JSON array a line. */
async function saveHeartbeats(redis: Redis, prefix: string, file: string): Promise<number> {
  const keys = redisKeys(prefix, redis);
  const gz = createGzip();
  const out = createWriteStream(file);
  const done = pipeline(gz, out);
  let n = 0;
  // Every primary of a cluster; a key SCAN returns twice is written twice, and restoring the same
  // newest heartbeat twice changes nothing.
  for await (const found of scanKeys(redis, `${keys.heartbeatStatePrefix}*`)) {
    for (const key of found) {
      const [hb, mid] = await redis.hmget(key, 'hb', 'mid');
      if (!hb || !mid) continue;
      if (!gz.write(JSON.stringify([keys.instanceOfStateKey(key), mid, hb]) + '\n')) await once(gz, 'drain');
      n++;
    }
  }
  gz.end();
  await done;
  return n;
}

async function exportTable(ch: ClickHouseClient, table: string, columns: string[], file: string): Promise<number> {
  const r = await ch.exec({ query: `SELECT ${columns.join(', ')} FROM ${chIdent(table)} FINAL FORMAT TabSeparated` });
  const count = lineCounter();
  await pipeline(r.stream, count, createGzip(), createWriteStream(file));
  return count.lines;
}

// ---------------------------------------------------------------- restore

export function readManifest(dir: string): Manifest {
  const p = join(dir, 'manifest.json');
  if (!existsSync(p)) throw new BackupError(`${dir} holds no manifest.json: not a backup, or one that did not finish`);
  const m = JSON.parse(readFileSync(p, 'utf8')) as Manifest;
  if (!FORMATS_READ.includes(m.format)) throw new BackupError(`backup format ${m.format} is not one this version reads (${FORMATS_READ.join(', ')})`);
  return m;
}

/** Every file against the manifest's size and SHA-256; the names of those that differ. */
export async function verifyBackup(dir: string, m: Manifest): Promise<string[]> {
  const entries: FileEntry[] = [m.postgres, m.heartbeats, ...Object.values(m.clickhouse), ...Object.values(m.streams)];
  const bad: string[] = [];
  for (const e of entries) {
    if (!existsSync(join(dir, e.file))) {
      bad.push(`${e.file}: missing`);
      continue;
    }
    const f = await fileEntry(dir, e.file);
    if (f.bytes !== e.bytes || f.sha256 !== e.sha256) bad.push(`${e.file}: ${f.bytes} bytes, sha256 ${f.sha256.slice(0, 12)}…, the manifest says ${e.bytes} bytes, ${e.sha256.slice(0, 12)}…`);
  }
  return bad;
}

export interface RestoreOptions {
  /** Restore over a target that holds data (it is replaced). */
  force?: boolean;
  progress?: Progress;
}

export interface RestoreResult {
  backupId: string;
  /** Steps done by this run (a re-run of a half-done restore skips the others). */
  done: string[];
  skipped: string[];
  /** Messages republished per stream; rows inserted per ClickHouse table; heartbeats folded into Postgres. */
  messages: Record<string, number>;
  rows: Record<string, number>;
  heartbeats: number;
}

/** What the target holds already (a restore replaces it only with `force`). */
async function targetContents(pool: Pool, ch: ClickHouseClient, nc: NatsConnection, cfg: Config): Promise<string[]> {
  const out: string[] = [];
  const customers = await pool
    .query<{ n: string }>('SELECT count(*) AS n FROM customers')
    .then((r) => Number(r.rows[0]!.n))
    .catch(() => 0); // no schema yet
  if (customers > 0) out.push(`Postgres holds ${customers} customer${customers === 1 ? '' : 's'}`);
  for (const table of CH_RETENTION_TABLES) {
    const n = await queryRows<{ n: string }>(ch, `SELECT count() AS n FROM ${chIdent(table)}`)
      .then((r) => Number(r[0]?.n ?? 0))
      .catch(() => 0);
    if (n > 0) out.push(`ClickHouse ${table} holds ${n} rows`);
  }
  const jsm = await nc.jetstreamManager();
  const ingest = (await existingIngestStreams(jsm, cfg.streamName)).map((name) => [ingestRole(cfg.streamName, name)!, name]);
  for (const [role, name] of [...ingest, ...Object.entries(streamNames(cfg.streamName))]) {
    const n = await jsm.streams
      .info(name)
      .then((i) => i.state.messages)
      .catch(() => 0);
    if (n > 0) out.push(`stream ${name} (${role}) holds ${n} messages`);
  }
  return out;
}

/**
 * Restores the backup in `dir` into the stack `cfg` names. Run it with the target's gateways and
 * workers stopped; start them when it has finished. Each step replaces what it writes (Postgres's
 * schema, each ClickHouse table, each stream), and the target's Redis records the steps done, so a
 * restore stopped half-way is finished by running it again.
 */
export async function restore(cfg: Config, dir: string, o: RestoreOptions = {}): Promise<RestoreResult> {
  const say = o.progress ?? (() => {});
  const m = readManifest(dir);
  await say('verify', 'sizes and SHA-256 of every file');
  const bad = await verifyBackup(dir, m);
  if (bad.length) throw new BackupError(`the backup is damaged: ${bad.join('; ')}`);

  const redis = createRedis(cfg.redisUrl);
  const pool = createPool(cfg.databaseUrl, 2, 'fleet-restore');
  const nc = await connectNats(cfg.natsUrl, 'fleet-restore');
  const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase, user: cfg.clickhouseUser, password: cfg.clickhousePassword });
  const progressKey = redisKeys(cfg.redisPrefix, redis).restoreProgress(m.backup_id);
  const result: RestoreResult = { backupId: m.backup_id, done: [], skipped: [], messages: {}, rows: {}, heartbeats: 0 };
  try {
    const doneBefore = await redis.hgetall(progressKey);
    if (Object.keys(doneBefore).length === 0 && !o.force) {
      const there = await targetContents(pool, ch, nc, cfg);
      if (there.length) throw new BackupError(`the target is not empty (${there.join('; ')}); restore into a fresh stack, or replace it with --force`);
    }
    const step = async (name: string, fn: () => Promise<void>) => {
      if (doneBefore[name]) {
        result.skipped.push(name);
        return;
      }
      await say(name);
      await fn();
      await redis.hset(progressKey, name, new Date().toISOString());
      await redis.expire(progressKey, 30 * 86_400);
      result.done.push(name);
    };

    await step('postgres', async () => {
      await resetSchema(pool);
      await run(pgProgram('pg_restore'), ['--no-owner', '--no-privileges', '--exit-on-error', `--dbname=${pgEnv(cfg.databaseUrl).PGDATABASE}`, join(dir, m.postgres.file)], pgEnv(cfg.databaseUrl));
      // A backup of an older version: its schema brought up to this one's.
      await migrate(cfg);
    });
    await step('heartbeats', async () => {
      result.heartbeats = await foldHeartbeats(pool, join(dir, m.heartbeats.file), Date.parse(m.cutoff.at));
      // The restored Redis holds no silence times (workers/light-sweep.ts), and the stored recheck
      // time of a green or yellow instance comes Postgres's possible lag after its deadline: every
      // one is judged by the first sweep, from the heartbeats just written (each then gets its
      // silence time in Redis, so one that never reports again turns red at its deadline).
      await pool.query(recheckNowSql(`SELECT instance_id FROM instance_lights WHERE light IN ('green', 'yellow')`));
    });
    await migrate(cfg); // ClickHouse's tables (and Postgres's, when the step above was done before)
    for (const [table, e] of Object.entries(m.clickhouse)) {
      await step(`clickhouse ${table}`, async () => {
        for (const p of (await listPartitions(ch, { database: cfg.clickhouseDatabase, cluster: cfg.clickhouseCluster })).filter((x) => x.table === table)) {
          await ch.command({ query: dropPartitionSql(p, { database: cfg.clickhouseDatabase, cluster: cfg.clickhouseCluster }) });
        }
        result.rows[table] = await importTable(ch, table, e.columns, join(dir, e.file));
        if (result.rows[table] !== e.rows) throw new BackupError(`clickhouse ${table}: ${result.rows[table]} rows read from ${e.file}, the manifest says ${e.rows}`);
      });
    }

    const jsm = await nc.jetstreamManager({ timeout: 20_000 });
    const js = nc.jetstream();
    await ensureStreams(jsm, cfg);
    await ArtifactStore.open(nc, cfg);
    const others = streamNames(cfg.streamName);
    const srcBucket = bucketNames(m.source.stream_name).objects;
    const dstBucket = bucketNames(cfg.streamName).objects;
    // Each ingest stream of the backup into the stream of the same partition and lane in the
    // target, made there if its STREAM_PARTITIONS has no such partition: the target's workers
    // consume every ingest stream that exists (docs/architecture.md "Partitions"), so a backlog
    // of a stack with more partitions, or fewer, is applied all the same.
    const ingestRoles = Object.keys(m.streams)
      .filter((role) => ingestRoleStream(cfg.streamName, cfg.subjectPrefix, role))
      .sort();
    for (const role of [...ingestRoles, ...STREAM_ROLES]) {
      const e = m.streams[role];
      if (!e) throw new BackupError(`the manifest lists no stream ${role}`);
      const ingest = ingestRoleStream(cfg.streamName, cfg.subjectPrefix, role);
      const target = ingest ? ingest.stream : others[role as StreamRole];
      const from = subjectPrefix(m.source.stream_name, m.source.subject_prefix, role);
      const to = subjectPrefix(cfg.streamName, cfg.subjectPrefix, role);
      await step(`stream ${role}`, async () => {
        if (ingest) await ensureIngestPartition(jsm, cfg, ingest.partition);
        await jsm.streams.purge(target);
        const map = (s: string) => (s.startsWith(from) ? to + s.slice(from.length) : s);
        // An object's metadata names its bucket.
        const data = (subject: string, d: Uint8Array) => {
          if (role !== 'artifacts' || srcBucket === dstBucket || !subject.startsWith(`$O.${dstBucket}.M.`)) return d;
          const info = JSON.parse(Buffer.from(d).toString('utf8')) as { bucket?: string };
          info.bucket = dstBucket;
          return Buffer.from(JSON.stringify(info));
        };
        const n = await publishStreamFile(js, join(dir, e.file), map, data);
        result.messages[role] = n;
        if (n !== e.messages) throw new BackupError(`stream ${role}: ${n} messages published from ${e.file}, the manifest says ${e.messages}`);
      });
    }
    await redis.hset(progressKey, 'finished', new Date().toISOString());
    return result;
  } finally {
    await nc.close();
    redis.disconnect();
    await pool.end();
    await ch.close();
  }
}

/** The target's schema `public`, emptied: pg_restore then makes every object of the dump. */
async function resetSchema(pool: Pool): Promise<void> {
  await withTx(pool, async (c) => {
    await c.query('DROP SCHEMA IF EXISTS public CASCADE');
    await c.query('CREATE SCHEMA public');
  });
}

/**
 * Writes each saved heartbeat received before the cut-off into the restored Postgres with the
 * flusher's newest-wins rules. Such a heartbeat waited in Redis because it changed nothing (its
 * instance was not silent, its fields the same), so it cannot change a colour: like the flusher's,
 * this write leaves the lights alone. A later one is not promised, and could be a silent
 * instance's first heartbeat again, whose change of colour only the workers record.
 */
async function foldHeartbeats(pool: Pool, file: string, cutoffMs: number): Promise<number> {
  const batch: [string, string, HeartbeatFields][] = [];
  let n = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    const ids = batch.map((b) => b[0]);
    const fields = batch.map((b) => b[2]);
    const written = await withTx(pool, async (c) => {
      await lockInstances(c, ids);
      return writeHeartbeats(c, ids, fields);
    });
    const known = new Set(written.map((w) => w.id));
    const latest = new Map<string, number>();
    for (const [id, mid, f] of batch) if (known.has(id)) latest.set(mid, Math.max(latest.get(mid) ?? 0, f.at));
    await advanceMachinesLastSeen(pool, [...latest.keys()], [...latest.values()]);
    n += written.length;
    batch.length = 0;
  };
  let rest = '';
  for await (const chunk of createReadStream(file).pipe(createGunzip())) {
    const lines = (rest + (chunk as Buffer).toString('utf8')).split('\n');
    rest = lines.pop()!;
    for (const line of lines) {
      if (!line) continue;
      const [id, mid, json] = JSON.parse(line) as [string, string, string];
      const f = decodeFields(json);
      if (f && f.at <= cutoffMs) batch.push([id, mid, f]);
      if (batch.length >= 1000) await flush();
    }
  }
  await flush();
  return n;
}

async function importTable(ch: ClickHouseClient, table: string, columns: string[], file: string): Promise<number> {
  const count = lineCounter();
  const source = createReadStream(file).pipe(createGunzip()).pipe(count);
  const r = await ch.exec({ query: `INSERT INTO ${chIdent(table)} (${columns.map(chIdent).join(', ')}) FORMAT TabSeparated`, values: source });
  for await (const _ of r.stream) {
    /* the answer is empty; read to its end so the connection is free again */
  }
  return count.lines;
}
