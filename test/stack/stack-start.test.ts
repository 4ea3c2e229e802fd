// `npm start` as a user meets it: a stack of its own (data folder and every port its own), the demo
// customer seeded once with its token printed and saved (mode 600), the README's curl answered
// 200 and the instance listed green within 2 s, a clean stop on SIGTERM, and a second start, by
// `npm start` itself with two workers, that reuses the data, gives every worker its own health
// port, and stops entirely when npm gets SIGTERM (as from a service manager).
import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:net';
import { ROOT } from '../../deploy/service-process.js';
import { stablePorts } from '../helpers/nats-server.js';
import { post, get, eventually } from '../helpers/stack.js';

const dataDir = mkdtempSync(join(tmpdir(), 'fleet-stack-'));
chmodSync(dataDir, 0o755);
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

// Ports below the ephemeral range, kept free for both starts (stablePorts): the ninth is the second
// worker's (WORKER_HTTP_PORT + 1) in the second start.
const free = await stablePorts(9);
const names = ['NATS_PORT', 'REDIS_PORT', 'PG_PORT', 'CLICKHOUSE_HTTP_PORT', 'CLICKHOUSE_TCP_PORT', 'GATEWAY_PORT', 'API_PORT', 'WORKER_HTTP_PORT'] as const;
const ports = Object.fromEntries(names.map((n, i) => [n, free[i]!])) as Record<(typeof names)[number], number>;
const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
for (const k of ['NATS_URL', 'DATABASE_URL', 'REDIS_URL', 'CLICKHOUSE_URL']) delete env[k];
for (const [k, v] of Object.entries(ports)) env[k] = String(v);

function startStack() {
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'deploy', 'stack.js'), 'start'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  return { child, exited, output: () => out };
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.on('connect', () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });
}

const gw = `http://127.0.0.1:${ports.GATEWAY_PORT}`;
const api = `http://127.0.0.1:${ports.API_PORT}`;

/**
 * A subtest that fails leaves no stack behind (it would hold the ports and cores of every later
 * test file) and shows the stack's own output, where a slow or failed start-up step is logged.
 */
function stopOnFailure(t: Test, st: { child: ReturnType<typeof spawn>; exited: Promise<number | null>; output: () => string }) {
  t.teardown(async () => {
    if (st.child.exitCode !== null || st.child.signalCode !== null) return;
    if (!t.passing()) t.comment(`the stack's output:\n${st.output()}`);
    st.child.kill('SIGTERM');
    await Promise.race([st.exited, new Promise((r) => setTimeout(r, 60_000))]);
  });
}

t.test('first start: servers, demo seed, the README example works, clean stop', async (t) => {
  const st = startStack();
  stopOnFailure(t, st);
  await eventually(async () => /api http:\/\/127\.0\.0\.1/.test(st.output()), 120_000, 'stack up');
  const out = st.output();
  t.match(out, /Seeded customer "demo"/);
  const token = readFileSync(join(dataDir, 'demo-token'), 'utf8').trim();
  t.equal(statSync(join(dataDir, 'demo-token')).mode & 0o777, 0o600, 'token file mode 600');
  t.ok(out.includes(token), 'the token is printed once');
  t.match(out, /curl -H "Authorization: Bearer/);
  for (const sub of ['nats', 'redis', 'postgres', 'clickhouse']) t.ok(statSync(join(dataDir, sub)).isDirectory(), `${sub} data under DATA_DIR`);

  const r = await eventually(async () => {
    const x = await post(`${gw}/api/ingest/demo/m1/agent/heartbeat`, token, {});
    return x.status === 200 ? x : null;
  }, 20_000, 'gateway answering');
  t.same(r.body, { ok: true });
  const t0 = Date.now();
  const item = await eventually(async () => (await get(`${api}/api/instances`, token)).body.items?.[0], 2000, 'listed within 2 s');
  t.ok(Date.now() - t0 <= 2000);
  t.match(item, { machine: 'm1', software: 'agent', light: 'green' });
  t.ok(item.last_seen_at);
  t.equal((await get(`http://127.0.0.1:${ports.WORKER_HTTP_PORT}/healthz`, null)).status, 200, 'worker health endpoint');
  const password = readFileSync(join(dataDir, 'demo-password'), 'utf8').trim();
  t.equal(statSync(join(dataDir, 'demo-password')).mode & 0o777, 0o600, 'password file mode 600');
  t.ok(out.includes(password), 'the password is printed once');
  const session = await post(`${api}/auth/login`, null, { email: 'demo@example.com', password });
  t.equal(session.status, 200, 'the demo user logs in');
  t.match(session.body.customer, { slug: 'demo', role: 'owner' });

  st.child.kill('SIGTERM');
  t.equal(await st.exited, 0, 'exit 0 on SIGTERM');
  t.match(st.output(), /stopped/);
  for (const [name, port] of Object.entries(ports)) t.notOk(await portOpen(port), `${name} closed after stop`);
});

t.test('second start, as `npm start` with two workers: reuses the data, each worker has its own port, and SIGTERM to npm stops everything', async (t) => {
  // The command a user (or a service manager) runs; it sends SIGTERM to npm's own pid.
  const child = spawn('npm', ['start'], { cwd: ROOT, env: { ...env, WORKERS: '2' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const st = { child, exited: new Promise<number | null>((r) => child.on('exit', (c) => r(c))), output: () => out };
  stopOnFailure(t, st);
  await eventually(async () => /api http:\/\/127\.0\.0\.1/.test(st.output()), 120_000, 'stack up again');
  for (const port of [ports.WORKER_HTTP_PORT, ports.WORKER_HTTP_PORT + 1]) {
    // A worker that is not ready says why (its /readyz detail); the failure names it.
    const r = await eventually(async () => {
      const x = await get(`http://127.0.0.1:${port}/readyz`, null).catch((e: Error) => ({ status: 0, body: { detail: e.message } }));
      if (x.status === 200) return x;
      throw new Error(`last /readyz: ${x.status} ${JSON.stringify(x.body)}`);
    }, 30_000, `worker on ${port} ready`);
    t.same(r.body, { ok: true }, `worker /readyz on ${port}`);
  }
  t.notMatch(st.output(), /exited \(/, 'no process crash-looped');
  t.notMatch(st.output(), /Seeded/);
  t.match(st.output(), /demo customer exists/);
  const token = readFileSync(join(dataDir, 'demo-token'), 'utf8').trim();
  const list = await eventually(async () => {
    const l = await get(`${api}/api/instances`, token);
    return l.status === 200 ? l.body : null;
  }, 20_000);
  t.equal(list.items[0]?.machine, 'm1', 'the instance from the first run is still there');
  st.child.kill('SIGTERM');
  t.equal(await st.exited, 0, 'npm exits 0 on SIGTERM');
  await eventually(async () => {
    for (const port of [...Object.values(ports), ports.WORKER_HTTP_PORT + 1]) if (await portOpen(port)) return false;
    return true;
  }, 60_000, 'every process of the stack stopped (no port left open)');
  t.match(st.output(), /stopped/);
});
