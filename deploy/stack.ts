// The stack runner behind `npm start` and `npm test` (called by deploy/bootstrap.mjs after install
// and build). Reads top-down:
//   start    servers -> migrations -> stream -> demo seed -> gateway, workers, api -> wait for a signal
//   test     fresh test servers -> migrations -> tap over dist/test -> "N passed, N failed"
//   (bench: bench/main.ts, its own entry: fresh bench servers -> bench/run.ts)
//   servers  only the four servers, for working on one process by hand
//   cluster       the production shape on loopback (deploy/cluster.ts): servers -> schema, R3 streams -> demo seed -> 2+2+2 processes
//   test-cluster  the cluster tests (test/cluster/): each file starts a cluster of its own
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configOrExit, type Config } from '../lib/infra/config.js';
import { migrate } from '../lib/store/migrate.js';
import { connectNats, ensureStreams } from '../lib/infra/nats.js';
import { createPool } from '../lib/infra/postgres.js';
import { createCustomer, createToken, findCustomer } from '../lib/store/customers.js';
import { createUser, addMembership, findUserByLogin, newPassword } from '../lib/store/accounts.js';
import { startLocalServers, stopServers, ensurePortFree, useDefaults, freshServers, type LocalServer } from './local-servers.js';
import { failureLines, runTests, type TapCounts } from './test-runner.js';
import { nodeFlags, sessionSecret } from './service-process.js';
import { newRun } from './run-info.js';
import { Cluster, CLUSTER_BASE_PORT } from './cluster.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const log = (msg: string) => process.stderr.write(`[stack] ${msg}\n`);

async function prepare(cfg: Config): Promise<void> {
  await migrate(cfg, log);
  const nc = await connectNats(cfg.natsUrl, 'fleet-stack');
  try {
    await ensureStreams(await nc.jetstreamManager(), cfg);
  } finally {
    await nc.close();
  }
}

/**
 * First start: the demo customer with a token of both scopes, and the user demo@example.com, owner
 * of it. The token and the password are printed once and saved under DATA_DIR (mode 600).
 */
async function seedDemo(cfg: Config, urls = { gateway: `http://${cfg.gateway.host}:${cfg.gateway.port}`, api: `http://${cfg.api.host}:${cfg.api.port}`, curl: 'curl' }): Promise<void> {
  const pool = createPool(cfg.databaseUrl, 1, 'fleet-seed');
  try {
    const tokenFile = join(cfg.dataDir, 'demo-token');
    const passwordFile = join(cfg.dataDir, 'demo-password');
    const lines: string[] = [];
    let customer = await findCustomer(pool, 'demo');
    if (!customer) {
      customer = await createCustomer(pool, 'demo', 'Demo customer');
      const { token } = await createToken(pool, customer.id, 'demo token', ['ingest', 'read']);
      writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
      lines.push(`Seeded customer "demo". Its API token (shown once; saved to ${tokenFile}, mode 600):`, '', `  ${token}`, '');
    } else if (existsSync(tokenFile)) log(`demo customer exists; its token is in ${tokenFile}`);
    if (!(await findUserByLogin(pool, 'demo@example.com'))) {
      const password = newPassword();
      const user = await createUser(pool, { email: 'demo@example.com', username: 'demo', password });
      await addMembership(pool, user.id, customer.id, 'owner');
      writeFileSync(passwordFile, password + '\n', { mode: 0o600 });
      lines.push(`Seeded dashboard user demo@example.com (owner of demo). Password (shown once; saved to ${passwordFile}, mode 600):`, '', `  ${password}`, '');
    }
    if (lines.length === 0) return;
    const { gateway: g, api: a, curl } = urls;
    process.stdout.write(
      [
        '',
        ...lines,
        `Dashboard: ${a}/ (log in as demo@example.com with the password above)`,
        '',
        'Try it:',
        `  ${curl} -H "Authorization: Bearer $(cat ${tokenFile})" -H 'Content-Type: application/json' -d '{}' \\`,
        `    ${g}/api/ingest/demo/m1/agent/heartbeat`,
        `  ${curl} -H "Authorization: Bearer $(cat ${tokenFile})" ${a}/api/instances`,
        '',
      ].join('\n'),
    );
  } finally {
    await pool.end();
  }
}

