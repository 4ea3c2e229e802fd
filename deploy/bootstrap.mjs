#!/usr/bin/env node
// Entry point of `npm start`, `npm test`, `npm run bench`, `npm run cluster` and
// `npm run test:cluster` on a fresh clone.
//
// It may not import any npm package (they are not installed yet): it installs the missing Debian
// packages and npm dependencies, compiles the TypeScript, and then hands over to the compiled
// stack runner (deploy/stack.ts) with the same mode and arguments (the bench: bench/main.ts).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, statSync, readdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const [mode = 'start', ...rest] = process.argv.slice(2);
const env = process.env;

function log(msg) {
  process.stderr.write(`[bootstrap] ${msg}\n`);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root, ...opts });
  if (r.status !== 0) {
    log(`failed: ${cmd} ${args.join(' ')} (exit ${r.status ?? r.signal})`);
    process.exit(r.status || 1);
  }
}

function haveCommand(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

function havePostgres() {
  if (!existsSync('/usr/lib/postgresql')) return false;
  return readdirSync('/usr/lib/postgresql').some((v) => existsSync(`/usr/lib/postgresql/${v}/bin/initdb`));
}

// Debian packages this mode needs, skipping servers the environment points elsewhere.
function wantedPackages() {
  const wants = [];
  if (!env.NATS_URL && !haveCommand('nats-server')) wants.push('nats-server');
  if (!env.REDIS_URL && !haveCommand('redis-server')) wants.push('redis-server');
  if (!env.DATABASE_URL && !havePostgres()) wants.push('postgresql');
  if (!env.CLICKHOUSE_URL && !haveCommand('clickhouse-server')) wants.push('clickhouse-server');
  if (mode === 'test' && env.SKIP_BROWSER_TESTS !== '1' && !existsSync('/usr/bin/chromium')) {
    wants.push('chromium');
  }
  // promtool (in Debian's `prometheus` package) checks and unit-tests deploy/prometheus/alerts.yml
  // and lints every process's /metrics (test/stack/observability.test.ts).
  if (mode === 'test' && !haveCommand('promtool')) wants.push('prometheus');
  if (mode === 'bench' && !haveCommand('wrk')) wants.push('wrk');
  // The cluster (deploy/cluster.ts): ZooKeeper for the replicated ClickHouse, nginx for TLS in
  // front, openssl for its certificate (Debian's zookeeper package brings a Java runtime).
  if (mode === 'cluster' || mode === 'test-cluster') {
    if (!existsSync('/usr/share/java/zookeeper.jar')) wants.push('zookeeper');
    if (!haveCommand('nginx') && !existsSync('/usr/sbin/nginx')) wants.push('nginx');
    if (!haveCommand('openssl')) wants.push('openssl');
  }
  return wants;
}

function ensureDebianPackages() {
  const wants = wantedPackages();
  if (wants.length === 0) return;
  if (process.getuid && process.getuid() !== 0) {
    log(`missing Debian packages: ${wants.join(' ')}; run as root or install them: apt-get install -y ${wants.join(' ')}`);
    process.exit(1);
  }
  log(`installing Debian packages: ${wants.join(' ')}`);
  const aptEnv = { ...env, DEBIAN_FRONTEND: 'noninteractive' };
  run('apt-get', ['update', '-q'], { env: aptEnv });
  // Installing a server package tries to start its system service; in containers that fails
  // harmlessly ("policy-rc.d denied execution"). The project never uses the system services.
  run('apt-get', ['install', '-y', '-q', '--no-install-recommends', ...wants], { env: aptEnv });
}

function mtime(p) {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return 0;
  }
}

function ensureNodeModules() {
  const stamp = join(root, 'node_modules', '.package-lock.json');
  const lock = join(root, 'package-lock.json');
  const pkg = join(root, 'package.json');
  if (existsSync(stamp) && mtime(stamp) >= mtime(lock) && mtime(stamp) >= mtime(pkg)) return;
  log('installing npm dependencies');
  // `npm install` rather than `npm ci`: it installs the locked versions all the same, and npm 11
  // records only this platform's optional binaries in the lock, which `npm ci` then calls out of sync.
  run('npm', ['install', '--no-audit', '--no-fund']);
}

// The server's sources (every .ts and .json outside node_modules, dist and the dashboard's own
// folder); `all` counts every file (the dashboard's sources include HTML, CSS and images).
function newestSource(dir, newest = 0, all = false) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.') || entry.name === 'dist') continue;
    const p = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!all && dir === root && entry.name === 'dashboard') continue;
      newest = newestSource(p, newest, all);
    } else if (all || /\.(ts|json)$/.test(entry.name)) newest = Math.max(newest, mtime(p));
  }
  return newest;
}

function ensureBuild() {
  const stamp = join(root, 'dist', '.build-stamp');
  if (existsSync(stamp) && mtime(stamp) >= newestSource(root)) return;
  log('compiling TypeScript');
  run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json']);
  writeFileSync(stamp, new Date().toISOString());
}

// The dashboard (dashboard/ -> dist/dashboard, served by the api): type-checked with its own
// tsconfig (browser types, JSX), bundled by Vite. Rebuilt only when a file under dashboard/ or the
// lock file (library versions) is newer than the last build.
function ensureDashboard() {
  const stamp = join(root, 'dist', 'dashboard', '.build-stamp');
  const newest = Math.max(newestSource(join(root, 'dashboard'), 0, true), mtime(join(root, 'package-lock.json')));
  if (existsSync(stamp) && mtime(stamp) >= newest) return;
  log('building the dashboard');
  run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join('dashboard', 'tsconfig.json')]);
  run(process.execPath, [join(root, 'node_modules', 'vite', 'bin', 'vite.js'), 'build', '--config', join('dashboard', 'vite.config.mjs'), '--logLevel', 'warn']);
  writeFileSync(stamp, new Date().toISOString());
}

ensureDebianPackages();
ensureNodeModules();
ensureBuild();
ensureDashboard();
if (mode === 'setup') process.exit(0);

// Hand over. The stack runner shuts down cleanly on SIGINT/SIGTERM; forward ours so that a plain
// `kill` of npm or of this process ends in the same clean shutdown, and wait for it.
// The bench has an entry of its own (bench/main.ts); every other mode is the stack runner's.
const entry = mode === 'bench' ? [join(root, 'dist', 'bench', 'main.js'), ...rest] : [join(root, 'dist', 'deploy', 'stack.js'), mode, ...rest];
const child = spawn(process.execPath, entry, {
  stdio: 'inherit',
  cwd: root,
});
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    if (child.exitCode === null) child.kill(sig);
  });
}
// The stack lives as long as what started it: when npm itself is gone (killed without passing the
// signal on), this process has a new parent, and stops the stack as on SIGTERM.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent && child.exitCode === null) child.kill('SIGTERM');
}, 500).unref();
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
