// The Dockerfile, parsed (dockerfile-ast) and held to the project without a Docker engine: the build
// stage runs the README's own steps (npm ci from the lockfile, npm run build, prune); the runtime
// stage holds only what the processes load, runs as a non-root user, on the Node major that
// package.json's engines allow and the uWebSockets.js build has binaries for; every command it or
// the manifests name exists after `npm run build`; the HEALTHCHECK passes only on a 200 /healthz.
import t from 'tap';
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { DockerfileParser, type Copy, type From, type Instruction } from 'dockerfile-ast';
import { parseSettings, SETTING_NAMES } from '../../lib/infra/config.js';
import { ROOT, nodeFlags } from '../../deploy/service-process.js';

const dockerfile = DockerfileParser.parse(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const froms = dockerfile.getFROMs();
const instructions = dockerfile.getInstructions();
/** The instructions of each stage, by stage name. */
const stages = new Map<string, Instruction[]>();
{
  let current: Instruction[] = [];
  for (const i of instructions) {
    if (i.getKeyword() === 'FROM') stages.set((i as From).getBuildStage() ?? String(stages.size), (current = []));
    else current.push(i);
  }
}
const build = stages.get('build')!;
const runtime = [...stages.values()].at(-1)!;
const args = (i: Instruction) => i.getArgumentsContent() ?? '';
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

/** Node's module ABI (process.versions.modules) per major: the uws_<platform>_<arch>_<abi>.node a build needs. */
const NODE_ABI: Record<number, number> = { 18: 108, 20: 115, 22: 127, 24: 137 };

t.test('two stages on Node 20, Debian 12 (bookworm, glibc 2.36)', async (t) => {
  t.equal(froms.length, 2);
  t.same(froms.map((f) => f.getBuildStage()), ['build', 'runtime']);
  for (const f of froms) {
    t.equal(f.getImageName(), 'node');
    t.match(f.getImageTag(), /^20(\.\d+)*-bookworm(-slim)?$/, `${f.getBuildStage()}: Node 20 on bookworm`);
  }
});

t.test("the Node major matches package.json's engines and the uWebSockets.js build", async (t) => {
  const major = Number(/^(\d+)/.exec(froms.at(-1)!.getImageTag()!)![1]);
  const min = /^>=\s*(\d+)/.exec(pkg.engines.node);
  t.ok(min && major >= Number(min[1]), `engines ${pkg.engines.node} allows Node ${major}`);
  t.equal(pkg.dependencies['uWebSockets.js'], 'npm:@trufflesuite/uws-js-unofficial@20.30.0-unofficial.0', 'the uWS build the image is made for');
  const abi = NODE_ABI[major]!;
  if (Number(process.versions.node.split('.')[0]) === major) t.equal(Number(process.versions.modules), abi, 'the ABI table agrees with this Node');
  const binaries = readdirSync(join(ROOT, 'node_modules', 'uWebSockets.js', 'binaries'));
  for (const arch of ['x64', 'arm64']) t.ok(binaries.includes(`uws_linux_${arch}_${abi}.node`), `native binary for Node ${major} on linux/${arch}`);
  const newer = Object.entries(NODE_ABI).filter(([m]) => Number(m) > major);
  for (const [m, a] of newer) t.notOk(binaries.includes(`uws_linux_x64_${a}.node`), `none for Node ${m} (why the image stays on ${major}; docs/deploy.md)`);
});

t.test('the build stage runs npm ci from the lockfile, npm run build, then prunes dev dependencies', async (t) => {
  const runs = build.filter((i) => i.getKeyword() === 'RUN').map(args);
  const at = (re: RegExp) => runs.findIndex((r) => re.test(r));
  const ci = at(/(^|&&\s*)npm ci\b/);
  const buildStep = at(/(^|&&\s*)npm run build\b/);
  const prune = at(/(^|&&\s*)npm prune --omit=dev\b/);
  t.ok(ci >= 0 && buildStep > ci && prune > buildStep, 'npm ci, then npm run build, then npm prune --omit=dev');
  t.notOk(runs.some((r) => /\bnpm (install|i)\b/.test(r)), 'never npm install (it may change the lockfile)');
  const copies = build.filter((i) => i.getKeyword() === 'COPY').map(args);
  const lockCopy = copies.findIndex((c) => c.split(/\s+/).includes('package-lock.json'));
  t.ok(lockCopy === 0, 'package.json and package-lock.json are copied first (the install layer is cached)');
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
  t.ok(lock.lockfileVersion >= 2);
  t.same(lock.packages[''].dependencies, pkg.dependencies, 'the lockfile matches package.json (npm ci refuses otherwise)');
  t.same(lock.packages[''].devDependencies, pkg.devDependencies);
  t.equal(pkg.scripts.build, 'tsc -p tsconfig.json && npm run build:dashboard', 'npm run build compiles the server and the dashboard');
  // What the build stage copies is what tsc and Vite need: every source folder an entry point imports.
  const copied = copies.slice(1).map((c) => c.split(/\s+/)[0]!);
  for (const dir of ['lib', 'cli', 'gateway', 'workers', 'api', 'dashboard', 'bin', 'tsconfig.json']) t.ok(copied.includes(dir), `${dir} is copied`);
});

/** Every file an entry point reaches through relative imports (the compiled output). */
function importGraph(entry: string, seen = new Set<string>()): Set<string> {
  if (seen.has(entry)) return seen;
  seen.add(entry);
  const src = readFileSync(entry, 'utf8');
  for (const m of src.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) importGraph(resolve(dirname(entry), m[1]!), seen);
  return seen;
}

t.test('the runtime stage holds dist, node_modules, package.json and bin, and every command finds its files', async (t) => {
  const copies = runtime.filter((i) => i.getKeyword() === 'COPY') as Copy[];
  t.ok(copies.every((c) => c.getFromFlag()?.getValue() === 'build'), 'everything comes from the build stage');
  const paths = copies.map((c) => args(c).split(/\s+/)[0]!.replace(/^\/app\//, ''));
  t.same(paths.sort(), ['bin', 'dist', 'node_modules', 'package.json']);
  // The commands: CMD, and those the Dockerfile documents in its header.
  const cmd = JSON.parse(args(runtime.find((i) => i.getKeyword() === 'CMD')!)) as string[];
  t.same(cmd, ['node', ...nodeFlags('gateway/main.js'), 'dist/gateway/main.js'], 'the default process is the gateway, with the flags npm start gives it');
  const documented = [...readFileSync(join(ROOT, 'Dockerfile'), 'utf8').matchAll(/^#\s+node (.+?)\s{2,}/gm)].map((m) => m[1]!.split(' '));
  t.equal(documented.length, 4, 'gateway, worker, api and migrate are documented');
  for (const c of [cmd.slice(1), ...documented]) {
    const file = c.find((a) => a.endsWith('.js'))!;
    t.ok(paths.some((p) => file === p || file.startsWith(`${p}/`)), `${file} is inside the image`);
    t.ok(existsSync(join(ROOT, file)), `${file} exists after npm run build`);
  }
  t.ok(existsSync(join(ROOT, 'dist', 'dashboard', 'index.html')), 'the dashboard is built into dist/dashboard');
  t.match(readFileSync(join(ROOT, 'bin', 'fleet.js'), 'utf8'), /\.\.\/dist\/cli\/fleet\.js/, 'bin/fleet.js loads the compiled CLI');
  // Nothing a process loads lies outside what the image holds (dist/test, dist/bench and
  // dist/deploy are not built into it).
  for (const entry of ['gateway/main.js', 'workers/main.js', 'api/main.js', 'cli/fleet.js']) {
    for (const f of importGraph(join(ROOT, 'dist', entry))) {
      const rel = relative(join(ROOT, 'dist'), f);
      t.ok(/^(lib|cli|gateway|workers|api)\//.test(rel) && existsSync(f), `${entry} -> ${rel}`);
    }
  }
});

t.test('a non-root user, settings only in ENV, the ports the settings name', async (t) => {
  const users = runtime.filter((i) => i.getKeyword() === 'USER').map(args);
  t.equal(users.length, 1);
  const [uid, gid] = users[0]!.split(':');
  t.match(uid, /^\d+$/, 'numeric, so runAsNonRoot can check it');
  t.not(uid, '0', 'not root');
  t.not(gid, '0', 'not the root group');
  const env: Record<string, string> = {};
  for (const i of runtime.filter((x) => x.getKeyword() === 'ENV')) {
    for (const p of (i as unknown as { getProperties(): { getName(): string; getValue(): string | null }[] }).getProperties()) env[p.getName()] = p.getValue() ?? '';
  }
  for (const k of Object.keys(env)) t.ok((SETTING_NAMES as string[]).includes(k), `ENV ${k} is a setting`);
  t.notOk('UWS_ALLOW_FALLBACK' in env, 'the gateway may not run on the slow uWS fallback');
  const cfg = parseSettings(env);
  const exposed = args(runtime.find((i) => i.getKeyword() === 'EXPOSE')!).split(/\s+/).map(Number).sort();
  t.same(exposed, [cfg.GATEWAY_PORT, cfg.API_PORT, cfg.WORKER_HTTP_PORT].sort(), 'EXPOSE names the three ports');
  t.equal(cfg.GATEWAY_HOST, '0.0.0.0');
  t.equal(cfg.API_HOST, '0.0.0.0');
  t.equal(cfg.WORKER_HTTP_HOST, '0.0.0.0');
  const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim());
  for (const p of ['node_modules', 'dist', '.data', 'test/artifacts', '.git']) t.ok(ignore.includes(p), `.dockerignore: ${p}`);
});

t.test('the HEALTHCHECK passes on a 200 /healthz at the process port and fails otherwise', async (t) => {
  const hc = args(runtime.find((i) => i.getKeyword() === 'HEALTHCHECK')!);
  const json = /CMD\s+(\[.*\])\s*$/s.exec(hc);
  t.ok(json, 'exec form');
  const argv = JSON.parse(json![1]!) as string[];
  t.same(argv.slice(0, 2), ['node', '-e']);
  t.match(argv[2], /\/healthz/);
  let status = 200;
  const seen: string[] = [];
  const server: Server = createServer((req, res) => {
    seen.push(req.url!);
    res.writeHead(status).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => void server.close());
  const port = String((server.address() as { port: number }).port);
  // A port nothing listens on: take one from the kernel and close it.
  const closed = await new Promise<string>((r) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = String((s.address() as { port: number }).port);
      s.close(() => r(p));
    });
  });
  const run = (env: Record<string, string>) =>
    promisify(execFile)(process.execPath, argv.slice(1), { env: { PATH: process.env.PATH, ...env }, timeout: 10_000 }).then(
      () => 0,
      (e: { code?: number }) => e.code ?? 1,
    );
  for (const [name, setting] of [['gateway', 'GATEWAY_PORT'], ['api', 'API_PORT'], ['worker', 'WORKER_HTTP_PORT']]) {
    const env = { GATEWAY_PORT: closed, API_PORT: closed, WORKER_HTTP_PORT: closed, [setting!]: port };
    status = 200;
    t.equal(await run(env), 0, `${name}: healthy on 200`);
    status = 503;
    t.equal(await run(env), 1, `${name}: unhealthy on 503`);
  }
  t.equal(await run({ GATEWAY_PORT: closed, API_PORT: closed, WORKER_HTTP_PORT: closed }), 1, 'unhealthy when nothing listens');
  t.ok(seen.every((u) => u === '/healthz'), 'it asks /healthz only');
});
