// Offboarding a customer (DELETE /api/admin/customers/{id}, the worker's offboarding job) against
// the real servers and processes, with two customers that each have data in every store; one is
// deleted. Reports of it already in the ingest stream when it is marked (the worker stopped) are
// dropped, not stored and not dead-lettered; its tokens stop working on both gateways within
// CACHE_REFRESH_MS; afterwards nothing of it is anywhere: no row in any Postgres table with a
// customer_id column, none in any ClickHouse table, no Redis key, no object in the artifact store,
// no upload record, no dead letter. The other customer's data is all still there.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { testStack, post, get, request, eventually, drained, chRows } from '../helpers/stack.js';
import { chStr } from '../../lib/infra/clickhouse-sql.js';
import { upload } from '../helpers/http.js';
import { ArtifactStore, bucketNames } from '../../lib/store/artifacts.js';
import { PG_CUSTOMER_TABLES } from '../../lib/store/offboarding.js';
import { CH_RETENTION_TABLES } from '../../lib/store/retention.js';
import { subjects, deadLetterStream } from '../../lib/contract/messages.js';
import { loadConfig } from '../../lib/infra/config.js';

const s = await testStack(t, 'offboard', { env: { OFFBOARD_GRACE_S: '2', OFFBOARD_SWEEP_MS: '500' } });
const gw2 = (await s.startGateway()).url;
const gateways = [s.gatewayUrl, gw2];
const MiB = 1024 * 1024;
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const store = await ArtifactStore.open(s.nc, loadConfig(s.env));
const jsm = await s.nc.jetstreamManager();
const objStream = `OBJ_${bucketNames(s.env.STREAM_NAME!).objects}`;
const dlBase = subjects(s.env.SUBJECT_PREFIX!).deadLetter;
const q = (sql: string, params: unknown[] = []) => s.pool.query(sql, params);