interface Managed {
  name: string;
  script: string;
  env: NodeJS.ProcessEnv;
  child?: ChildProcess;
  stopping?: boolean;
}

function launch(m: Managed): void {
  // stdin is a pipe the child watches: if this runner dies, the child sees EOF and shuts down.
  const child = spawn(process.execPath, [...nodeFlags(m.script), join(root, 'dist', m.script)], {
    cwd: root,
    env: { ...process.env, ...m.env, FLEET_SUPERVISED: '1' },
    stdio: ['pipe', 'inherit', 'inherit'],
    detached: true,
  });
  m.child = child;
  child.on('exit', (code, signal) => {
    if (m.stopping) return;
    log(`${m.name} exited (${code ?? signal}); restarting in 1 s`);
    setTimeout(() => !m.stopping && launch(m), 1000);
  });
}

async function stop(m: Managed, ms: number): Promise<void> {
  m.stopping = true;
  const child = m.child;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    const t = setTimeout(() => {
      log(`${m.name} did not stop in ${ms} ms; killing it`);
      child.kill('SIGKILL');
    }, ms);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

async function start(): Promise<void> {
  const cfg = configOrExit('stack');
  mkdirSync(cfg.dataDir, { recursive: true });
  let servers: LocalServer[];
  try {
    servers = await startLocalServers(cfg, log);
  } catch (e) {
    log(`start-up failed: ${(e as Error).message}`);
    process.exit(1);
  }
  let apps: Managed[] = [];
  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log(`${why}: stopping`);
    // Front doors first (no new work), then the workers finish their batches, then the servers.
    const isWorker = (a: Managed) => a.script.startsWith('workers/');
    await Promise.all(apps.filter((a) => !isWorker(a)).map((a) => stop(a, cfg.gateway.shutdownGraceMs + 5000)));
    await Promise.all(apps.filter(isWorker).map((a) => stop(a, 30_000)));
    await stopServers(servers, log);
    log('stopped');
    process.exit(0);
  };
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => void shutdown(sig));
  try {
    await prepare(cfg);
    await seedDemo(cfg);
  } catch (e) {
    log(`start-up failed: ${(e as Error).stack ?? e}`);
    await stopServers(servers, log);
    process.exit(1);
  }
  const workers = cfg.worker.processes;
  // Every worker has its own /healthz, /readyz and /metrics: worker i on WORKER_HTTP_PORT + i.
  const workerPort = process.env.WORKER_HTTP_PORT ? cfg.worker.httpPort : 8082;
  apps = [
    { name: 'gateway', script: 'gateway/main.js', env: {} },
    ...Array.from({ length: workers }, (_, i) => ({
      name: workers > 1 ? `worker ${i + 1}` : 'worker',
      script: 'workers/main.js',
      env: { WORKER_HTTP_PORT: workerPort > 0 ? String(workerPort + i) : '0' },
    })),
    { name: 'api', script: 'api/main.js', env: { JWT_SECRET: sessionSecret(cfg.dataDir, cfg.api.jwtSecret) } },
  ];
  if (shuttingDown) return;
  // The front doors' ports must be free too: else their readiness below would be another stack's.
  const appPorts: [number, string][] = [
    [cfg.gateway.port, 'GATEWAY_PORT'],
    [cfg.api.port, 'API_PORT'],
    ...Array.from({ length: workerPort > 0 ? workers : 0 }, (_, i) => [workerPort + i, 'WORKER_HTTP_PORT'] as [number, string]),
  ];
  try {
    for (const [port, variable] of appPorts) if (port > 0) await ensurePortFree(port, variable);
  } catch (e) {
    log(`start-up failed: ${(e as Error).message}`);
    await stopServers(servers, log);
    process.exit(1);
  }
  for (const a of apps) launch(a);
  // Say "up" only once the front doors answer ready: the README's curl works from that line on.
  const g = `http://${cfg.gateway.host}:${cfg.gateway.port}`;
  const a = `http://${cfg.api.host}:${cfg.api.port}`;
  await Promise.all([waitReady(`${g}/readyz`), waitReady(`${a}/readyz`)]);
  if (!shuttingDown) log(`gateway ${g}  api ${a}  dashboard ${a}/  (Ctrl-C stops everything)`);
}

