// Applies lib/store/schema.ts to Postgres and ClickHouse. Safe to run from several processes at once:
// a Postgres advisory lock serialises them, and each migration is recorded once it is applied.
import { createClickHouse, chIdent } from '../infra/clickhouse.js';
import { clickhouseCode } from '../infra/storage-errors.js';
import { createPool } from '../infra/postgres.js';
import { postgresMigrations, clickhouseMigrationsFor } from './schema.js';
import { repartition, type RepartitionStop } from './repartition.js';

const LOCK_KEY = 7_401_133; // any constant; identifies "fleet migrations" among advisory locks

/** Where the applied Postgres migrations are recorded. */
const SCHEMA_MIGRATIONS_SQL = `CREATE TABLE IF NOT EXISTS schema_migrations (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`;

/**
 * Brings an empty Postgres database to the schema just before migration `id`, recorded as
 * `migrate` records it (so a later `migrate` applies `id` and what follows), and returns that
 * migration: how an upgrade is tested and timed on data stored the old way
 * (test/servers/light-upgrade.test.ts, bench/upgrade-lights.ts).
 */
export async function migratePostgresBefore(db: { query(sql: string, values?: unknown[]): Promise<unknown> }, id: string): Promise<(typeof postgresMigrations)[number]> {
  const at = postgresMigrations.findIndex((m) => m.id === id);
  if (at < 0) throw new Error(`no Postgres migration ${id}`);
  await db.query(SCHEMA_MIGRATIONS_SQL);
  for (const m of postgresMigrations.slice(0, at)) {
    for (const sql of m.sql) await db.query(sql);
    await db.query('INSERT INTO schema_migrations (id) VALUES ($1)', [m.id]);
  }
  return postgresMigrations[at]!;
}

export interface MigrateTarget {
  databaseUrl: string;
  clickhouseUrl: string;
  clickhouseDatabase: string;
  clickhouseUser?: string;
  clickhousePassword?: string;
  /** CLICKHOUSE_CLUSTER: replicated tables created ON CLUSTER (lib/store/schema.ts); empty: one server. */
  clickhouseCluster?: string;
  /** Tests: a step of a repartition to stop at (lib/store/repartition.ts). */
  repartition?: { stopAt?: RepartitionStop };
}

export async function migrate(t: MigrateTarget, log: (msg: string) => void = () => {}): Promise<string[]> {
  const applied: string[] = [];
  const pool = createPool(t.databaseUrl, 2, 'fleet-migrate');
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [LOCK_KEY]);
    await client.query(SCHEMA_MIGRATIONS_SQL);
    const done = new Set((await client.query<{ id: string }>('SELECT id FROM schema_migrations')).rows.map((r) => r.id));
    for (const m of postgresMigrations) {
      if (done.has(m.id)) continue;
      await client.query('BEGIN');
      try {
        for (const sql of m.sql) await client.query(sql);
        await client.query('INSERT INTO schema_migrations (id) VALUES ($1)', [m.id]);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK');
        throw new Error(`postgres migration ${m.id} failed: ${(e as Error).message}`);
      }
      applied.push(`postgres ${m.id}`);
      log(`postgres migration ${m.id} applied`);
    }

    // ClickHouse has no transactions; every statement is IF NOT EXISTS (or an ADD COLUMN whose
    // "already exists" is ignored), so a half-applied migration is simply applied again.
    const db = chIdent(t.clickhouseDatabase);
    const cluster = t.clickhouseCluster ? chIdent(t.clickhouseCluster) : '';
    const root = createClickHouse({ url: t.clickhouseUrl, user: t.clickhouseUser, password: t.clickhousePassword });
    try {
      await root.command({ query: cluster ? `CREATE DATABASE IF NOT EXISTS ${db} ON CLUSTER ${cluster}` : `CREATE DATABASE IF NOT EXISTS ${db}` });
    } finally {
      await root.close();
    }
    const ch = createClickHouse({ url: t.clickhouseUrl, database: db, user: t.clickhouseUser, password: t.clickhousePassword });
    // A repartition copies a month in one statement: hours for a large table, not 60 s.
    const copier = createClickHouse({ url: t.clickhouseUrl, database: db, user: t.clickhouseUser, password: t.clickhousePassword, requestTimeoutMs: 24 * 3_600_000 });
    try {
      // On a cluster the record of applied migrations is replicated too: any replica may be asked next time.
      await ch.command({
        query: cluster
          ? `CREATE TABLE IF NOT EXISTS ${db}.schema_migrations ON CLUSTER ${cluster} (id String, applied_at DateTime) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/${db}/schema_migrations', '{replica}') ORDER BY id`
          : `CREATE TABLE IF NOT EXISTS schema_migrations (id String, applied_at DateTime) ENGINE = Log`,
      });
      const rs = await ch.query({ query: 'SELECT id FROM schema_migrations', format: 'JSONEachRow' });
      const chDone = new Set(((await rs.json()) as { id: string }[]).map((r) => r.id));
      for (const m of clickhouseMigrationsFor({ cluster, database: db })) {
        if (chDone.has(m.id)) continue;
        for (const sql of m.sql) await ch.command({ query: sql }).catch((e) => tolerateDoneAlter(sql, e));
        for (const spec of m.repartition) {
          const r = await repartition(copier, pool, { cluster, database: db }, spec, { log, ...t.repartition });
          if (r.state === 'repartitioned') log(`clickhouse ${spec.table}: partitioned by ${spec.to} (months copied: ${r.copied.length})`);
        }
        await ch.insert({ table: 'schema_migrations', values: [{ id: m.id, applied_at: Math.floor(Date.now() / 1000) }], format: 'JSONEachRow' });
        applied.push(`clickhouse ${m.id}`);
        log(`clickhouse migration ${m.id} applied`);
      }
    } finally {
      await ch.close();
      await copier.close();
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => {});
    client.release();
    await pool.end();
  }
  return applied;
}

/**
 * ClickHouse 18.16 has no `ADD COLUMN IF NOT EXISTS`: a column added by an earlier, interrupted run
 * is fine (code 44). 18.16's error text has no `(NAME)` suffix, so the client never builds a
 * ClickHouseError there: the code is read from the text (`clickhouseCode`).
 */
function tolerateDoneAlter(sql: string, e: unknown): void {
  if (/^\s*ALTER TABLE\s+\S+\s+(ON CLUSTER\s+\S+\s+)?ADD COLUMN\b/i.test(sql) && clickhouseCode(e) === '44') return;
  throw e;
}