// (No assertions outside t.test: tap would end the root test early.)
async function must(p: Promise<{ status: number; body: unknown }>, what: string): Promise<{ status: number; body: any }> {
  const r = await p;
  if (r.status !== 200 && r.status !== 201 && r.status !== 202) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body)}`);
  return r as { status: number; body: any };
}

interface Tenant {
  id: string;
  slug: string;
  token: string;
  chunks: number;
}

/** Data of a customer in every store: reports (Postgres, ClickHouse, Redis), metrics, artifacts, rows of every other kind, a dead letter. */
async function populate(c: { customer: { id: string; slug: string }; token: string }): Promise<Tenant> {
  const { id, slug } = c.customer;
  const ing = (m: string, rest: string, gw = s.gatewayUrl) => `${gw}/api/ingest/${slug}/${m}/agent/${rest}`;
  for (const m of ['m1', 'm2']) {
    await must(post(ing(m, 'heartbeat'), c.token, { version: '1.0' }), 'heartbeat');
    await must(post(ing(m, 'diagnostics'), c.token, { items: [{ code: 4711, severity: 2, message: 'disk' }] }), 'diagnostics');
    await must(post(ing(m, 'status'), c.token, { status: 'degraded', message: 'slow', snapshot: { a: 1 } }), 'status');
    await must(post(`${s.gatewayUrl}/api/ingest/${slug}/${m}/logcollector/metrics`, c.token, { items: [{ client_metric_id: `${m}-1`, values: { cpu_percent: 5 } }] }), 'metrics');
  }
  // A refused request: a row of the customer in the rejection log.
  await post(ing('m1', 'heartbeat'), c.token, { version: 7 });
  // A complete artifact (two chunks) and an upload still open (one chunk of two).
  const data = randomBytes(MiB + 10);
  const i = await must(post(ing('m1', 'artifact-init'), c.token, { filename: 'a.bin', size: data.length, sha256: sha256(data) }), 'init');
  for (let n = 0; n < 2; n++) await upload('PUT', ing('m1', `artifact-chunk/${i.body.upload_id}/${n}`), c.token, data.subarray(n * MiB, (n + 1) * MiB), { 'Content-Type': 'application/octet-stream' });
  await must(post(ing('m1', `artifact-complete/${i.body.upload_id}`), c.token, ''), 'complete');
  const open = await must(post(ing('m2', 'artifact-init'), c.token, { filename: 'b.bin', size: 2 * MiB }), 'open init');
  await upload('PUT', ing('m2', `artifact-chunk/${open.body.upload_id}/0`), c.token, randomBytes(MiB), { 'Content-Type': 'application/octet-stream' });
  await eventually(async () => (await q('SELECT 1 FROM artifacts WHERE customer_id = $1', [id])).rowCount === 1, 15_000, `${slug}: artifact stored`);
  await eventually(async () => (await q(`SELECT 1 FROM instances WHERE customer_id = $1 AND software = 'agent' AND status IS NOT NULL`, [id])).rowCount === 2, 15_000, `${slug}: instances`);

  // Rows the reports do not make: a webhook with a delivery, a whitelist rule, a command with an
  // event, a help text, an undelivered change of colour, a quota override, an invitation, a member,
  // a maintenance window with its occurrence.
  const inst = (await q('SELECT id, machine_id FROM instances WHERE customer_id = $1 LIMIT 1', [id])).rows[0];
  const hook = (await q(`INSERT INTO webhooks (customer_id, url, secret) VALUES ($1, 'https://example.com/h', 's') RETURNING id`, [id])).rows[0].id;
  await q(
    `INSERT INTO webhook_deliveries (webhook_id, event_id, customer_id, instance_id, from_light, to_light, event_at, state, attempts) VALUES ($1, $2, $3, $4, 'green', 'red', now(), 'delivered', 1)`,
    [hook, randomBytes(8).toString('hex'), id, inst.id],
  );
  await q(`INSERT INTO whitelist_rules (customer_id, code_from, code_to) VALUES ($1, 1, 2)`, [id]);
  const cmd = (await q(`INSERT INTO commands (customer_id, instance_id, module, command, expires_at) VALUES ($1, $2, 'm', 'c', now() + interval '1 hour') RETURNING id`, [id, inst.id])).rows[0].id;
  await q(`INSERT INTO command_events (command_id, state, at) VALUES ($1, 'queued', now())`, [cmd]);
  await q(`INSERT INTO help_texts (customer_id, software, code, lang, text, received_at, report_id) VALUES ($1, 'agent', 4711, 'en', 'help', now(), gen_random_uuid())`, [id]);
  await q(
    `INSERT INTO light_outbox (recording, customer_id, customer, cause, recorded_at, instance_ids, seqs, machine_ids, machines, softwares, from_lights, to_lights, reasons, ats)
     VALUES (gen_random_uuid(), $2, $3, 'sweep', now(), ARRAY[$1::uuid], ARRAY[999::bigint], ARRAY[$4::uuid], ARRAY['m1'], ARRAY['agent'], ARRAY['green'],
             ARRAY['red'], ARRAY['x'], ARRAY[now()])`,
    [inst.id, id, slug, inst.machine_id],
  );
  await q(`INSERT INTO customer_quotas (customer_id, webhooks) VALUES ($1, 3)`, [id]);
  await q(`INSERT INTO invitations (customer_id, email, role, token_hash, expires_at) VALUES ($1, $2, 'viewer', $3, now() + interval '1 day')`, [
    id,
    `${slug}@example.com`,
    randomBytes(16).toString('hex'),
  ]);
  await q(`INSERT INTO conversions (kind, customer_id, dedup_key) VALUES ('licence_activated', $1, $2)`, [id, `test:${id}`]);
  // A maintenance window of one machine, with its occurrence.
  const mw = (
    await q(
      `INSERT INTO maintenance_windows (customer_id, scope, machine_id, kind, starts_at, ends_at) VALUES ($1, 'machine', $2, 'once', now() + interval '1 hour', now() + interval '2 hours') RETURNING id, starts_at, ends_at`,
      [id, inst.machine_id],
    )
  ).rows[0];
  await q(`INSERT INTO maintenance_occurrences (window_id, customer_id, machine_id, starts_at, ends_at) VALUES ($1, $2, $3, $4, $5)`, [mw.id, id, inst.machine_id, mw.starts_at, mw.ends_at]);
  // A dead letter on the customer's subject.
  await s.nc.jetstream().publish(`${dlBase}.${slug}`, Buffer.from('{"not":"a batch"}'));
  return { id, slug, token: c.token, chunks: 3 };
}

/** Rows of a customer per Postgres table with a customer_id column (every such table the database has; views are not tables). */
async function pgCounts(customerId: string): Promise<Record<string, number>> {
  const tables = (
    await q(
      `SELECT c.table_name FROM information_schema.columns c
         JOIN information_schema.tables tb ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name AND tb.table_type = 'BASE TABLE'
        WHERE c.table_schema = 'public' AND c.column_name = 'customer_id' ORDER BY 1`,
    )
  ).rows.map((r) => r.table_name as string);
  const out: Record<string, number> = {};
  for (const table of tables) out[table] = (await q(`SELECT count(*)::int AS n FROM ${table} WHERE customer_id = $1`, [customerId])).rows[0].n;
  return out;
}

async function chCounts(customerId: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const table of CH_RETENTION_TABLES) {
    out[table] = Number((await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM ${table} WHERE customer_id = ${chStr(customerId)}`))[0]!.n);
  }
  return out;
}