async function waitReady(url: string, ms = 120_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const ok = await fetch(url, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  log(`${url} not ready after ${ms} ms; see the logs above`);
}

async function test(args: string[]): Promise<void> {
  useDefaults('test');
  const { cfg, servers } = await freshServers(true, log);
  let counts: TapCounts = { passed: 0, failed: 1, failures: ['the test servers did not start'] };
  try {
    counts = await runTests(cfg, root, args);
  } finally {
    await stopServers(servers, log);
  }
  process.stdout.write(`\n${failureLines(counts)}${counts.passed} passed, ${counts.failed} failed\n`);
  process.exit(counts.failed === 0 ? 0 : 1);
}


async function serversOnly(): Promise<void> {
  const cfg = configOrExit('stack');
  const servers: LocalServer[] = await startLocalServers(cfg, log);
  await prepare(cfg);
  log('servers up; Ctrl-C stops them');
  const bye = () => void stopServers(servers, log).then(() => process.exit(0));
  process.on('SIGINT', bye);
  process.on('SIGTERM', bye);
}

/** `npm run cluster`: the production shape on loopback, data under .data/cluster, until a signal. */
async function cluster(): Promise<void> {
  const base = Number(process.env.CLUSTER_BASE_PORT || CLUSTER_BASE_PORT);
  if (!Number.isInteger(base) || base < 1 || base > 65535 - 100) throw new Error(`CLUSTER_BASE_PORT=${process.env.CLUSTER_BASE_PORT}: must be a port number below 65435`);
  const c = new Cluster({ dataDir: resolve(process.env.DATA_DIR || '.data/cluster'), base, log, echo: true });
  let stopping = false;
  const shutdown = async (why: string) => {
    if (stopping) return;
    stopping = true;
    log(`${why}: stopping the cluster`);
    await c.stop();
    log('stopped');
    process.exit(0);
  };
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => void shutdown(sig));
  try {
    await c.startServers();
    await seedDemo(c.cfg, { gateway: c.url, api: c.url, curl: `curl --cacert ${c.tls.cert}` });
    await c.startApps();
  } catch (e) {
    log(`cluster start-up failed: ${(e as Error).stack ?? e}`);
    await shutdown('start-up failed');
    return;
  }
  if (!stopping) log(`cluster up: ${c.url} (gateways and apis behind nginx, TLS certificate ${c.tls.cert}); Ctrl-C stops everything`);
}

/**
 * `npm run test:cluster`: every file under test/cluster starts and stops its own cluster. The files
 * share one run (CLUSTER_RUN: id, start, commit), under which they record their failover figures
 * in bench/results/cluster-failover-<start>.json (bench/results.ts `recordClusterResult`).
 */
async function testCluster(args: string[]): Promise<void> {
  const run = newRun(root, { quick: false, only: args.length ? args : null });
  process.env.CLUSTER_RUN = JSON.stringify(run);
  log(`cluster run ${run.run_id}, commit ${run.git_commit ?? 'unknown'}${run.git_dirty ? ' with uncommitted changes' : ''}`);
  const counts = await runTests(null, root, args);
  process.stdout.write(`\n${failureLines(counts)}${counts.passed} passed, ${counts.failed} failed\n`);
  process.exit(counts.failed === 0 ? 0 : 1);
}

const [mode, ...args] = process.argv.slice(2);
const modes: Record<string, (a: string[]) => Promise<void>> = { start, test, servers: serversOnly, cluster, 'test-cluster': testCluster };
const fn = modes[mode ?? 'start'];
if (!fn) {
  log(`unknown mode ${mode}; use one of ${Object.keys(modes).join(', ')}`);
  process.exit(2);
}
fn(args).catch((e) => {
  log(`failed: ${(e as Error).stack ?? e}`);
  process.exit(1);
});
