// Data retention against the real servers (lib/store/retention.ts, run as the worker's job runs it:
// workers/retention.ts): rows and partitions with old timestamps, one run, and then exactly what is
// past its retention is gone, per table, and everything else is still there (live rows however
// old, rows just inside their retention, the ClickHouse month that holds the cutoff, tables kept
// forever); a second run removes nothing. Postgres is pruned two rows per statement here, so the
// chunks repeat.
import t from 'tap';
import { randomUUID, randomBytes } from 'node:crypto';
import { testStack, chRows } from '../helpers/stack.js';
import { loadConfig } from '../../lib/infra/config.js';
import { createLogger } from '../../lib/infra/log.js';
import { listPartitions, PG_RETENTION_TABLES, CH_RETENTION_TABLES, type ChRetentionTable } from '../../lib/store/retention.js';
import { stuckOutbox } from '../../lib/store/light-events.js';
import { runRetention, type RetentionDeps } from '../../workers/retention.js';

const s = await testStack(t, 'retention', { gateway: false, worker: false, api: false });
const pool = s.pool;
const defaults = loadConfig({}).retention;
const log = createLogger('retention-test', 'silent');

// ---- Postgres: every row is made `ago` days before the database's now.
const P = defaults.postgres;
const ago = (days: number) => `now() - make_interval(secs => ${days * 86_400})`;
const q = (sql: string, params: unknown[] = []) => pool.query(sql, params);
const hash = () => randomBytes(16).toString('hex');