async function redisKeysAll(): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await s.redis.scan(cursor, 'MATCH', `${s.env.REDIS_PREFIX}*`, 'COUNT', 1000);
    cursor = next;
    out.push(...keys);
  } while (cursor !== '0');
  return out;
}

async function uploadsOf(customerId: string): Promise<string[]> {
  const out: string[] = [];
  for (const id of await store.listUploadIds()) if ((await store.getUpload(id))?.rec.customer_id === customerId) out.push(id);
  return out;
}

const deadLettersOf = async (slug: string) => (await jsm.streams.info(deadLetterStream(s.env.STREAM_NAME!), { subjects_filter: `${dlBase}.${slug}` })).state.subjects?.[`${dlBase}.${slug}`] ?? 0;

const gone = await populate(await s.newCustomer('gone'));
const kept = await populate({ customer: s.customer, token: s.token });
const goneOwner = await s.newUser('owner', { customer: { id: gone.id, slug: gone.slug, name: gone.slug } });
const keptAdmin = await s.newUser('admin');
const sysadmin = await s.newUser(null, { systemAdmin: true });
// Each customer's member subscribed to e-mail notifications, with one change waiting for its digest.
for (const [user, c] of [[goneOwner, gone], [keptAdmin, kept]] as const) {
  await q(`INSERT INTO mail_subscriptions (user_id, customer_id, kinds, unsubscribe_token, waiting_since) VALUES ($1, $2, '{red}', $3, now())`, [user.id, c.id, randomBytes(32).toString('hex')]);
  await q(
    `INSERT INTO mail_pending (user_id, customer_id, event_id, kind, instance_id, machine, software, from_light, to_light, event_at)
     VALUES ($1, $2, $3, 'red', gen_random_uuid(), 'm1', 'agent', 'green', 'red', now())`,
    [user.id, c.id, `test-${c.id}`],
  );
}

// Each customer holds a timeout rule for one of its instances, and a recompute that is not finished
// (dated ahead, so the sweep leaves it while the test runs).
for (const c of [gone, kept]) {
  const rule = () =>
    q(`INSERT INTO timeout_rules (customer_id, scope, instance_id, timeout_s) SELECT customer_id, 'instance', id, 600 FROM instances WHERE customer_id = $1 LIMIT 1`, [c.id]);
  await eventually(async () => (await rule()).rowCount === 1, 10_000, 'a timeout rule on one of its instances');
  await q(`INSERT INTO timeout_recomputes (customer_id, requested_at) VALUES ($1, now() + interval '1 hour')`, [c.id]);
}

