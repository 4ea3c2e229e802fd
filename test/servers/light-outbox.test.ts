// The light's outbox as one row per recording statement and customer (lib/store/light-events.ts,
// migration 0026-light-outbox-per-recording): a recording over two customers' instances leaves one
// row each, its arrays lined up change by change (what the view shows is exactly what the statement
// returned); a delivery deletes its own rows only; the drain delivers whole rows, at most `limit`
// changes together but always the oldest row, however large; offboarding one customer leaves the
// other's row of the same recording; and an upgrade converts the rows waiting in the old table, one
// per change, which the drain then takes.
import t from 'tap';
import pg from 'pg';
import { randomBytes, randomUUID } from 'node:crypto';
import { testStack, chRows, dbUrl, adminQuery } from '../helpers/stack.js';
import { stopMerges } from '../helpers/stored-once.js';
import { outboxBatch } from '../helpers/lights.js';
import { createLogger } from '../../lib/infra/log.js';
import { ISO_TIMES, withTx, type PoolClient } from '../../lib/infra/postgres.js';
import { lightEventId, type LightEvent } from '../../lib/domain/traffic-light.js';
import { deleteFromOutbox, lockOutboxOlderThan, recordLightChanges } from '../../lib/store/light-events.js';
import { migrate, migratePostgresBefore } from '../../lib/store/migrate.js';
import { LightEventSink } from '../../workers/traffic-light.js';

const s = await testStack(t, 'lightoutbox', { gateway: false, worker: false, api: false });
await stopMerges(s.ch, s.env.CLICKHOUSE_DB!, ['light_events']);
const deliveries: number[] = [];
const sink = new LightEventSink(s.pool, s.ch, s.nc, s.env.SUBJECT_PREFIX!, null, createLogger('test', 'silent'), (events) => deliveries.push(events.length));

/** `n` silent green instances of a new customer (their deadline passed 5 minutes ago). */
async function silentFleet(slug: string, n: number): Promise<{ customerId: string; ids: string[] }> {
  const { customer } = await s.newCustomer(slug);
  await s.pool.query(
    `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
     SELECT $1, $2 || '-' || g, now() - interval '1 day', now() - interval '10 minutes' FROM generate_series(1, $3::int) g`,
    [customer.id, slug, n],
  );
  const ids = (
    await s.pool.query<{ id: string }>(
      `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, deadline, late_at)
       SELECT customer_id, id, 'agent', now() - interval '1 day', now() - interval '10 minutes', now() - interval '10 minutes',
              light_deadline(now() - interval '10 minutes', NULL), light_late_at(now() - interval '10 minutes', NULL, NULL)
         FROM machines WHERE customer_id = $1 RETURNING id`,
      [customer.id],
    )
  ).rows.map((r) => r.id);
  await s.pool.query(
    `UPDATE instance_lights l SET light = 'green', light_since = now() - interval '1 day', light_judged_at = now() - interval '10 minutes', recheck_at = i.deadline
       FROM instances i WHERE i.id = l.instance_id AND i.customer_id = $1`,
    [customer.id],
  );
  return { customerId: customer.id, ids };
}

/** The changes waiting, one per row, as the view shows them (times as the events carry them: ISO_TIMES). */
const changesOf = async (where: string, values: unknown[], db: { query: pg.Pool['query'] } = s.pool) =>
  (
    await db.query({
      text: `SELECT recording, customer_id, customer, cause, recorded_at, instance_id, seq::int AS seq, machine_id, machine, software, from_light, to_light, reason, at
               FROM light_outbox_changes WHERE ${where} ORDER BY machine`,
      values,
      types: ISO_TIMES,
    })
  ).rows;

/** An event as the view shows it, with the recording of its outbox row. */
const asRow = (e: LightEvent, recording: string) => ({
  recording,
  customer_id: e.customer_id,
  customer: e.customer,
  cause: e.cause,
  recorded_at: e.recorded_at,
  instance_id: e.instance_id,
  seq: e.seq,
  machine_id: e.machine_id,
  machine: e.machine,
  software: e.software,
  from_light: e.from,
  to_light: e.to,
  reason: e.reason,
  at: e.at,
});

