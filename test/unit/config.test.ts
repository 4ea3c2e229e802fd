// Configuration (lib/infra/config.ts): one schema validates every variable when a process starts; a bad
// value stops it with one line naming the variable, its value and what is allowed, and no stack
// trace; `fleet --help` works whatever the environment; the README's table lists every variable.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, parseSettings, ConfigError, SETTING_NAMES } from '../../lib/infra/config.js';
import { ROOT } from '../../deploy/service-process.js';

const run = (script: string, env: Record<string, string>, args: string[] = []) =>
  spawnSync(process.execPath, [join(ROOT, script), ...args], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', timeout: 20_000 });

t.test('every process refuses a bad value with one line per variable and exit code 2', async (t) => {
  const env = { GATEWAY_PORT: '99999', RATE_LIMIT_PER_S: '-5', COOKIE_SECURE: 'maybe', LOG_LEVEL: 'loud', TRUST_PROXY: 'true' };
  for (const [name, script] of [['gateway', 'dist/gateway/main.js'], ['worker', 'dist/workers/main.js'], ['api', 'dist/api/main.js']]) {
    const r = run(script!, env);
    t.equal(r.status, 2, `${name}: exit 2`);
    const lines = r.stderr.trim().split('\n');
    t.same(
      lines,
      [
        `${name}: invalid configuration: GATEWAY_PORT="99999": must be an integer from 0 to 65535`,
        `${name}: invalid configuration: TRUST_PROXY="true": must name the proxies: "true" would trust every hop, so any client could choose its address; give the number of proxy hops (e.g. 1) or their addresses`,
        `${name}: invalid configuration: RATE_LIMIT_PER_S="-5": must be an integer of at least 1`,
        `${name}: invalid configuration: COOKIE_SECURE="maybe": must be true or false (also 1/0, yes/no, on/off)`,
        `${name}: invalid configuration: LOG_LEVEL="loud": must be one of fatal, error, warn, info, debug, trace, silent`,
      ],
      `${name}: exactly the bad variables`,
    );
    t.notMatch(r.stderr, /\n\s+at /, `${name}: no stack trace`);
  }
});

t.test('fleet --help works with any environment; a command still checks it', async (t) => {
  const help = run('bin/fleet.js', { GATEWAY_PORT: 'x', DATABASE_URL: 'mysql://nope' }, ['--help']);
  t.equal(help.status, 0);
  t.match(help.stdout, /Usage: fleet/);
  const cmd = run('bin/fleet.js', { DATABASE_URL: 'mysql://nope' }, ['token', 'list']);
  t.equal(cmd.status, 2);
  t.equal(cmd.stderr.trim(), 'fleet: invalid configuration: DATABASE_URL="mysql://nope": must be a postgres:// URL');
});

t.test('values are read as operators write them', async (t) => {
  for (const v of ['on', 'ON', 'true', '1', 'yes']) t.equal(loadConfig({ COOKIE_SECURE: v }).api.cookieSecure, true, `COOKIE_SECURE=${v}`);
  for (const v of ['off', 'false', '0', 'no']) t.equal(loadConfig({ COOKIE_SECURE: v }).api.cookieSecure, false, `COOKIE_SECURE=${v}`);
  t.equal(loadConfig({}).gateway.port, 8080, 'defaults');
  t.equal(loadConfig({ GATEWAY_PORT: '' }).gateway.port, 8080, 'empty is unset');
  t.equal(loadConfig({ GATEWAY_PORT: ' 9090 ' }).gateway.port, 9090);
  t.equal(loadConfig({ NATS_PORT: '4222' }).natsUrl, 'nats://127.0.0.1:4222', 'derived URLs follow their ports');
  t.throws(() => loadConfig({ GATEWAY_PORT: '80.5' }), ConfigError);
  t.throws(() => loadConfig({ MAX_ITEMS: '70000' }), /MAX_ITEMS="70000": must be an integer from 1 to 65535/, 'bounded by the column it numbers');
  t.throws(() => loadConfig({ STREAM_NAME: 'with space' }), /STREAM_NAME/);
  t.same(loadConfig({}).worker.lanes, ['reports', 'heartbeats'], 'a worker pulls both lanes unless told');
  t.same(loadConfig({ WORKER_LANES: 'heartbeats' }).worker.lanes, ['heartbeats']);
  t.throws(() => loadConfig({ WORKER_LANES: 'reports,metrics' }), /WORKER_LANES="reports,metrics": must be reports, heartbeats, or both joined by a comma/);
  t.throws(() => loadConfig({ JWT_SECRET: 'short' }), /JWT_SECRET="short": must be empty \(a random key per process\) or at least 32 characters/);
  t.equal(loadConfig({ TRUST_PROXY: '' }).trustProxy, null);
  t.equal(loadConfig({ TRUST_PROXY: '2' }).trustProxy!('10.0.0.1', 1), true);
  t.equal(loadConfig({ TRUST_PROXY: '2' }).trustProxy!('10.0.0.1', 2), false);
  t.equal(loadConfig({ TRUST_PROXY: 'loopback, 10.0.0.0/8' }).trustProxy!('10.9.9.9', 0), true);
  t.throws(() => loadConfig({ TRUST_PROXY: '10.0.0.0/99' }), /TRUST_PROXY/);
  try {
    parseSettings({ GATEWAY_PORT: 'x', API_PORT: 'y' });
    t.fail('should throw');
  } catch (e) {
    t.equal((e as ConfigError).problems.length, 2, 'every bad variable, not only the first');
  }
});

t.test("the README's configuration table lists every variable, and nothing else", async (t) => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const table = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('### External servers'));
  const listed = new Set<string>();
  for (const line of table.split('\n')) {
    if (!line.startsWith('| `')) continue;
    for (const m of line.split('|')[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)) listed.add(m[1]!);
  }
  // Read by the test and browser tooling, not by the services.
  const notSettings = new Set(['SKIP_BROWSER_TESTS', 'CHROMIUM_PATH']);
  for (const name of SETTING_NAMES) t.ok(listed.has(name), `${name} in the README`);
  for (const name of listed) if (!notSettings.has(name)) t.ok((SETTING_NAMES as string[]).includes(name), `${name} is a setting`);
});