t.test('a deleted customer leaves nothing in any store; its queued reports are dropped; the other customer keeps everything', async (t) => {
  // Everything of both is stored (ClickHouse rows are asynchronous): the starting point.
  await eventually(async () => Object.values(await chCounts(gone.id)).filter((n) => n > 0).length >= 5, 20_000, 'ClickHouse rows of the doomed customer');
  await eventually(async () => Object.values(await chCounts(kept.id)).filter((n) => n > 0).length >= 5, 20_000, 'ClickHouse rows of the kept customer');
  const pgBefore = await pgCounts(gone.id);
  const keptPgBefore = await pgCounts(kept.id);
  const keptChBefore = await chCounts(kept.id);
  t.same(Object.keys(pgBefore).sort(), [...PG_CUSTOMER_TABLES].sort(), 'offboarding knows every Postgres table with a customer_id column');
  // (light_outbox: the sweep may have delivered the row already; a new one comes with each change of colour.)
  for (const [table, n] of Object.entries(pgBefore)) if (table !== 'light_outbox') t.ok(n > 0, `before: ${table} holds rows of the doomed customer (${n})`);
  const instances = (await q('SELECT id, machine_id FROM instances WHERE customer_id = $1', [gone.id])).rows;
  const names = [gone.id, ...instances.flatMap((r) => [r.id, r.machine_id])];
  const keysOf = async () => (await redisKeysAll()).filter((k) => names.some((n) => k.includes(n)));
  t.ok((await keysOf()).length > 0, 'before: Redis keys of the doomed customer (heartbeat keys, quota reservations)');
  t.equal((await uploadsOf(gone.id)).length, 2, 'before: its two upload records');
  const objBefore = (await jsm.streams.info(objStream)).state.messages;
  t.equal(objBefore, 2 * (gone.chunks + kept.chunks), 'before: both customers’ chunks in the object store');
  t.equal(await deadLettersOf(gone.slug), 1, 'before: its dead letter');

  // Reports of the doomed customer wait in the ingest stream while no worker runs.
  const worker = s.procs.find((p) => p.name === 'worker')!;
  await worker.stop();
  for (const m of ['m1', 'm3']) {
    await must(post(`${s.gatewayUrl}/api/ingest/${gone.slug}/${m}/agent/heartbeat`, gone.token, { version: 'late' }), 'queued heartbeat');
    await must(post(`${s.gatewayUrl}/api/ingest/${gone.slug}/${m}/agent/status`, gone.token, { status: 'degraded' }), 'queued status');
  }
  await must(post(`${s.gatewayUrl}/api/ingest/${kept.slug}/m9/agent/heartbeat`, kept.token, { version: 'late' }), "the kept customer's queued heartbeat");

  // Only a system administrator deletes a customer.
  t.equal((await request('DELETE', `${s.apiUrl}/api/admin/customers/${gone.id}`, goneOwner.jwt)).status, 403, "the customer's own owner: 403");
  t.equal((await request('DELETE', `${s.apiUrl}/api/admin/customers/${gone.id}`, keptAdmin.jwt)).status, 403, "another customer's admin: 403");
  const del = await request('DELETE', `${s.apiUrl}/api/admin/customers/${gone.id}`, sysadmin.jwt);
  t.equal(del.status, 202, JSON.stringify(del.body));
  t.match(del.body, { id: gone.id, slug: gone.slug, state: 'deleting' });
  t.equal((await request('DELETE', `${s.apiUrl}/api/admin/customers/${gone.id}`, sysadmin.jwt)).status, 202, 'again while deleting: 202');

  // At once, for every reader: its tokens on both gateways (within CACHE_REFRESH_MS), its owner.
  for (const gw of gateways) {
    await eventually(async () => (await post(`${gw}/api/ingest/${gone.slug}/m1/agent/heartbeat`, gone.token, {})).status === 403, 5000, `${gw} refuses its token (403: token revoked)`);
  }
  t.pass('its token is refused by both gateways');
  t.not((await get(`${s.apiUrl}/api/instances`, goneOwner.jwt)).status, 200, 'its owner reads nothing of it');
  t.notOk((await get(`${s.apiUrl}/api/auth/my-customers`, sysadmin.jwt)).body.items?.some((c: { id: string }) => c.id === gone.id), 'not listed, even to a system administrator');

  // The worker comes back: the queued reports are dropped, not stored, not dead-lettered.
  const again = await s.startWorker();
  await again.waitFor((l) => !!l.msg?.startsWith('reports of a deleted customer dropped') && JSON.stringify(l.dropped ?? {}).includes(gone.id));
  t.pass('the worker logs the dropped reports of the deleted customer');
  await drained(s);
  await eventually(async () => (await q('SELECT 1 FROM customers WHERE id = $1', [gone.id])).rowCount === 0, 60_000, 'the offboarding job finished');
  await again.waitFor((l) => l.msg === 'customer deleted: nothing of it is left' && l.customerId === gone.id);
  await drained(s);

  // Nothing of it anywhere.
  const pgAfter = await pgCounts(gone.id);
  for (const [table, n] of Object.entries(pgAfter)) t.equal(n, 0, `Postgres ${table}: no row of it`);
  t.equal((await q('SELECT count(*)::int AS n FROM customers WHERE id = $1 OR slug = $2', [gone.id, gone.slug])).rows[0].n, 0, 'Postgres customers: gone');
  t.equal((await q('SELECT count(*)::int AS n FROM deleted_customers WHERE id = $1', [gone.id])).rows[0].n, 1, 'the one trace: its id in deleted_customers (its late reports are dropped)');
  const chAfter = await chCounts(gone.id);
  for (const [table, n] of Object.entries(chAfter)) t.equal(n, 0, `ClickHouse ${table}: no row of it`);
  t.same(await keysOf(), [], 'Redis: no key names it, its machines or its instances');
  const due = await s.redis.zrange(`${s.env.REDIS_PREFIX}hbdue`, 0, -1);
  t.notOk(due.some((m) => names.includes(m)), 'Redis: none of its instances is due');
  t.notOk((await s.redis.smembers(`${s.env.REDIS_PREFIX}quota:art:customers`)).includes(gone.id), 'Redis: not among the customers with reservations');
  t.same(await uploadsOf(gone.id), [], 'artifact store: no upload record of it');
  t.equal((await jsm.streams.info(objStream)).state.messages, 2 * kept.chunks, "artifact store: only the other customer's chunks are left");
  t.equal(await deadLettersOf(gone.slug), 0, 'dead letters: none of it');
  t.equal((await request('DELETE', `${s.apiUrl}/api/admin/customers/${gone.id}`, sysadmin.jwt)).status, 404, 'deleting it again: 404');

  // The other customer: everything still there, and its queued heartbeat stored.
  const keptPgAfter = await pgCounts(kept.id);
  // (light_outbox: the sweep delivers the undelivered change at any moment, which empties it.)
  for (const [table, n] of Object.entries(keptPgBefore)) {
    if (table !== 'light_outbox') t.ok(keptPgAfter[table]! >= n && (n === 0 || keptPgAfter[table]! > 0), `the other customer's ${table}: ${n} → ${keptPgAfter[table]}`);
  }
  t.equal((await q(`SELECT count(*)::int AS n FROM machines WHERE customer_id = $1 AND slug = 'm9'`, [kept.id])).rows[0].n, 1, "the other customer's queued report was stored (machine m9)");
  const keptChAfter = await chCounts(kept.id);
  for (const [table, n] of Object.entries(keptChBefore)) t.ok(keptChAfter[table]! >= n, `the other customer's ClickHouse ${table}: ${n} → ${keptChAfter[table]}`);
  t.equal((await uploadsOf(kept.id)).length, 2, "the other customer's upload records");
  t.equal(await deadLettersOf(kept.slug), 1, "the other customer's dead letter");
  t.equal((await post(`${gw2}/api/ingest/${kept.slug}/m1/agent/heartbeat`, kept.token, {})).status, 200, "the other customer's token works");
  const list = await get(`${s.apiUrl}/api/instances`, keptAdmin.jwt);
  t.equal(list.status, 200);
  t.equal(list.body.total, keptPgAfter.instances, "the other customer's instances");
});

