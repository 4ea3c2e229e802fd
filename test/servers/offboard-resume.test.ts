// Offboarding that fails half-way (lib/store/offboarding.ts, run as the worker's job runs it:
// workers/offboarding.ts), against the real servers: ClickHouse unreachable in the middle of a
// purge leaves the customer `deleting` (hidden from every reader, its tokens revoked, its reports
// dropped by the workers' check), never a half-deleted customer that looks alive; the next run
// finishes it; another customer's rows, keys and ClickHouse rows are untouched throughout.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, chRows } from '../helpers/stack.js';
import { loadConfig } from '../../lib/infra/config.js';
import { createLogger } from '../../lib/infra/log.js';
import { createClickHouse, type ClickHouseClient } from '../../lib/infra/clickhouse.js';
import { chStr } from '../../lib/infra/clickhouse-sql.js';
import { createToken, customerExists } from '../../lib/store/customers.js';
import { ArtifactStore } from '../../lib/store/artifacts.js';
import { DeadLetters } from '../../lib/store/dead-letters.js';
import { customersToPurge, deleteCustomerRowsSql, markCustomerDeleting, purgeCustomer } from '../../lib/store/offboarding.js';
import { LiveCustomers } from '../../workers/live-customers.js';
import { runOffboarding } from '../../workers/offboarding.js';

const s = await testStack(t, 'offboardresume', { gateway: false, worker: false, api: false });
const cfg = loadConfig(s.env);
const store = await ArtifactStore.open(s.nc, cfg);
const deadLetters = new DeadLetters(s.nc, cfg);
const log = createLogger('offboard-test', 'silent');
const target = { database: s.env.CLICKHOUSE_DB! };
const deps = (ch: ClickHouseClient) => ({ pool: s.pool, ch, target, redis: s.redis, redisPrefix: s.env.REDIS_PREFIX!, artifacts: store, deadLetters, mutationWaitMs: 60_000 });
const q = (sql: string, params: unknown[] = []) => s.pool.query(sql, params);

/** A machine, an instance, a heartbeat key and two ClickHouse rows of a customer; the instance id. */
async function seed(customerId: string): Promise<string> {
  const m = (await q(`INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, 'm1', now(), now()) RETURNING id`, [customerId])).rows[0].id;
  const i = (await q(`INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at) VALUES ($1, $2, 'agent', now(), now()) RETURNING id`, [customerId, m])).rows[0].id;
  await s.redis.set(`${s.env.REDIS_PREFIX}hb:${i}`, '1', 'PX', 600_000);
  for (const table of ['heartbeats', 'diagnostics']) {
    await s.ch.command({
      query: `INSERT INTO ${table} (received_at, received_ms, customer_id, instance_id, report_id) VALUES (now(), 1, ${chStr(customerId)}, ${chStr(i)}, ${chStr(randomUUID())})`,
    });
  }
  return i;
}
const chCount = async (customerId: string) => {
  let n = 0;
  for (const table of ['heartbeats', 'diagnostics']) n += Number((await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM ${table} WHERE customer_id = ${chStr(customerId)}`))[0]!.n);
  return n;
};

const doomed = (await s.newCustomer('doomed')).customer;
const kept = s.customer;
const doomedInstance = await seed(doomed.id);
const keptInstance = await seed(kept.id);
const doomedToken = await createToken(s.pool, doomed.id, 'agent');

t.test('ClickHouse away half-way: the customer stays deleting and hidden; the next run finishes it; the other is untouched', async (t) => {
  const ghost = randomUUID();
  t.same([...(await new LiveCustomers(s.pool).goneOf([doomed.id, kept.id, ghost]))], [], "before: the workers drop no one's reports");

  const marked = await markCustomerDeleting(s.pool, doomed.id);
  t.equal(marked?.id, doomed.id);
  t.notOk(await customerExists(s.pool, doomed.id), 'marked: gone for the api');
  t.ok((await q('SELECT revoked_at FROM api_tokens WHERE id = $1', [doomedToken.id])).rows[0].revoked_at, 'its token revoked');
  t.same([...(await new LiveCustomers(s.pool).goneOf([doomed.id, kept.id, ghost]))], [doomed.id], "the workers drop its reports from now on (and only its)");

  const away = createClickHouse({ url: 'http://127.0.0.1:9', database: s.env.CLICKHOUSE_DB });
  await t.rejects(purgeCustomer(deps(away), doomed), 'the purge fails at ClickHouse');
  await away.close();
  t.ok((await q('SELECT deleting_at FROM customers WHERE id = $1', [doomed.id])).rows[0]?.deleting_at, 'the customer row is still there, marked: the handle of the deletion');
  t.notOk(await customerExists(s.pool, doomed.id), 'and still hidden');
  t.same((await customersToPurge(s.pool, 0)).map((c) => c.id), [doomed.id], 'the job finds it');
  t.equal((await q('SELECT count(*)::int AS n FROM machines WHERE customer_id = $1', [doomed.id])).rows[0].n, 0, 'what came before ClickHouse is done (Postgres rows)');
  t.equal(await s.redis.exists(`${s.env.REDIS_PREFIX}hb:${doomedInstance}`), 0, '(its heartbeat key)');
  t.equal(await chCount(doomed.id), 2, 'its ClickHouse rows wait for the next run');

  t.same(await runOffboarding({ ...deps(s.ch), graceS: 0, log }), { customers: 1 }, 'the next run of the job finishes it');
  t.equal((await q('SELECT count(*)::int AS n FROM customers WHERE id = $1', [doomed.id])).rows[0].n, 0, 'the customer is gone');
  t.equal(await chCount(doomed.id), 0, 'its ClickHouse rows are gone');
  t.same(await runOffboarding({ ...deps(s.ch), graceS: 0, log }), {}, 'a run after that finds nothing');
  t.same((await q('SELECT id FROM deleted_customers')).rows.map((r) => r.id), [doomed.id], 'its id stays in deleted_customers');
  t.same(
    [...(await new LiveCustomers(s.pool).goneOf([doomed.id, kept.id, ghost]))],
    [doomed.id],
    'so the workers still drop its reports; an id that never was a customer is left to fail (and be dead-lettered) as before',
  );
  await t.resolves(purgeCustomer(deps(s.ch), doomed), 'purging it again changes nothing and does not fail');

  t.equal((await q('SELECT count(*)::int AS n FROM machines WHERE customer_id = $1', [kept.id])).rows[0].n, 1, "the other customer's rows stay");
  t.equal(await s.redis.exists(`${s.env.REDIS_PREFIX}hb:${keptInstance}`), 1, 'its heartbeat key');
  t.equal(await chCount(kept.id), 2, 'its ClickHouse rows');
  t.ok(await customerExists(s.pool, kept.id), 'and it is live');
});

t.test('on a cluster the mutation runs ON CLUSTER on <table>_local', async (t) => {
  const id = '6bcf19bd-26f9-49db-a769-5a6d22b62175';
  t.equal(deleteCustomerRowsSql('heartbeats', id, { database: 'fleet' }), `ALTER TABLE heartbeats DELETE WHERE customer_id = '${id}'`);
  t.equal(deleteCustomerRowsSql('heartbeats', id, { cluster: 'fleet_cluster', database: 'fleet' }), `ALTER TABLE fleet.heartbeats_local ON CLUSTER fleet_cluster DELETE WHERE customer_id = '${id}'`);
});
