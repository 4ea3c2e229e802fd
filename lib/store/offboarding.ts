// Offboarding: deleting a customer and everything of it, in every store (docs/operations.md
// "Offboarding a customer"). Two steps:
//
//   1. markCustomerDeleting: customers.deleting_at is set, its API tokens revoked (every gateway's
//      copy sees the revocation at its next refresh, CACHE_REFRESH_MS), its memberships and
//      invitations deleted. From then on the customer is gone for every reader: no login into it,
//      no token, and the workers drop its reports still in the ingest stream (workers/live-customers.ts;
//      after the purge by its id in deleted_customers, the only thing of it that stays).
//   2. purgeCustomer, once reports that were being applied at the mark have had time to land
//      (OFFBOARD_GRACE_S): its artifacts (bytes, upload records, quota reservations), its Redis keys,
//      its Postgres rows, its dead letters, its ClickHouse rows (a mutation per table, waited for),
//      and last the customers row, the handle of a deletion that stopped half-way. Every part is
//      idempotent: a run that fails (ClickHouse away, say) leaves the customer `deleting`, and the
//      next run (the worker's offboarding job, or `fleet customer delete` again) finishes it.
import type { Pool } from '../infra/postgres.js';
import { withTx } from '../infra/postgres.js';
import type { Redis } from '../infra/redis.js';
import { byGroup, redisKeys } from '../infra/redis.js';
import { chIdent, queryRows, type ClickHouseClient } from '../infra/clickhouse.js';
import { chStr } from '../infra/clickhouse-sql.js';
import type { Logger } from '../infra/log.js';
import { localTable, type ChTarget } from './schema.js';
import { CH_RETENTION_TABLES } from './retention.js';
import { artifactsBeingDeleted, markCustomerArtifactsDeleting, purgeArtifact, type ArtifactStore } from './artifacts.js';
import { ArtifactUsage, usageKeys } from './artifact-usage.js';
import type { DeadLetters } from './dead-letters.js';

/** A customer being deleted. */
export interface DeletingCustomer {
  id: string;
  slug: string;
  deleting_at: Date;
}

/**
 * Step 1 (one transaction). Null when there is no such customer (or it is gone already); a
 * customer already being deleted keeps its first deleting_at.
 */
export async function markCustomerDeleting(pool: Pool, customerId: string): Promise<DeletingCustomer | null> {
  return withTx(pool, async (c) => {
    const r = await c.query<DeletingCustomer>(
      'UPDATE customers SET deleting_at = COALESCE(deleting_at, now()) WHERE id = $1 RETURNING id, slug, deleting_at',
      [customerId],
    );
    const row = r.rows[0];
    if (!row) return null;
    // Revoked (not deleted): the gateways' copies follow changed rows (updated_at), not deleted ones.
    await c.query('UPDATE api_tokens SET revoked_at = now() WHERE customer_id = $1 AND revoked_at IS NULL', [customerId]);
    await c.query('DELETE FROM memberships WHERE customer_id = $1', [customerId]);
    await c.query('DELETE FROM invitations WHERE customer_id = $1', [customerId]);
    return row;
  });
}

/** A customer by slug, whether being deleted or not (the CLI's lookup). */
export async function customerBySlug(pool: Pool, slug: string): Promise<{ id: string; slug: string; deleting_at: Date | null } | null> {
  const r = await pool.query<{ id: string; slug: string; deleting_at: Date | null }>('SELECT id, slug, deleting_at FROM customers WHERE slug = $1', [slug]);
  return r.rows[0] ?? null;
}

/** Customers marked at least `graceS` seconds ago (by the database's clock), the longest-marked first. */
export async function customersToPurge(pool: Pool, graceS: number): Promise<DeletingCustomer[]> {
  const r = await pool.query<DeletingCustomer>(
    `SELECT id, slug, deleting_at FROM customers
      WHERE deleting_at IS NOT NULL AND deleting_at <= now() - make_interval(secs => $1::int) ORDER BY deleting_at, id`,
    [graceS],
  );
  return r.rows;
}