t.test('fleet customer delete <slug>: refuses without --yes; with it, marks and waits until the workers removed it', async (t) => {
  const { spawn } = await import('node:child_process');
  const { join } = await import('node:path');
  const { ROOT } = await import('../../deploy/service-process.js');
  const fleet = (...args: string[]) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env } });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      p.on('close', (status) => resolve({ status, stdout, stderr }));
    });
  const c = await s.newCustomer('cli');
  await must(post(`${s.gatewayUrl}/api/ingest/${c.customer.slug}/m1/agent/heartbeat`, c.token, {}), 'heartbeat');
  await eventually(async () => (await q('SELECT 1 FROM instances WHERE customer_id = $1', [c.customer.id])).rowCount === 1, 15_000, 'its instance');

  const no = await fleet('customer', 'delete', c.customer.slug);
  t.equal(no.status, 1, 'without --yes: refused');
  t.match(no.stderr, /run again with --yes/);
  t.equal((await q('SELECT deleting_at FROM customers WHERE id = $1', [c.customer.id])).rows[0].deleting_at, null, 'and nothing changed');

  const yes = await fleet('customer', 'delete', c.customer.slug, '--yes');
  t.equal(yes.status, 0, yes.stderr);
  t.equal(yes.stdout, `${c.customer.slug}\tdeleted\n`);
  t.equal((await q('SELECT count(*)::int AS n FROM instances WHERE customer_id = $1', [c.customer.id])).rows[0].n, 0, 'its rows are gone');
  t.same(await chCounts(c.customer.id), Object.fromEntries(CH_RETENTION_TABLES.map((x) => [x, 0])), 'and its ClickHouse rows');
  const again = await fleet('customer', 'delete', c.customer.slug, '--yes');
  t.equal(again.status, 1, 'a second time: no such customer');
});
