// What recording one change of colour costs in Postgres, and which part of it (issue 26: 100,000
// instances falling silent together must all be red within 2 s: bench/README.md "What one change
// of colour costs"). On a database of its own, seeded by SQL with N green instances whose deadline
// has passed, it runs what the expiry listener and the sweep run for a batch
// (lib/store/instances.ts `lockFreeInstances`, then lib/store/light-events.ts `TRANSITION_SQL`,
// then the delivered rows' `deleteFromOutbox`), each batch in a transaction of its own, over all
// N, then puts the seed back, for each variant:
//   shipped           the schema as migrated: the stored colour in `instance_lights` (migration
//                     0023-instance-lights);
//   no-outbox         the statement without its outbox row (and so nothing to delete).
// (Runs before 0023 also measured the colour in `instances` and a sketch of the narrow table:
// bench/results/light-change-cost*.json, with the code of their commits.) Prints one JSON object on
// stdout.
//
//   node dist/bench/light-change-cost.js [--instances 100000] [--batch 5000] [--explain]
//
// --explain: first the plan of one batch as shipped (EXPLAIN ANALYZE, on stderr).
// Each batch is planned with TRANSITION_PLANNING, as the listener and the sweep plan it.
// --set name=value: another Postgres setting for its sessions (repeatable).
//
// Runs against the servers of the usual environment (DATABASE_URL, CLICKHOUSE_URL: migrate() makes
// both databases; lib/infra/config.ts) and drops its databases afterwards.
import { randomBytes, randomUUID } from 'node:crypto';
import { loadConfig } from '../lib/infra/config.js';
import { serverAdmin } from './fixtures.js';
import { createPool, type PoolClient } from '../lib/infra/postgres.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { migrate } from '../lib/store/migrate.js';
import { createCustomer } from '../lib/store/customers.js';
import { lockFreeInstances } from '../lib/store/instances.js';
import { TRANSITION_PLANNING, TRANSITION_SQL, deleteFromOutbox } from '../lib/store/light-events.js';
import { countArg } from './args.js';

const N = countArg('instances', 100_000);
const BATCH = countArg('batch', 5000);
/** `--set name=value` (repeatable): a Postgres setting for the bench's sessions, e.g. random_page_cost=1.1. */
const SETTINGS = process.argv.flatMap((a, i) => (process.argv[i - 1] === '--set' ? [a] : [])).map((kv) => {
  const m = /^([a-z_]+)=([\w.]+)$/.exec(kv);
  if (!m) throw new Error(`--set ${kv}: expected name=value`);
  return `SET ${m[1]} = '${m[2]}'`;
});
const say = (msg: string) => process.stderr.write(`[bench light-change-cost] ${msg}\n`);

// (The recording's id, $6, stays a parameter of it, unused, so that both forms take the same values.)
const NO_OUTBOX_SQL = TRANSITION_SQL.replace(/\), ob AS \(\s*INSERT INTO light_outbox[\s\S]*?GROUP BY customer_id\s*\)/, '), ob AS (SELECT $6::uuid AS recording)');
if (NO_OUTBOX_SQL === TRANSITION_SQL || /light_outbox/.test(NO_OUTBOX_SQL)) throw new Error('the recording statement changed shape: update bench/light-change-cost.ts');

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

async function runVariant(c: PoolClient, ids: string[], opts: { outbox: boolean }): Promise<Variant> {
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
      const locked = await lockFreeInstances(c, chunk);
      await c.query(TRANSITION_PLANNING.set); // as the listener and the sweep plan it (recordLightChanges)
      const t1 = performance.now();
      const text = opts.outbox ? TRANSITION_SQL : NO_OUTBOX_SQL;
      const recording = randomUUID();
      const r = await c.query<{ instance_id: string; customer_id: string }>({ text, values: [locked, 3600, 'sweep', Date.now(), 0, recording, []] });
      const t2 = performance.now();
      const changed = r.rows; // both forms return the changed rows only (`WHERE changed`)
      if (opts.outbox) await deleteFromOutbox(c, [...new Set(changed.map((x) => x.customer_id))].map((customer_id) => ({ recording, customer_id })));
      const st = await hotStats(c, 'instance_lights');
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
    await reset(c);
  }
}

/** Back to the seed: every instance green again and due, the outbox empty, the table rewritten compactly (at its fillfactor). */
async function reset(c: PoolClient): Promise<void> {
  await c.query(`UPDATE instance_lights l SET light = 'green', light_seq = 0, light_since = now() - interval '1 day', light_reason = NULL,
                        light_judged_at = now() - interval '10 minutes', recheck_at = i.deadline
                   FROM instances i WHERE i.id = l.instance_id AND l.light <> 'green'`);
  await c.query('DELETE FROM light_outbox');
  await c.query('VACUUM FULL instance_lights');
  await c.query('ANALYZE instance_lights');
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
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, version, status, status_at, deadline, late_at)
       SELECT customer_id, id, 'agent', now() - interval '1 day', now() - interval '10 minutes', now() - interval '10 minutes', '1.0', 'running',
              now() - interval '1 day', light_deadline(now() - interval '10 minutes', NULL), light_late_at(now() - interval '10 minutes', NULL, NULL)
         FROM machines WHERE customer_id = $1`,
      [customer.id],
    );
    await pool.query(
      `UPDATE instance_lights l SET light = 'green', light_since = now() - interval '1 day', light_judged_at = now() - interval '10 minutes', recheck_at = i.deadline
         FROM instances i WHERE i.id = l.instance_id AND i.customer_id = $1`,
      [customer.id],
    );
    await pool.query('VACUUM FULL instance_lights');
    await pool.query('ANALYZE instances; ANALYZE machines; ANALYZE instance_lights');
    // In no order of their ids (a fleet falls silent in any order), the same order every run.
    const ids = (await pool.query<{ id: string }>('SELECT id FROM instances WHERE customer_id = $1 ORDER BY md5(id::text)', [customer.id])).rows.map((r) => r.id);
    if (ids.length !== N) throw new Error(`seeded ${ids.length} instances, not ${N}`);
    if (process.argv.includes('--explain')) {
      // The plan of one batch as shipped, with the time of each step (stderr), rolled back.
      const c = await pool.connect();
      try {
        await c.query('SET jit = off');
        for (const q of SETTINGS) await c.query(q);
        await c.query('BEGIN');
        await c.query(TRANSITION_PLANNING.set);
        const plan = await c.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN (ANALYZE, BUFFERS) ${TRANSITION_SQL}`, values: [ids.slice(0, BATCH), 3600, 'sweep', Date.now(), 0, randomUUID(), []] });
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
      const row: Record<string, Variant> = {};
      for (const [name, opts] of [
        ['shipped', { outbox: true }],
        ['no-outbox', { outbox: false }],
      ] as const) {
        // A first pass warms the caches and the plan; the second is the one kept. Each pass
        // ends by putting the seed back (reset).
        await runVariant(c, ids, opts);
        row[name] = await runVariant(c, ids, opts);
        say(`${name}: ${JSON.stringify(row[name])}`);
      }
      results.instance_lights_fillfactor_70 = row;
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