/** Every Postgres table with a customer_id column, deleted from in this order (children first). */
export const PG_CUSTOMER_TABLES = [
  'maintenance_occurrences',
  'maintenance_windows',
  'mail_pending',
  'mail_subscriptions',
  'light_outbox',
  'webhook_deliveries',
  'webhooks',
  'commands',
  'artifacts',
  'artifact_usage',
  'whitelist_rules',
  'help_texts',
  'timeout_recomputes',
  'timeout_rules',
  'instance_lights',
  'instances',
  'machines',
  'api_tokens',
  'memberships',
  'invitations',
  'conversions',
  'onboarding_milestones',
  'customer_quotas',
  'licences',
] as const;

export interface PurgeDeps {
  pool: Pool;
  ch: ClickHouseClient;
  /** Where the ClickHouse tables are (on a cluster the mutation runs on `<name>_local` ON CLUSTER). */
  target: ChTarget;
  redis: Redis;
  redisPrefix: string;
  artifacts: ArtifactStore;
  deadLetters: DeadLetters;
  log?: Logger;
  /** How long one run waits for ClickHouse's mutations to finish (ms); then the next run looks again. */
  mutationWaitMs?: number;
  /** Removes the BullMQ delivery jobs of these webhooks (workers/webhooks.ts); how many. */
  removeWebhookJobs?: (webhookIds: string[]) => Promise<number>;
}

export interface PurgeResult {
  artifacts: number;
  uploads: number;
  redisKeys: number;
  postgresRows: number;
  deadLetters: number;
  clickhouseMutations: number;
}

/** Step 2: everything of the customer, store by store; throws (the customer stays `deleting`) when a store fails. */
export async function purgeCustomer(d: PurgeDeps, c: { id: string; slug: string }): Promise<PurgeResult> {
  const out: PurgeResult = { artifacts: 0, uploads: 0, redisKeys: 0, postgresRows: 0, deadLetters: 0, clickhouseMutations: 0 };
  const usage = new ArtifactUsage(d.redis, d.redisPrefix);

  // Artifacts: each as DELETE /api/artifacts/{id} deletes it; then uploads still open; then the reservations.
  await markCustomerArtifactsDeleting(d.pool, c.id);
  for (;;) {
    const rows = await artifactsBeingDeleted(d.pool, { customerId: c.id, limit: 100 });
    for (const a of rows) await purgeArtifact(d.pool, d.artifacts, a, usage);
    out.artifacts += rows.length;
    if (rows.length < 100) break;
  }
  for (const id of await d.artifacts.listUploadIds()) {
    const u = await d.artifacts.getUpload(id);
    if (u?.rec.customer_id !== c.id) continue;
    await d.artifacts.deleteUploadAndChunks(id, u.rec.chunks);
    out.uploads++;
  }
  const uk = usageKeys(d.redisPrefix, d.redis);
  out.redisKeys += await d.redis.del(uk.reservations(c.id));
  await d.redis.srem(uk.customers, c.id);

  // Redis: each instance's heartbeat key and state, and its entry in the due set.
  const keys = redisKeys(d.redisPrefix, d.redis);
  const instances = (await d.pool.query<{ id: string }>('SELECT id FROM instances WHERE customer_id = $1', [c.id])).rows.map((r) => r.id);
  for (let i = 0; i < instances.length; i += 500) {
    const ids = instances.slice(i, i + 500);
    for (const [g, some] of byGroup(ids, keys.groups, (id) => id)) {
      out.redisKeys += await d.redis.del(...some.flatMap((id) => [keys.heartbeat(id), keys.heartbeatState(id)]));
      await d.redis.zrem(keys.heartbeatDueOf(g), ...some);
    }
  }

  // Its webhooks' delivery jobs (BullMQ, in Redis): found by the webhook ids, so before those rows go.
  if (d.removeWebhookJobs) {
    const hooks = (await d.pool.query<{ id: string }>('SELECT id FROM webhooks WHERE customer_id = $1', [c.id])).rows.map((r) => r.id);
    out.redisKeys += await d.removeWebhookJobs(hooks);
  }

  // Postgres: every row with its customer_id, in one transaction; the customers row stays (the handle).
  out.postgresRows = await withTx(d.pool, async (tx) => {
    let n = 0;
    for (const table of PG_CUSTOMER_TABLES) n += (await tx.query(`DELETE FROM ${table} WHERE customer_id = $1`, [c.id])).rowCount ?? 0;
    return n;
  });

  // Dead letters of the customer (their subject carries its slug).
  out.deadLetters = await d.deadLetters.purgeCustomer(c.slug);

  // ClickHouse: one mutation per table that still holds rows of the customer (none while one is
  // still running for it), then wait until no row is left.
  out.clickhouseMutations = await deleteClickHouseRows(d, c.id);

  // Last: the customer itself (anything a later migration adds with ON DELETE CASCADE goes with
  // it), leaving its id in deleted_customers: a report of it still queued is dropped, not dead-lettered.
  await withTx(d.pool, async (tx) => {
    const gone = await tx.query('DELETE FROM customers WHERE id = $1 AND deleting_at IS NOT NULL', [c.id]);
    if ((gone.rowCount ?? 0) > 0) await tx.query('INSERT INTO deleted_customers (id) VALUES ($1) ON CONFLICT DO NOTHING', [c.id]);
  });
  d.log?.info({ customer: c.slug, customerId: c.id, ...out }, 'customer deleted: nothing of it is left');
  return out;
}