const machine = (await q(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, 'm1', now(), now()) RETURNING id`, [s.customer.id])).rows[0].id;
const instance = (
  await q(`INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at) VALUES ($1, $2, 'agent', now(), now()) RETURNING id`, [s.customer.id, machine])
).rows[0].id;

/** A command in `state` whose last change was `days` ago, with one event per state in `events`. */
async function command(state: string, days: number, events: string[]): Promise<string> {
  const ended = !['queued', 'delivered'].includes(state);
  const id = (
    await q(
      `INSERT INTO commands (customer_id, instance_id, module, command, state, created_at, expires_at, finished_at, updated_at)
       VALUES ($1, $2, 'm', 'c', $3, ${ago(days + 1)}, ${ago(days)}, ${ended ? ago(days) : 'NULL'}, ${ago(days)}) RETURNING id`,
      [s.customer.id, instance, state],
    )
  ).rows[0].id;
  for (const e of events) await q(`INSERT INTO command_events (command_id, state, at) VALUES ($1, $2, ${ago(days)})`, [id, e]);
  return id;
}
// Past retention (90 days): five ended commands, two events each; five rows, two per chunk.
for (const st of ['succeeded', 'failed', 'expired', 'timed_out', 'cancelled']) await command(st, P.commands + 1, ['queued', st]);
// Kept: ended just inside the retention; open ones however old (the expiry sweep has not run yet).
const keptCommands = [
  await command('succeeded', P.commands - 1, ['queued', 'delivered', 'succeeded']),
  await command('queued', P.commands + 300, ['queued']),
  await command('delivered', P.commands + 300, ['queued', 'delivered']),
];

const webhook = (await q(`INSERT INTO webhooks (customer_id, url, secret) VALUES ($1, 'https://example.com/h', 's') RETURNING id`, [s.customer.id])).rows[0].id;
async function delivery(state: string, lastDays: number, next: string | null): Promise<void> {
  await q(
    `INSERT INTO webhook_deliveries (webhook_id, event_id, customer_id, instance_id, from_light, to_light, event_at, state, attempts,
                                     first_attempt_at, last_attempt_at, next_attempt_at)
     VALUES ($1, $2, $3, $4, 'green', 'red', ${ago(lastDays)}, $5, 1, ${ago(lastDays)}, ${ago(lastDays)}, ${next ?? 'NULL'})`,
    [webhook, randomUUID(), s.customer.id, instance, state],
  );
}
const W = P.webhook_deliveries;
await delivery('delivered', W + 1, null); // gone
await delivery('failed', W + 3, null); // gone
await delivery('retrying', W + 5, ago(W + 4)); // gone: its next attempt is past the retention too (the job was lost)
await delivery('delivered', W - 1, null); // kept: inside
await delivery('retrying', W + 2, "now() + interval '1 minute'"); // kept: live

const I = P.invitations;
async function invitation(customer: string, o: { created: number; expires: number; accepted?: number; revoked?: number }): Promise<string> {
  return (
    await q(
      `INSERT INTO invitations (customer_id, email, role, token_hash, created_at, expires_at, accepted_at, revoked_at)
       VALUES ($1, $2, 'viewer', $3, ${ago(o.created)}, ${ago(o.expires)}, ${o.accepted === undefined ? 'NULL' : ago(o.accepted)},
               ${o.revoked === undefined ? 'NULL' : ago(o.revoked)}) RETURNING id`,
      [customer, `${hash()}@example.com`, hash()],
    )
  ).rows[0].id;
}
const firstInvitation = await invitation(s.customer.id, { created: I + 200, expires: I + 190, revoked: I + 150 }); // kept: the customer's first
await invitation(s.customer.id, { created: I + 20, expires: I + 10, accepted: I + 1 }); // gone
await invitation(s.customer.id, { created: I + 20, expires: -5, revoked: I + 2 }); // gone: revoked, whatever its expiry
await invitation(s.customer.id, { created: I + 20, expires: I + 1 }); // gone: expired, never resent
await invitation(s.customer.id, { created: I + 20, expires: I - 1 }); // kept: expired inside the retention
await invitation(s.customer.id, { created: I + 50, expires: -1 }); // kept: open (resent, valid for another day)
const other = await s.newCustomer('other');
await invitation(other.customer.id, { created: I + 100, expires: I + 90, accepted: I + 80 }); // kept: that customer's first

const user = (await q(`INSERT INTO users (email, password_hash) VALUES ($1, 'x') RETURNING id`, [`${hash()}@example.com`])).rows[0].id;
const S = P.sessions;
async function session(o: { expires: number; revoked?: number }): Promise<void> {
  await q(`INSERT INTO sessions (user_id, created_at, expires_at, revoked_at) VALUES ($1, ${ago(Math.max(o.expires, 0) + 1)}, ${ago(o.expires)}, ${o.revoked === undefined ? 'NULL' : ago(o.revoked)})`, [
    user,
  ]);
}
await session({ expires: S + 1 }); // gone
await session({ expires: -30, revoked: S + 1 }); // gone: revoked, however long it would have been valid
await session({ expires: S - 1 }); // kept: inside
await session({ expires: -30, revoked: S - 1 }); // kept: inside
await session({ expires: -1 }); // kept: valid

const R = P.password_resets;
async function reset(o: { expires: number; used?: number }): Promise<void> {
  await q(`INSERT INTO password_resets (user_id, token_hash, created_at, expires_at, used_at) VALUES ($1, $2, ${ago(Math.max(o.expires, 0) + 1)}, ${ago(o.expires)}, ${o.used === undefined ? 'NULL' : ago(o.used)})`, [
    user,
    hash(),
  ]);
}
await reset({ expires: R + 2 }); // gone: expired unused
await reset({ expires: R + 1, used: R + 1 }); // gone: used
await reset({ expires: R - 1, used: R - 1 }); // kept: inside
await reset({ expires: -1 }); // kept: valid

// Never pruned by age: an undelivered change of colour, and an acknowledged conversion (its
// dedup key is the memory that the event happened).
await q(
  `INSERT INTO light_outbox (recording, customer_id, customer, cause, recorded_at, instance_ids, seqs, machine_ids, machines, softwares, from_lights, to_lights, reasons, ats)
   VALUES (gen_random_uuid(), $2, 'c', 'sweep', ${ago(400)}, ARRAY[$1::uuid], ARRAY[1::bigint], ARRAY[$3::uuid], ARRAY['m1'], ARRAY['agent'], ARRAY['green'],
           ARRAY['red'], ARRAY['silent'], ARRAY[${ago(400)}])`,
  [instance, s.customer.id, machine],
);
await q(`UPDATE conversions SET acked_at = ${ago(1000)}, created_at = ${ago(1000)} WHERE user_id = $1`, [user]);

const PG_COUNTED = [...PG_RETENTION_TABLES, 'command_events', 'light_outbox', 'conversions'] as const;
async function pgCounts(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const table of PG_COUNTED) out[table] = (await q(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n;
  return out;
}

// ---- ClickHouse: the run is judged at a fixed instant, so the months are known: 2026-06-20 12:00 UTC.
const NOW = Date.UTC(2026, 5, 20, 12);
/** Two rows in each month, mid-month (no time zone moves them to another month). */
const MONTHS = ['2025-01', '2026-04', '2026-05', '2026-06'];
// 30 days: the cutoff is 2026-05-21, so January 2025 and April 2026 are wholly past it; May 2026
// holds the cutoff (its first rows are older than 30 days, its last will not be) and stays where a
// table is partitioned by month; June is now. Heartbeats and rejections are partitioned by day
// (0006-day-partitions): their days 15 and 16 of May are past the cutoff's day and go.
// light_events 400 days: the cutoff is 2025-05-16, only January 2025 goes. host_metrics 0: forever.
const CH_DAYS: Record<ChRetentionTable, number> = {
  heartbeats: 30,
  diagnostics: 30,
  status_history: 30,
  ingest_rejections: 30,
  light_events: 400,
  host_metrics: 0,
};
const TIME_COLUMN: Record<ChRetentionTable, string> = {
  heartbeats: 'received_at',
  diagnostics: 'received_at',
  status_history: 'received_at',
  ingest_rejections: 'received_at',
  light_events: 'at',
  host_metrics: 'ts',
};
let seq = 0;
function chRow(table: ChRetentionTable, at: string): Record<string, unknown> {
  const key = randomUUID();
  const row: Record<string, unknown> = { [TIME_COLUMN[table]]: at, customer_id: s.customer.id };
  if (table === 'ingest_rejections') row.id = key;
  else if (table === 'light_events') Object.assign(row, { seq: ++seq, instance_id: instance });
  else if (table === 'host_metrics') row.client_metric_id = key;
  else row.report_id = key;
  return row;
}
for (const table of CH_RETENTION_TABLES) {
  const rows = MONTHS.flatMap((m) => [chRow(table, `${m}-15 12:00:00`), chRow(table, `${m}-16 12:00:00`)]);
  await s.ch.insert({ table, values: rows, format: 'JSONEachRow' });
}
async function chCounts(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const table of CH_RETENTION_TABLES) out[table] = Number((await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM ${table}`))[0]!.n);
  return out;
}

