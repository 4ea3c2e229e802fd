// How long migration 0023-instance-lights (lib/store/schema.ts) holds `instances` on a large
// fleet. It runs in one transaction, as `fleet migrate` runs every migration: from its first
// statement (CREATE TABLE … REFERENCES instances) no ingest write to `instances` goes through, and
// from its first DROP INDEX no read either, until the commit. On a database of its own, seeded by
// SQL with N instances stored the way the code before 0023 stored them (the colour in
// `instances`: 80 % green, 10 % red, 5 % yellow, 5 % grey; heartbeats spread over the last 10
// minutes), it applies the migration statement by statement and times each; then, the same way,
// 0024-lights-by-customer (it writes every row of `instance_lights`, so no colour can be recorded,
// and so no ingest batch commits, until it commits). Prints one JSON object on stdout; drops its
// database afterwards.
//
//   node dist/bench/upgrade-lights.js [--instances 1000000]
//
// Runs against the Postgres of the usual environment (DATABASE_URL; lib/infra/config.ts).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { loadConfig } from '../lib/infra/config.js';
import { serverAdmin } from './fixtures.js';
import { migratePostgresBefore } from '../lib/store/migrate.js';
import { postgresMigrations } from '../lib/store/schema.js';
import { countArg } from './args.js';

const N = countArg('instances', 1_000_000);
const say = (msg: string) => process.stderr.write(`[bench upgrade-lights] ${msg}\n`);

const cfg = loadConfig();
const id = `bench_upgrade_${randomBytes(3).toString('hex')}`;
const dbUrl = new URL(cfg.databaseUrl);
dbUrl.pathname = `/${id}`;
const admin = serverAdmin(cfg.databaseUrl);
await admin(`CREATE DATABASE "${id}"`);
const db = new pg.Client({ connectionString: dbUrl.toString() });
await db.connect();
try {
  const m = await migratePostgresBefore(db, '0023-instance-lights');
  const t0 = Date.now();
  const customer = (await db.query<{ id: string }>(`INSERT INTO customers (slug, name) VALUES ('up', 'up') RETURNING id`)).rows[0]!.id;
  await db.query(`UPDATE licences SET tier = 'paid', device_limit = $2 WHERE customer_id = $1`, [customer, N]);
  await db.query(
    `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
     SELECT $1, 'm' || g, now() - interval '1 day', now() FROM generate_series(1, $2::int) g`,
    [customer, N],
  );
  // g % 20: 0-15 green, 16-17 red (silent for an hour), 18 yellow (a warning 30 s ago), 19 grey.
  await db.query(
    `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, status, status_at, last_warning_at,
                            deadline, late_at, light, light_since, light_reason, light_seq, light_judged_at)
     SELECT customer_id, id, 'agent', now() - interval '1 day', now(), hb, 'running', hb, CASE WHEN g % 20 = 18 THEN now() - interval '30 s' END,
            light_deadline(hb, NULL), light_late_at(hb, NULL, NULL),
            CASE WHEN g % 20 < 16 THEN 'green' WHEN g % 20 < 18 THEN 'red' WHEN g % 20 = 18 THEN 'yellow' ELSE 'grey' END,
            now() - interval '1 hour', 'as stored', 3, now() - interval '1 s'
       FROM (SELECT customer_id, id, substr(slug, 2)::int AS g FROM machines) m,
            LATERAL (SELECT CASE WHEN g % 20 = 19 THEN NULL
                                 WHEN g % 20 IN (16, 17) THEN now() - interval '1 hour'
                                 ELSE now() - (g % 600) * interval '1 s' END AS hb) h`,
  );
  await db.query('VACUUM ANALYZE instances');
  await db.query('VACUUM ANALYZE machines');
  const seedMs = Date.now() - t0;
  const size = (await db.query<{ b: string }>(`SELECT pg_total_relation_size('instances')::text AS b`)).rows[0]!.b;
  say(`${N} instances seeded in ${seedMs} ms (instances with its indexes: ${Math.round(Number(size) / 1024 / 1024)} MiB)`);

  /** Applies one migration in one transaction, statement by statement: the time of each. */
  const timed = async (sqls: string[]) => {
    const steps: { sql: string; ms: number }[] = [];
    await db.query('BEGIN');
    for (const sql of sqls) {
      const s0 = Date.now();
      await db.query(sql);
      steps.push({ sql: sql.replace(/\s+/g, ' ').trim().slice(0, 60), ms: Date.now() - s0 });
    }
    const c0 = Date.now();
    await db.query('COMMIT');
    steps.push({ sql: 'COMMIT', ms: Date.now() - c0 });
    return steps;
  };
  const start = Date.now();
  const steps = await timed(m.sql);
  const totalMs = Date.now() - start;
  const byCustomer = postgresMigrations.find((x) => x.id === '0024-lights-by-customer')!;
  const b0 = Date.now();
  const byCustomerSteps = await timed(byCustomer.sql);
  const byCustomerMs = Date.now() - b0;
  const firstDrop = steps.findIndex((s) => s.sql.startsWith('DROP INDEX'));
  const readsBlockedMs = steps.slice(firstDrop).reduce((a, s) => a + s.ms, 0);
  const rows = (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM instance_lights')).rows[0]!.n;
  if (rows !== N) throw new Error(`instance_lights holds ${rows} rows, expected ${N}`);
  say(`migration: ${totalMs} ms with ingest writes to instances blocked, of which ${readsBlockedMs} ms with reads blocked too`);
  say(`0024-lights-by-customer: ${byCustomerMs} ms with every recording of a colour (so every ingest batch) blocked`);
  process.stdout.write(
    JSON.stringify({
      bench: 'upgrade-lights',
      at: new Date().toISOString(),
      instances: N,
      instances_mib: Math.round(Number(size) / 1024 / 1024),
      writes_blocked_ms: totalMs,
      reads_blocked_ms: readsBlockedMs,
      steps,
      lights_by_customer_ms: byCustomerMs,
      lights_by_customer_steps: byCustomerSteps,
    }) + '\n',
  );
} finally {
  await db.end();
  await admin(`DROP DATABASE IF EXISTS "${id}" WITH (FORCE)`);
}
