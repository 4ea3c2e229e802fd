// `npm start` on ports another stack holds: it stops with an error naming the port and the variable
// to change, instead of reporting servers it did not start as ready and running its services on the
// other stack's databases (seen: a second checkout's gateway, worker and api on the first one's
// servers, its demo token refused). The other stack here is the test stack itself, whose servers
// this file's runner started: nothing may be written to them.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, chmodSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ROOT } from '../../deploy/service-process.js';
import { freePort } from '../helpers/nats-server.js';
import { connectNats } from '../../lib/infra/nats.js';
import { isNotFound } from '../../lib/infra/jetstream-errors.js';

const portOf = (url: string | undefined) => Number(new URL(url!).port);
const taken = {
  NATS_PORT: portOf(process.env.NATS_URL),
  REDIS_PORT: portOf(process.env.REDIS_URL),
  PG_PORT: portOf(process.env.DATABASE_URL),
  CLICKHOUSE_HTTP_PORT: portOf(process.env.CLICKHOUSE_URL),
};

async function stack(ports: Record<string, number>): Promise<{ code: number | null; out: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'fleet-ports-'));
  chmodSync(dataDir, 0o755);
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  for (const k of ['NATS_URL', 'DATABASE_URL', 'REDIS_URL', 'CLICKHOUSE_URL']) delete env[k];
  for (const [k, v] of Object.entries(ports)) env[k] = String(v);
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'deploy', 'stack.js'), 'start'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const killer = setTimeout(() => child.kill('SIGKILL'), 180_000);
  const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  clearTimeout(killer);
  rmSync(dataDir, { recursive: true, force: true });
  return { code, out };
}

t.test("on the running test stack's ports: a clear error, and nothing written to that stack", async (t) => {
  const free = { CLICKHOUSE_TCP_PORT: await freePort(), GATEWAY_PORT: await freePort(), API_PORT: await freePort(), WORKER_HTTP_PORT: await freePort() };
  const r = await stack({ ...taken, ...free });
  t.equal(r.code, 1, 'it stops');
  t.match(r.out, /port (\d+) is in use by another process; set (NATS_PORT|REDIS_PORT|PG_PORT|CLICKHOUSE_HTTP_PORT) to a free port/, r.out.slice(-2000));
  t.notMatch(r.out, /ready on 127\.0\.0\.1:(24222|26379|25432|28123)|gateway http/, 'no server of the other stack reported ready');
  // What the second stack would have written first: its stream and its demo customer.
  const nc = await connectNats(process.env.NATS_URL!, 'ports-test');
  const jsm = await nc.jetstreamManager();
  const stream = await jsm.streams.info('INGEST').then(
    () => 'exists',
    (e) => (isNotFound(e) ? 'absent' : String(e)),
  );
  t.equal(stream, 'absent', 'no stream INGEST on the other stack');
  await nc.close();
  const c = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await c.connect();
  const tables = await c.query(`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_name = 'customers' AND table_schema = 'public'`);
  await c.end();
  t.equal(tables.rows[0].n, 0, "no migration ran on the other stack's database");
});

t.test("a front door's port in use: the same error for GATEWAY_PORT, and the servers it started are stopped", async (t) => {
  const blocker = createServer((s) => s.destroy());
  const port = await new Promise<number>((res) => blocker.listen(0, '127.0.0.1', () => res((blocker.address() as { port: number }).port)));
  let touched = 0;
  blocker.on('connection', () => touched++);
  const ports = {
    NATS_PORT: await freePort(),
    REDIS_PORT: await freePort(),
    PG_PORT: await freePort(),
    CLICKHOUSE_HTTP_PORT: await freePort(),
    CLICKHOUSE_TCP_PORT: await freePort(),
    GATEWAY_PORT: port,
    API_PORT: await freePort(),
    WORKER_HTTP_PORT: await freePort(),
  };
  const r = await stack(ports);
  blocker.close();
  t.equal(r.code, 1);
  t.match(r.out, new RegExp(`port ${port} is in use by another process; set GATEWAY_PORT to a free port`), r.out.slice(-2000));
  t.match(r.out, /postgres stopped/, 'the servers it had started are stopped again');
  t.ok(touched <= 1, `the other process was only probed (${touched} connection)`);
});