/** `ALTER TABLE … DELETE` of one customer's rows: the table itself, or on a cluster its `<name>_local` ON CLUSTER. */
export function deleteCustomerRowsSql(table: string, customerId: string, target: ChTarget): string {
  const where = `DELETE WHERE customer_id = ${chStr(customerId)}`;
  if (!target.cluster) return `ALTER TABLE ${chIdent(table)} ${where}`;
  return `ALTER TABLE ${chIdent(target.database)}.${localTable(chIdent(table))} ON CLUSTER ${chIdent(target.cluster)} ${where}`;
}

async function rowsOf(ch: ClickHouseClient, table: string, customerId: string): Promise<number> {
  const [r] = await queryRows<{ n: string | number }>(ch, `SELECT count() AS n FROM ${chIdent(table)} WHERE customer_id = ${chStr(customerId)}`);
  return Number(r?.n ?? 0);
}

async function pendingMutation(ch: ClickHouseClient, table: string, customerId: string, target: ChTarget): Promise<boolean> {
  const name = target.cluster ? localTable(table) : table;
  const [r] = await queryRows<{ n: string | number }>(
    ch,
    `SELECT count() AS n FROM system.mutations WHERE database = currentDatabase() AND table = ${chStr(name)} AND is_done = 0 AND position(command, ${chStr(customerId)}) > 0`,
  );
  return Number(r?.n ?? 0) > 0;
}

async function deleteClickHouseRows(d: PurgeDeps, customerId: string): Promise<number> {
  let issued = 0;
  for (const table of CH_RETENTION_TABLES) {
    if ((await rowsOf(d.ch, table, customerId)) === 0) continue;
    if (await pendingMutation(d.ch, table, customerId, d.target)) continue;
    await d.ch.command({ query: deleteCustomerRowsSql(table, customerId, d.target) });
    issued++;
  }
  // Mutations run in the background: wait until every table counts 0 rows of the customer.
  const until = Date.now() + (d.mutationWaitMs ?? 120_000);
  for (;;) {
    const left: string[] = [];
    for (const table of CH_RETENTION_TABLES) if ((await rowsOf(d.ch, table, customerId)) > 0) left.push(table);
    if (left.length === 0) return issued;
    if (Date.now() > until) throw new Error(`ClickHouse still holds rows of the customer in ${left.join(', ')} (mutations running); the next run checks again`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