t.test('a recording over two customers: one outbox row each, the changes as returned; a delivery deletes its own rows only', async (t) => {
  const a = await silentFleet('oa', 30);
  const b = await silentFleet('ob', 20);
  const mixed = [...a.ids, ...b.ids].sort(); // interleaved, as a batch of the listener is
  const first = await withTx(s.pool, (c) => recordLightChanges(c, mixed, 'sweep', 900, Date.now()));
  t.equal(first.events.length, 50, 'every silent instance changed (red)');
  t.same(first.outbox.map((k) => k.customer_id).sort(), [a.customerId, b.customerId].sort(), 'one outbox row per customer of the recording');
  const recording = first.outbox[0]!.recording;
  t.ok(first.outbox.every((k) => k.recording === recording), 'both rows of the one recording');
  const rows = await s.pool.query(`SELECT customer_id, cardinality(instance_ids) AS n FROM light_outbox WHERE recording = $1 ORDER BY n`, [recording]);
  t.same(rows.rows.map((r) => Number(r.n)), [20, 30], 'the rows hold 20 and 30 changes: one table row per customer, not per change');
  // Every field of every change stays with its change (arrays lined up).
  const stored = await changesOf('recording = $1', [recording]);
  const expected = [...first.events].sort((x, y) => x.machine.localeCompare(y.machine)).map((e) => asRow(e, recording));
  t.same(stored, expected, 'the view shows exactly the changes the statement returned');
  t.ok(first.events.every((e) => e.recorded_at === first.events[0]!.recorded_at), 'one recording time for all its changes');
  t.ok(first.events.every((e) => e.id === lightEventId(e.instance_id, e.seq)));

  // A second recording (the next batch: the same instances, now red, judged again to green by a
  // heartbeat); delivering the first deletes the first's rows only.
  await s.pool.query(`UPDATE instances SET last_heartbeat_at = now(), last_seen_at = now(), deadline = light_deadline(now(), NULL), late_at = light_late_at(now(), NULL, NULL) WHERE customer_id = $1`, [a.customerId]);
  const second = await withTx(s.pool, (c) => recordLightChanges(c, a.ids, 'report', 900, Date.now()));
  t.equal(second.events.length, 30, "customer A's instances green again");
  t.not(second.outbox[0]!.recording, recording, 'a recording of its own');
  await sink.deliver(first);
  t.equal((await changesOf('recording = $1', [recording])).length, 0, 'the delivered rows are gone');
  t.equal((await changesOf('recording = $1', [second.outbox[0]!.recording])).length, 30, 'the other recording waits still');
  const inCh = await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM light_events WHERE customer_id IN ('${a.customerId}', '${b.customerId}')`);
  t.equal(Number(inCh[0]!.n), 50, 'the delivered changes in ClickHouse, once each');

  // Offboarding deletes a customer's rows by customer_id: the other customer's row of the same
  // recording stays whole.
  const third = await withTx(s.pool, async (c) => {
    await c.query(`UPDATE instances SET last_heartbeat_at = now() - interval '10 minutes', deadline = light_deadline(now() - interval '10 minutes', NULL) WHERE customer_id = $1`, [a.customerId]);
    await c.query(`UPDATE instances SET last_heartbeat_at = now(), last_seen_at = now(), deadline = light_deadline(now(), NULL), late_at = light_late_at(now(), NULL, NULL) WHERE customer_id = $1`, [b.customerId]);
    return recordLightChanges(c, mixed, 'sweep', 900, Date.now());
  });
  t.equal(third.outbox.length, 2);
  await s.pool.query('DELETE FROM light_outbox WHERE customer_id = $1', [a.customerId]);
  t.equal((await changesOf('recording = $1 AND customer_id = $2', [third.outbox[0]!.recording, b.customerId])).length, 20, "the other customer's changes of that recording stay");
  await deleteFromOutbox(s.pool, [...second.outbox, ...third.outbox]);
  t.equal((await changesOf('customer_id IN ($1, $2)', [a.customerId, b.customerId])).length, 0, 'nothing left');
});

/** `n` changes of one customer, into the outbox as one row recorded `agoS` seconds ago. */
const waiting = (customer: { id: string; slug: string }, name: string, n: number, agoS: number) =>
  outboxBatch(s.pool, customer, name, n, new Date(Date.now() - agoS * 1000).toISOString(), 1);

t.test('the drain: whole rows, at most the limit together, but always the oldest row however large', async (t) => {
  const { customer } = await s.newCustomer('drain');
  // Oldest first: 1, 1, 5, 2 changes; limit 3 → deliveries of 2 (two rows), 5 (one row, above
  // the limit alone), 2.
  await waiting(customer, 'd1', 1, 40);
  await waiting(customer, 'd2', 1, 30);
  await waiting(customer, 'd3', 5, 20);
  await waiting(customer, 'd4', 2, 10);
  await waiting(customer, 'young', 4, 0); // within the grace: not the drain's
  deliveries.length = 0;
  t.equal(await sink.drainOutbox(5000, 3), 9, 'nine changes delivered');
  t.same(deliveries, [2, 5, 2], 'in three deliveries of whole rows');
  const rows = await chRows<{ machine: string; n: string }>(s.ch, `SELECT machine, count() AS n FROM light_events WHERE customer_id = '${customer.id}' GROUP BY machine ORDER BY machine`);
  t.equal(rows.length, 9, 'each change in ClickHouse');
  t.ok(rows.every((r) => Number(r.n) === 1), 'once (raw rows, merges stopped)');
  t.same((await changesOf('customer_id = $1', [customer.id])).map((r) => r.machine), ['young-0', 'young-1', 'young-2', 'young-3'], 'the row within its grace stays');
  deliveries.length = 0;
  t.equal(await sink.drainOutbox(5000, 3), 0, 'a second drain finds nothing due');
  t.same(deliveries, []);
});

t.test('an upgrade converts the changes waiting in the old table, and the drain takes them', async (t) => {
  const name = `t_obx${randomBytes(3).toString('hex')}`;
  const server = s.env.DATABASE_URL!;
  await adminQuery(`CREATE DATABASE "${name}"`, server);
  t.teardown(() => adminQuery(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`, server));
  const db = new pg.Client({ connectionString: dbUrl(name, server) });
  await db.connect();
  t.teardown(() => db.end());
  await migratePostgresBefore(db, '0026-light-outbox-per-recording');
  const c1 = randomUUID();
  const c2 = randomUUID();
  const old = [
    [randomUUID(), 3, c1, 'one', randomUUID(), 'm1', 'agent', 'green', 'red', 'silent', 'expiry', '2026-12-01T10:00:00.123456Z', '2026-12-01T10:00:01.5Z'],
    [randomUUID(), 4, c1, 'one', randomUUID(), 'm2', 'db', 'red', 'green', 'ok', 'report', '2026-12-01T10:00:02Z', '2026-12-01T10:00:02.25Z'],
    [randomUUID(), 1, c2, 'two', randomUUID(), 'm3', 'agent', 'yellow', 'red', 'status error', 'sweep', '2026-12-01T10:00:03Z', '2026-12-01T10:00:04Z'],
  ];
  for (const r of old)
    await db.query(
      `INSERT INTO light_outbox (instance_id, seq, customer_id, customer, machine_id, machine, software, from_light, to_light, reason, cause, at, recorded_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
      r,
    );
  await migrate({ databaseUrl: dbUrl(name, server), clickhouseUrl: s.env.CLICKHOUSE_URL!, clickhouseDatabase: s.env.CLICKHOUSE_DB! });
  const got = (await changesOf('true', [], db)).map(({ recording: _, ...rest }) => rest);
  t.same(
    got,
    old.map((r) => ({
      customer_id: r[2], customer: r[3], cause: r[10], recorded_at: new Date(r[12] as string).toISOString(), instance_id: r[0], seq: r[1],
      machine_id: r[4], machine: r[5], software: r[6], from_light: r[7], to_light: r[8], reason: r[9], at: new Date(r[11] as string).toISOString(),
    })),
    'every change waiting, every field kept',
  );
  t.equal(Number((await db.query('SELECT count(*) AS n FROM light_outbox')).rows[0].n), 3, 'one row per old row');
  // What the drain takes of them: every change, oldest first, and the three rows to delete.
  await db.query('BEGIN');
  const due = await lockOutboxOlderThan(db as unknown as PoolClient, 0, 100);
  t.same(due.events.map((e) => [e.instance_id, e.seq, e.cause, e.recorded_at]), old.map((r) => [r[0], r[1], r[10], new Date(r[12] as string).toISOString()]), 'the drain reads them, oldest first');
  t.equal(due.outbox.length, 3);
  t.notOk(due.more);
  await deleteFromOutbox(db as unknown as PoolClient, due.outbox);
  await db.query('COMMIT');
  t.equal(Number((await db.query('SELECT count(*) AS n FROM light_outbox')).rows[0].n), 0, 'and delivered, they are gone');
});
