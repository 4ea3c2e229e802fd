// Postgres refusing the worker's writes, found from outside, on a Postgres of the test's own
// (ALTER SYSTEM reaches every database of a server): read-only for a while (SQLSTATE 25006),
// and the worker's role's password changed (28P01; pg_hba asks that role for its password).
// Reports acknowledged during the fault wait, the worker says so, none is dead-lettered, and
// afterwards each is stored exactly once, its instance created (test/helpers/outage.ts). The api's
// writes meanwhile answer 503 with Retry-After (an outage), its reads go on.
import t from 'tap';
import pg from 'pg';
import { readFileSync, writeFileSync } from 'node:fs';
import { testStack, eventually, post, get } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { OwnPostgres } from '../helpers/postgres-server.js';
import { outageTest } from '../helpers/outage.js';

const server = new OwnPostgres(await freePort());
await server.start();
t.teardown(() => server.destroy());

/** Statements as the superuser (trust on loopback), one at a time (ALTER SYSTEM runs outside a transaction). */
async function admin(...sql: string[]): Promise<void> {
  const c = new pg.Client({ connectionString: server.url() });
  await c.connect();
  try {
    for (const q of sql) await c.query(q);
  } finally {
    await c.end();
  }
}

// The services' role, with a password that pg_hba asks for (the superuser keeps trust).
const ROLE = 'fleet_outage';
await admin(`CREATE ROLE ${ROLE} LOGIN CREATEDB PASSWORD 'right-1'`);
const c = new pg.Client({ connectionString: server.url() });
await c.connect();
const hba = (await c.query<{ setting: string }>("SELECT setting FROM pg_settings WHERE name = 'hba_file'")).rows[0]!.setting;
await c.end();
writeFileSync(hba, `host all ${ROLE} 127.0.0.1/32 scram-sha-256\n${readFileSync(hba, 'utf8')}`);
await admin('SELECT pg_reload_conf()');

const s = await testStack(t, 'outpg', {
  pgUrl: `postgres://${ROLE}:right-1@127.0.0.1:${server.port}/postgres`,
  worker: false,
  env: { WORKER_RETRY_MAX_MS: '1000' },
});
const port = await freePort();
const worker = { proc: await s.startWorker({ WORKER_HTTP_PORT: String(port) }), url: `http://127.0.0.1:${port}` };

t.test('read-only Postgres: the reports wait until it takes writes again, then are stored once', async (t) => {
  await outageTest(t, s, worker, 'readonly', 4, {
    dependency: 'postgres',
    reason: /Postgres error 25006 read_only_sql_transaction/,
    start: () => admin('ALTER SYSTEM SET default_transaction_read_only = on', 'SELECT pg_reload_conf()'),
    end: () => admin('SET default_transaction_read_only = off', 'ALTER SYSTEM RESET default_transaction_read_only', 'SELECT pg_reload_conf()'),
  });
});

t.test("the role's password changed: the reports wait until it is right again, then are stored once", async (t) => {
  await outageTest(t, s, worker, 'password', 4, {
    dependency: 'postgres',
    reason: /Postgres error 28P01 invalid_password/,
    // The connections already open keep working: they are ended, and new ones need the password.
    start: () => admin(`ALTER ROLE ${ROLE} PASSWORD 'wrong-2'`, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '${ROLE}'`),
    end: () => admin(`ALTER ROLE ${ROLE} PASSWORD 'right-1'`),
  });
});

t.test('read-only Postgres under the api: a write is 503 with Retry-After (an outage, not 500), reads still answer, and the write goes through afterwards', async (t) => {
  const api = { url: s.apiUrl };
  const user = await s.newUser('admin');
  const rule = { scope: 'customer', timeout_s: 600 };
  await admin('ALTER SYSTEM SET default_transaction_read_only = on', 'SELECT pg_reload_conf()');
  try {
    // pg_reload_conf reaches each backend at its next statement: a few tries.
    const refused = await eventually(async () => {
      const r = await post(`${api.url}/api/timeout-rules`, user.jwt, rule);
      return r.status === 503 ? r : null;
    }, 10_000, 'the write refused as an outage');
    t.equal(refused.headers.get('retry-after'), '5');
    t.same(refused.body, { detail: 'postgres unavailable; retry later' }, "no server text in the answer");
    t.equal((await get(`${api.url}/api/instances`, user.jwt)).status, 200, 'reads still answer');
  } finally {
    await admin('SET default_transaction_read_only = off', 'ALTER SYSTEM RESET default_transaction_read_only', 'SELECT pg_reload_conf()');
  }
  const made = await eventually(async () => {
    const r = await post(`${api.url}/api/timeout-rules`, user.jwt, rule);
    return r.status === 201 ? r : null;
  }, 10_000, 'the write once Postgres takes writes again');
  t.equal(made.body.rule.timeout_s, 600);
});
