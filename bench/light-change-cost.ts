// What recording one change of colour costs in Postgres, and which part of it (issue 26: 100,000
// instances falling silent together must all be red within 2 s, and one worker records about 7,000
// changes/s: bench/README.md "Traffic light at scale"). On a database of its own, seeded by SQL with
// N green instances whose deadline has passed, it runs what the expiry listener and the sweep run
// for a batch (lib/store/instances.ts `lockFreeInstances`, then lib/store/light-events.ts
// `TRANSITION_SQL`, then the delivered rows' `deleteFromOutbox`), each batch in a transaction of
// its own, over all N, then puts the seed back, for each variant:
//   shipped           the schema as migrated;
//   no-colour-indexes without the indexes whose predicate names the colour (the sweep's candidates),
//                     so that a change of colour can be a HOT update;
//   no-outbox         the statement without its outbox row (and so nothing to delete);
//   narrow            a sketch of the next step (not the schema): the stored colour and the times
//                     the statement keeps (light, light_since, light_reason, light_seq,
//                     light_judged_at, deadline, late_at, maintenance_until) in a table of their
//                     own with only its primary key (`light_state`, fillfactor 70), the statement
//                     reading instances joined to it (a view) and updating it, its rows the ones
//                     locked; with and without the outbox row;
// each once with the table as written (fillfactor 100: pages full) and once rewritten with room on
// each page (fillfactor 70), which a HOT update also needs. Prints one JSON object on stdout.
//
//   node dist/bench/light-change-cost.js [--instances 100000] [--batch 5000] [--explain]
//
// --explain: first the plan of one batch as shipped (EXPLAIN ANALYZE, on stderr).
// --set name=value: a Postgres setting for its sessions (repeatable), e.g. random_page_cost=1.1.
//
// Runs against the servers of the usual environment (DATABASE_URL, CLICKHOUSE_URL: migrate() makes
// both databases; lib/infra/config.ts) and drops its databases afterwards.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { loadConfig } from '../lib/infra/config.js';
import { serverAdmin } from './fixtures.js';
import { createPool, type PoolClient } from '../lib/infra/postgres.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { migrate } from '../lib/store/migrate.js';
import { createCustomer } from '../lib/store/customers.js';
import { lockFreeInstances } from '../lib/store/instances.js';
import { TRANSITION_SQL, deleteFromOutbox } from '../lib/store/light-events.js';
import type { LightEvent } from '../lib/domain/traffic-light.js';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(process.argv[i + 1]);
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} needs a positive whole number`);
  return v;
}
const N = arg('instances', 100_000);
const BATCH = arg('batch', 5000);
/** `--set name=value` (repeatable): a Postgres setting for the bench's sessions, e.g. random_page_cost=1.1. */
const SETTINGS = process.argv.flatMap((a, i) => (process.argv[i - 1] === '--set' ? [a] : [])).map((kv) => {
  const m = /^([a-z_]+)=([\w.]+)$/.exec(kv);
  if (!m) throw new Error(`--set ${kv}: expected name=value`);
  return `SET ${m[1]} = '${m[2]}'`;
});
const say = (msg: string) => process.stderr.write(`[bench light-change-cost] ${msg}\n`);

const NO_OUTBOX_SQL = TRANSITION_SQL.replace(/INSERT INTO light_outbox \([^)]*\)\s*SELECT/, 'SELECT').replace(/\s+RETURNING [\w, ]+$/, '');
if (NO_OUTBOX_SQL === TRANSITION_SQL || /light_outbox/.test(NO_OUTBOX_SQL)) throw new Error('the recording statement changed shape: update bench/light-change-cost.ts');

/** The columns the recording statement writes: in the narrow sketch, the table `light_state`. */
const LIGHT_COLUMNS = ['light', 'light_since', 'light_reason', 'light_seq', 'light_judged_at', 'deadline', 'late_at', 'maintenance_until'];
/** The statement reading `light_state_v` (instances with the narrow table's columns) and updating `light_state`. */
const narrowSql = (sql: string) => {
  const out = sql.replace('JOIN instances i ON i.id = k.id', 'JOIN light_state_v i ON i.id = k.id').replace('UPDATE instances i', 'UPDATE light_state i');
  if (out === sql || /\binstances i\b/.test(out)) throw new Error('the recording statement changed shape: update bench/light-change-cost.ts (narrow)');
  return out;
};
const NARROW_SQL = narrowSql(TRANSITION_SQL);
const NARROW_NO_OUTBOX_SQL = narrowSql(NO_OUTBOX_SQL);

/** The narrow sketch's table (only its primary key) and the view the statement reads, from the seeded instances. */
async function createNarrow(c: PoolClient): Promise<void> {
  const cols = (await c.query<{ column_name: string }>(`SELECT column_name FROM information_schema.columns WHERE table_name = 'instances' ORDER BY ordinal_position`)).rows.map((r) => r.column_name);
  const rest = cols.filter((x) => !LIGHT_COLUMNS.includes(x));
  await c.query(`CREATE TABLE light_state WITH (fillfactor = 70) AS SELECT id, ${LIGHT_COLUMNS.join(', ')} FROM instances`);
  await c.query('ALTER TABLE light_state ADD PRIMARY KEY (id)');
  await c.query(`CREATE VIEW light_state_v AS SELECT ${rest.map((x) => `i.${x}`).join(', ')}, ${LIGHT_COLUMNS.map((x) => `s.${x}`).join(', ')} FROM instances i JOIN light_state s ON s.id = i.id`);
  await c.query('ANALYZE light_state');
}

interface Part {
  lock_ms: number;
  record_ms: number;
  outbox_delete_ms: number;
}
interface Variant {
  changes: number;
  us_per_change: number;
  changes_per_s: number;
  parts_us_per_change: { lock: number; record: number; outbox_delete: number };
  hot_updates_share: number;
  batch_ms_max: number;
}

async function runVariant(c: PoolClient, ids: string[], opts: { dropColourIndexes: boolean; outbox: boolean; narrow?: boolean }): Promise<Variant> {
  const dropped: string[] = [];
  if (opts.dropColourIndexes) {
    const idx = await c.query<{ indexname: string; indexdef: string }>(`SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'instances' AND indexdef ~ 'WHERE .*\\mlight\\M'`);
    for (const r of idx.rows) {
      await c.query(`DROP INDEX ${pg.escapeIdentifier(r.indexname)}`);
      dropped.push(r.indexdef);
    }
  }
  try {
    const total: Part = { lock_ms: 0, record_ms: 0, outbox_delete_ms: 0 };
    let changes = 0;
    let batchMax = 0;
    let updates = 0;
    let hot = 0;
    // Each batch in a transaction of its own, as the listener and the sweep run them: the row
    // versions a committed batch left behind can be pruned to make room for the next (HOT).
    for (let i = 0; i < ids.length; i += BATCH) {
      const chunk = ids.slice(i, i + BATCH);
      const t0 = performance.now();
      await c.query('BEGIN');
      const locked = opts.narrow
        ? (await c.query<{ id: string }>(`SELECT id FROM light_state WHERE id = ANY($1::uuid[]) FOR UPDATE SKIP LOCKED`, [chunk])).rows.map((x) => x.id)
        : await lockFreeInstances(c, chunk);
      const t1 = performance.now();
      const text = opts.narrow ? (opts.outbox ? NARROW_SQL : NARROW_NO_OUTBOX_SQL) : opts.outbox ? TRANSITION_SQL : NO_OUTBOX_SQL;
      const r = await c.query<{ instance_id: string; seq: string }>({ text, values: [locked, 3600, 'sweep', Date.now()] });
      const t2 = performance.now();
      const changed = r.rows; // both forms return the changed rows only (`WHERE changed`)
      if (opts.outbox) await deleteFromOutbox(c, changed.map((x) => ({ instance_id: x.instance_id, seq: Number(x.seq) }) as LightEvent));
      const st = await hotStats(c, opts.narrow ? 'light_state' : 'instances');
      const t3 = performance.now();
      await c.query('COMMIT');
      const t4 = performance.now();
      total.lock_ms += t1 - t0;
      total.record_ms += t2 - t1 + (t4 - t3);
      total.outbox_delete_ms += t3 - t2;
      batchMax = Math.max(batchMax, t4 - t0);
      changes += changed.length;
      updates += st.upd;
      hot += st.hot;
    }
    if (changes !== ids.length) throw new Error(`${changes} of ${ids.length} instances changed colour: the seed is not what the statement judges red`);
    const all = total.lock_ms + total.record_ms + total.outbox_delete_ms;
    const per = (ms: number) => Math.round((ms * 1000) / Math.max(1, changes));
    return {
      changes,
      us_per_change: per(all),
      changes_per_s: Math.round(changes / (all / 1000)),
      parts_us_per_change: { lock: per(total.lock_ms), record: per(total.record_ms), outbox_delete: per(total.outbox_delete_ms) },
      hot_updates_share: updates > 0 ? Math.round((hot / updates) * 1000) / 1000 : 0,
      batch_ms_max: Math.round(batchMax),
    };
  } finally {
    await reset(c, opts.narrow === true);
    for (const def of dropped) await c.query(def);
  }
}

/** Back to the seed: every instance green again, the outbox empty, the table rewritten compactly (at its fillfactor). */
async function reset(c: PoolClient, narrow = false): Promise<void> {
  const table = narrow ? 'light_state' : 'instances';
  await c.query(`UPDATE ${table} SET light = 'green', light_seq = 0, light_since = now() - interval '1 day', light_reason = NULL,
                        light_judged_at = now() - interval '10 minutes' WHERE light <> 'green'`);
  await c.query('DELETE FROM light_outbox');
  await c.query(`VACUUM FULL ${table}`);
  await c.query(`ANALYZE ${table}`);
}

/** The transaction's own counts of updates and HOT updates of `table` so far. */
async function hotStats(c: PoolClient, table: string): Promise<{ upd: number; hot: number }> {
  const r = await c.query<{ upd: string; hot: string }>(`SELECT n_tup_upd AS upd, n_tup_hot_upd AS hot FROM pg_stat_xact_user_tables WHERE relname = $1`, [table]);
  return { upd: Number(r.rows[0]?.upd ?? 0), hot: Number(r.rows[0]?.hot ?? 0) };
}

async function main(): Promise<void> {
  const cfg = loadConfig();
  const id = `blc${randomBytes(3).toString('hex')}`;
  const dbUrl = new URL(cfg.databaseUrl);
  dbUrl.pathname = `/${id}`;
  const admin = serverAdmin(cfg.databaseUrl);
  await admin(`CREATE DATABASE "${id}"`);
  const pool = createPool(dbUrl.toString(), 2, 'fleet-bench');
  try {
    await migrate({ databaseUrl: dbUrl.toString(), clickhouseUrl: cfg.clickhouseUrl, clickhouseDatabase: id, clickhouseUser: cfg.clickhouseUser, clickhousePassword: cfg.clickhousePassword });
    const customer = await createCustomer(pool, `bench-${id}`);
    await pool.query(`UPDATE licences SET tier = 'paid', device_limit = 10000000 WHERE customer_id = $1`, [customer.id]);
    say(`seeding ${N} green instances whose deadline has passed`);
    await pool.query(
      `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
       SELECT $1, 'm' || lpad(g::text, 7, '0'), now() - interval '1 day', now() - interval '10 minutes' FROM generate_series(0, $2::int - 1) g`,
      [customer.id, N],
    );
    await pool.query(
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, version, status, status_at, light, light_since, light_judged_at,
                              deadline, late_at)
       SELECT customer_id, id, 'agent', now() - interval '1 day', now() - interval '10 minutes', now() - interval '10 minutes', '1.0', 'running',
              now() - interval '1 day', 'green', now() - interval '1 day', now() - interval '10 minutes',
              light_deadline(now() - interval '10 minutes', NULL), light_late_at(now() - interval '10 minutes', NULL, NULL)
         FROM machines WHERE customer_id = $1`,
      [customer.id],
    );
    await pool.query('ANALYZE instances; ANALYZE machines');
    const ids = (await pool.query<{ id: string }>('SELECT id FROM instances WHERE customer_id = $1 ORDER BY deadline, id', [customer.id])).rows.map((r) => r.id);
    if (ids.length !== N) throw new Error(`seeded ${ids.length} instances, not ${N}`);
    if (process.argv.includes('--explain')) {
      // The plan of one batch as shipped, with the time of each step (stderr), rolled back.
      const c = await pool.connect();
      try {
        await c.query('SET jit = off');
        for (const q of SETTINGS) await c.query(q);
        await c.query('BEGIN');
        const plan = await c.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN (ANALYZE, BUFFERS) ${TRANSITION_SQL}`, values: [ids.slice(0, BATCH), 3600, 'sweep', Date.now()] });
        say(`plan of one batch of ${BATCH}:\n${plan.rows.map((r) => r['QUERY PLAN']).join('\n')}`);
      } finally {
        await c.query('ROLLBACK');
        c.release();
      }
    }
    const results: Record<string, Record<string, Variant>> = {};
    const c = await pool.connect();
    try {
      await c.query('SET jit = off');
      for (const q of SETTINGS) await c.query(q);
      await createNarrow(c);
      for (const fillfactor of [100, 70]) {
        if (fillfactor !== 100) {
          say(`rewriting instances with fillfactor ${fillfactor}`);
          await c.query(`ALTER TABLE instances SET (fillfactor = ${fillfactor})`);
          await reset(c);
        }
        const row: Record<string, Variant> = {};
        for (const [name, opts] of [
          ['shipped', { dropColourIndexes: false, outbox: true }],
          ['no-colour-indexes', { dropColourIndexes: true, outbox: true }],
          ['no-outbox', { dropColourIndexes: false, outbox: false }],
          ['no-colour-indexes-no-outbox', { dropColourIndexes: true, outbox: false }],
          // light_state is at fillfactor 70 in both rows: the fillfactor of the row is that of instances.
          ['narrow', { dropColourIndexes: false, outbox: true, narrow: true }],
          ['narrow-no-outbox', { dropColourIndexes: false, outbox: false, narrow: true }],
        ] as const) {
          // A first pass warms the caches and the plan; the second is the one kept. Each pass
          // ends by putting the seed back (reset).
          await runVariant(c, ids, opts);
          row[name] = await runVariant(c, ids, opts);
          say(`fillfactor ${fillfactor}, ${name}: ${JSON.stringify(row[name])}`);
        }
        results[`fillfactor_${fillfactor}`] = row;
      }
    } finally {
      c.release();
    }
    process.stdout.write(`${JSON.stringify({ instances: N, batch: BATCH, settings: SETTINGS, postgres: (await pool.query<{ v: string }>('SHOW server_version')).rows[0]!.v, results }, null, 2)}\n`);
  } finally {
    await pool.end();
    await admin(`DROP DATABASE IF EXISTS "${id}" WITH (FORCE)`);
    // migrate() made the ClickHouse database too; nothing here uses it.
    const ch = createClickHouse({ url: cfg.clickhouseUrl, database: 'default', user: cfg.clickhouseUser, password: cfg.clickhousePassword });
    await ch.command({ query: `DROP DATABASE IF EXISTS ${id}` }).catch(() => {});
    await ch.close();
  }
}

await main();