const deps = (days: RetentionDeps['days']): RetentionDeps => ({
  pool,
  ch: s.ch,
  target: { database: s.env.CLICKHOUSE_DB! },
  days,
  log,
  chunk: 2,
  now: () => NOW,
});
const forever = {
  postgres: Object.fromEntries(PG_RETENTION_TABLES.map((x) => [x, 0])) as RetentionDeps['days']['postgres'],
  clickhouse: Object.fromEntries(CH_RETENTION_TABLES.map((x) => [x, 0])) as RetentionDeps['days']['clickhouse'],
};

t.test('retention: exactly what is past its age goes, live rows and the boundary month stay, and a second run removes nothing', async (t) => {
  const pgBefore = await pgCounts();
  const chBefore = await chCounts();
  t.same(chBefore, Object.fromEntries(CH_RETENTION_TABLES.map((x) => [x, 8])), 'ClickHouse: two rows in each of four months');

  t.same(await runRetention(deps(forever)), {}, 'every retention 0 (keep forever): nothing removed');
  t.same(await pgCounts(), pgBefore);
  t.same(await chCounts(), chBefore);

  const removed = await runRetention(deps({ postgres: P, clickhouse: CH_DAYS }));
  t.same(
    removed,
    {
      webhook_deliveries: 3,
      commands: 5,
      command_events: 10,
      invitations: 3,
      sessions: 2,
      password_resets: 2,
      heartbeats_partitions: 6,
      diagnostics_partitions: 2,
      status_history_partitions: 2,
      ingest_rejections_partitions: 6,
      light_events_partitions: 1,
    },
    'the run says what it removed, per table',
  );

  const pgAfter = await pgCounts();
  const expected: Record<string, number> = { ...pgBefore };
  for (const [table, n] of Object.entries(removed)) if (table in expected) expected[table] = expected[table]! - n;
  t.same(pgAfter, expected, 'Postgres: the counts went down by exactly that');
  t.same(
    pgAfter,
    { webhook_deliveries: 2, commands: 3, command_events: 6, invitations: 4, sessions: 3, password_resets: 2, light_outbox: 1, conversions: pgBefore.conversions },
    'Postgres: what is left',
  );
  const commandsLeft = (await q('SELECT id FROM commands ORDER BY id')).rows.map((r) => r.id);
  t.same(commandsLeft, [...keptCommands].sort(), 'the open commands (however old) and the one inside its retention stay');
  t.equal((await q(`SELECT count(*)::int AS n FROM command_events e JOIN commands c ON c.id = e.command_id`)).rows[0].n, 6, 'their events stay with them');
  t.equal((await q(`SELECT count(*)::int AS n FROM invitations WHERE id = $1`, [firstInvitation])).rows[0].n, 1, "a customer's first invitation stays (onboarding)");
  t.equal((await q(`SELECT count(*)::int AS n FROM invitations WHERE customer_id = $1`, [other.customer.id])).rows[0].n, 1, "and so does another customer's only one");
  t.equal((await q(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE state = 'retrying'`)).rows[0].n, 1, 'the delivery still being retried stays');
  t.equal((await q(`SELECT count(*)::int AS n FROM sessions WHERE revoked_at IS NULL AND expires_at > now()`)).rows[0].n, 1, 'the valid session stays');
  t.equal((await q(`SELECT count(*)::int AS n FROM password_resets WHERE used_at IS NULL AND expires_at > now()`)).rows[0].n, 1, 'the valid reset link stays');
  t.match(await stuckOutbox(pool, 3600), { rows: 1, changes: 1 }, 'the undelivered outbox row stays (and is reported)');

  t.same(
    await chCounts(),
    { heartbeats: 2, diagnostics: 4, status_history: 4, ingest_rejections: 2, light_events: 6, host_metrics: 8 },
    'ClickHouse: the months wholly past their retention are gone, row counts per table',
  );
  const parts = await listPartitions(s.ch, { database: s.env.CLICKHOUSE_DB! });
  const byTable = (table: string) => parts.filter((p) => p.table === table).map((p) => p.partition);
  for (const table of ['diagnostics', 'status_history']) t.same(byTable(table), ['202605', '202606'], `${table}: the month of the cutoff and now stay`);
  // Day partitions (migration 0006-day-partitions): the days before the cutoff's day go, May's included.
  for (const table of ['heartbeats', 'ingest_rejections']) t.same(byTable(table), ['20260615', '20260616'], `${table}: by day, only the days inside the retention stay`);
  t.same(byTable('light_events'), ['202604', '202605', '202606'], 'light_events (400 days): only January 2025 went');
  t.same(byTable('host_metrics'), ['202501', '202604', '202605', '202606'], 'host_metrics (0: forever): every month stays');

  t.same(await runRetention(deps({ postgres: P, clickhouse: CH_DAYS })), {}, 'a second run removes nothing');
  t.same(await pgCounts(), pgAfter);
  t.same(await chCounts(), { heartbeats: 2, diagnostics: 4, status_history: 4, ingest_rejections: 2, light_events: 6, host_metrics: 8 });
});
