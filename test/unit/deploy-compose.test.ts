// The one-host deployment (deploy/compose) against the code it runs, with no Docker engine: the
// compose file validates against the compose-spec JSON schema (the copy dclint ships); the fleet
// services get only settings (SETTING_NAMES) with values parseSettings accepts, once interpolated
// with env.example; their healthchecks ask /healthz on the port the process listens on; the
// servers are reached where compose runs them; nginx routes every public route to its process and
// none of the operations endpoints; nats-server allows the payloads the gateway publishes.
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { parseDocument } from 'yaml';
import { Ajv } from 'ajv';
import { parseSettings, SETTING_NAMES } from '../../lib/infra/config.js';
import { ROOT, nodeFlags } from '../../deploy/service-process.js';
import { clickhouseConfig } from '../../deploy/local-servers.js';
import { routesOf } from '../../lib/contract/routes.js';

type Obj = Record<string, any>;  

const DIR = join(ROOT, 'deploy', 'compose');
const SETTINGS = new Set<string>(SETTING_NAMES);
/** Variables of third-party images that are not settings of ours (postgres creates its role and database from them). */
const THIRD_PARTY_ENV = new Set(['POSTGRES_USER', 'POSTGRES_PASSWORD', 'POSTGRES_DB']);

/** env.example: the variables compose.yaml interpolates. */
const example: Record<string, string> = Object.fromEntries(
  readFileSync(join(DIR, 'env.example'), 'utf8')
    .split('\n')
    .filter((l) => /^[A-Z_][A-Z0-9_]*=/.test(l))
    .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
);

/** Compose interpolation: ${V}, ${V:-d}, ${V-d}, ${V:?e}, ${V?e}, $V and $$. */
function interpolate(s: string, vars: Record<string, string>, used: Set<string>): string {
  return s.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, name, op, arg, bare) => {
    if (m === '$$') return '$';
    const v = name ?? bare;
    used.add(v);
    const val = vars[v];
    const empty = val === undefined || (op?.startsWith(':') && val === '');
    if (!empty) return val!;
    if (op === ':-' || op === '-') return arg;
    if (op === ':?' || op === '?') throw new Error(`${v} is required: ${arg}`);
    return '';
  });
}

function deepInterpolate(v: unknown, vars: Record<string, string>, used: Set<string>): unknown {
  if (typeof v === 'string') return interpolate(v, vars, used);
  if (Array.isArray(v)) return v.map((x) => deepInterpolate(x, vars, used));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, deepInterpolate(x, vars, used)]));
  return v;
}

const doc = parseDocument(readFileSync(join(DIR, 'compose.yaml'), 'utf8'), { merge: true });
const raw = doc.toJS() as Obj;
const used = new Set<string>();
const compose = deepInterpolate(raw, example, used) as Obj;
const services = compose.services as Record<string, Obj>;
/** The services running the fleet image (built from the Dockerfile). */
const fleet = Object.entries(services).filter(([, s]) => s.build);

type Proc = 'gateway' | 'worker' | 'api' | 'migrate';
function processOf(command: string[]): Proc {
  const script = command.find((a) => a.endsWith('.js'));
  if (script === 'dist/gateway/main.js') return 'gateway';
  if (script === 'dist/workers/main.js') return 'worker';
  if (script === 'dist/api/main.js') return 'api';
  if (script === 'bin/fleet.js' && command.at(-1) === 'migrate') return 'migrate';
  throw new Error(`unknown command ${JSON.stringify(command)}`);
}
const envOf = (s: Obj): Record<string, string> => Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, String(v)]));

t.test('compose.yaml parses and validates against the compose-spec schema', async (t) => {
  t.same(doc.errors, [], 'YAML without errors');
  const require = createRequire(import.meta.url);
  // dclint exports only its code and package.json; the schema sits beside the latter.
  const schema = JSON.parse(readFileSync(join(dirname(require.resolve('dclint/package.json')), 'schemas', 'compose.schema.json'), 'utf8'));
  // It is draft-07 (Ajv's default dialect) but names the meta-schema by its https address, which
  // Ajv does not know by that name.
  t.equal(schema.$schema, 'https://json-schema.org/draft-07/schema');
  delete schema.$schema;
  const validate = new Ajv({ allErrors: true, strict: false }).compile(schema);
  const ok = validate(compose);
  t.ok(ok, `valid${ok ? '' : `: ${JSON.stringify(validate.errors)}`}`);
  t.ok(validate(raw), 'valid before interpolation too');
  t.notOk(validate({ services: { x: { image: 'a', helthcheck: {} } } }), 'the schema refuses an unknown key (it is strict)');
});

t.test('every variable compose.yaml interpolates is in env.example, and env.example holds nothing else', async (t) => {
  t.same([...used].sort(), Object.keys(example).sort());
  const missing = new Set<string>();
  t.throws(() => deepInterpolate(raw, {}, missing), /POSTGRES_PASSWORD is required|CLICKHOUSE_PASSWORD is required|JWT_SECRET is required/, 'secrets must be given: no defaults');
  t.equal(readFileSync(join(DIR, '.gitignore'), 'utf8').match(/^\.env$/m)?.[0], '.env', 'the filled-in .env is not committed');
});

t.test('the fleet services: settings only, values parseSettings accepts, commands the build produces', async (t) => {
  t.same(fleet.map(([n]) => n).sort(), ['api', 'gateway', 'migrate', 'worker']);
  for (const [name, s] of fleet) {
    const env = envOf(s);
    for (const k of Object.keys(env)) t.ok(SETTINGS.has(k), `${name}: ${k} is in SETTING_NAMES`);
    t.doesNotThrow(() => parseSettings(env), `${name}: its environment passes parseSettings`);
    t.notOk('UWS_ALLOW_FALLBACK' in env, `${name}: the gateway may not run on the slow uWS fallback`);
    const proc = processOf(s.command);
    t.equal(proc, name as Proc, `${name} runs the ${name}`);
    const script = s.command.find((a: string) => a.endsWith('.js'));
    t.ok(existsSync(join(ROOT, script)), `${name}: ${script} exists after the build`);
    if (proc !== 'migrate') t.same(s.command.slice(1, -1), nodeFlags(script.replace(/^dist\//, '')), `${name}: the Node flags npm start uses`);
    t.equal(s.read_only, true, `${name}: read-only root filesystem`);
    t.same(s.cap_drop, ['ALL'], `${name}: no capabilities`);
    if (proc !== 'migrate') t.equal(s.depends_on.migrate.condition, 'service_completed_successfully', `${name} starts after the migration`);
  }
  for (const [name, s] of Object.entries(services)) {
    if (s.build) continue;
    for (const k of Object.keys(envOf(s))) t.ok(SETTINGS.has(k) || THIRD_PARTY_ENV.has(k), `${name}: ${k} is a setting or an allowed third-party variable`);
  }
  t.equal(services.worker!.deploy.replicas, 2, 'two workers');
  t.same(services.migrate!.depends_on, { postgres: { condition: 'service_healthy' }, clickhouse: { condition: 'service_healthy' } });
});

t.test('healthchecks on /healthz at the port each process listens on; every service has one', async (t) => {
  const PORT = { gateway: 'GATEWAY_PORT', api: 'API_PORT', worker: 'WORKER_HTTP_PORT' } as const;
  const HOST = { gateway: 'GATEWAY_HOST', api: 'API_HOST', worker: 'WORKER_HTTP_HOST' } as const;
  for (const [name, s] of Object.entries(services)) {
    if (name === 'migrate') {
      t.equal(s.healthcheck.disable, true, 'the one-shot migration has none');
      continue;
    }
    t.ok(Array.isArray(s.healthcheck?.test) && s.healthcheck.test.length > 1, `${name} has a healthcheck`);
  }
  for (const [name, s] of fleet) {
    const proc = processOf(s.command);
    if (proc === 'migrate') continue;
    const cfg = parseSettings(envOf(s));
    const port = cfg[PORT[proc]];
    t.ok(port > 0, `${name}: ${PORT[proc]}=${port}`);
    t.equal(cfg[HOST[proc]], '0.0.0.0', `${name}: listens on the container's address`);
    const url = /http:\/\/127\.0\.0\.1:(\d+)(\/[a-z]+)/.exec(s.healthcheck.test.join(' '));
    t.equal(Number(url?.[1]), port, `${name}: healthcheck on ${PORT[proc]}`);
    t.equal(url?.[2], '/healthz', `${name}: healthcheck on /healthz`);
    t.same(s.expose, [String(port)], `${name}: exposes its port`);
  }
  t.match(services.nats!.healthcheck.test.join(' '), /:8222\/healthz\?js-enabled-only=true/, 'nats: ready when JetStream is');
  t.match(readFileSync(join(DIR, 'nats.conf'), 'utf8'), /^http_port: 8222$/m, 'nats: monitoring port the healthcheck asks');
  t.match(services.nginx!.healthcheck.test.join(' '), /127\.0\.0\.1:8088\/healthz/);
});

t.test('the servers are reached where compose runs them, with the credentials it gives them', async (t) => {
  const cfg = parseSettings(envOf(services.worker!));
  const pg = new URL(cfg.DATABASE_URL!);
  const pgEnv = envOf(services.postgres!);
  t.equal(pg.hostname, 'postgres');
  t.equal(pg.port, '5432');
  t.equal(pg.username, pgEnv.POSTGRES_USER);
  t.equal(decodeURIComponent(pg.password), pgEnv.POSTGRES_PASSWORD);
  t.equal(pg.pathname, `/${pgEnv.POSTGRES_DB}`);
  t.match(services.postgres!.image, /^postgres:15\b/, 'PostgreSQL 15');
  const ch = envOf(services.clickhouse!);
  t.equal(cfg.CLICKHOUSE_URL, 'http://clickhouse:8123');
  t.same([cfg.CLICKHOUSE_DB, cfg.CLICKHOUSE_USER, cfg.CLICKHOUSE_PASSWORD], [ch.CLICKHOUSE_DB, ch.CLICKHOUSE_USER, ch.CLICKHOUSE_PASSWORD], 'ClickHouse database, user and password agree');
  t.equal(cfg.REDIS_URL, 'redis://redis:6379/0');
  const redisCmd = services.redis!.command as string[];
  t.equal(redisCmd[redisCmd.indexOf('--notify-keyspace-events') + 1], 'Ex', 'Redis expired-key events for the traffic light');
  t.equal(cfg.NATS_URL, 'nats://nats:4222');
  t.equal(cfg.STREAM_REPLICAS, 1, 'one nats-server: one replica');
  t.equal(cfg.TRUST_PROXY, '1', 'nginx is the one proxy hop');
  t.equal(parseSettings(envOf(services.api!)).COOKIE_SECURE, true, 'Secure cookies behind TLS');
});

t.test('nats.conf: JetStream, fsync before acknowledging, payloads above the 1 MiB default', async (t) => {
  const conf = readFileSync(join(DIR, 'nats.conf'), 'utf8');
  const payload = /^max_payload:\s*(\d+)\s*MB$/m.exec(conf);
  t.ok(payload && Number(payload[1]) >= 8, 'max_payload of 8 MB or more');
  const cfg = parseSettings(envOf(services.gateway!));
  const need = Math.max(cfg.BODY_LIMIT_BYTES, cfg.ARTIFACT_CHUNK_BYTES, cfg.PUBLISH_MAX_BYTES);
  t.ok(Number(payload?.[1]) * 1024 * 1024 > need + 64 * 1024, `above the largest single publish (${need} bytes and its envelope)`);
  t.match(conf, /jetstream\s*\{[^}]*store_dir:\s*\/data/s);
  t.match(conf, /jetstream\s*\{[^}]*sync_interval:\s*always/s);
  t.ok((services.nats!.volumes as string[]).some((v) => v.endsWith(':/data')), 'the store on a volume');
  const tag = String(services.nats!.image).split(':')[1]!;
  const [maj, min] = tag.split(/[.-]/).map(Number);
  t.ok(maj! > 2 || (maj === 2 && min! >= 11), `nats ${tag}: past 2.10.23`);
});

/** nginx's choice of location: exact (=), then regular expressions (~) in order, else the longest prefix. */
function nginxLocation(locations: { mod: string; path: string; body: string }[], uri: string) {
  const exact = locations.find((l) => l.mod === '=' && l.path === uri);
  if (exact) return exact;
  const prefix = locations.filter((l) => l.mod === '' && uri.startsWith(l.path)).sort((a, b) => b.path.length - a.path.length)[0];
  const regex = locations.find((l) => l.mod === '~' && new RegExp(l.path).test(uri));
  return regex ?? prefix;
}

t.test('nginx: TLS, every public route to its process, the operations endpoints hidden', async (t) => {
  const conf = readFileSync(join(DIR, 'nginx.conf'), 'utf8').replace(/#.*$/gm, '');
  const tls = conf.slice(conf.indexOf('listen 443 ssl'));
  const server = tls.slice(0, tls.indexOf('\nserver {'));
  t.match(server, /ssl_certificate\s+\/etc\/nginx\/certs\/tls\.crt;/);
  t.match(server, /ssl_certificate_key\s+\/etc\/nginx\/certs\/tls\.key;/);
  t.ok((services.nginx!.volumes as string[]).includes('./certs:/etc/nginx/certs:ro'), 'certificates mounted');
  t.ok((services.nginx!.volumes as string[]).includes('./nginx.conf:/etc/nginx/conf.d/default.conf:ro'), 'this config mounted');
  const locations = [...server.matchAll(/location\s+(=|~)?\s*(\S+)\s*\{([^}]*)\}/g)].map((m) => ({ mod: m[1] ?? '', path: m[2]!, body: m[3]! }));
  const upstreamOf = (uri: string) => /proxy_pass\s+http:\/\/(\w+);/.exec(nginxLocation(locations, uri)?.body ?? '')?.[1] ?? null;
  const UPSTREAM = { gateway: 'fleet_gateway', api: 'fleet_api' } as const;
  for (const service of ['gateway', 'api'] as const) {
    for (const r of routesOf(service)) {
      if (['/healthz', '/readyz', '/metrics'].includes(r.path)) continue;
      t.equal(upstreamOf(r.path.replace(/\{[^}]+\}/g, 'x1')), UPSTREAM[service], `${r.method} ${r.path} reaches the ${service}`);
    }
  }
  for (const p of ['/healthz', '/readyz', '/metrics']) {
    t.match(nginxLocation(locations, p)?.body, /return 404/, `${p} is not served from outside`);
  }
  t.match(nginxLocation(locations, '/api/fleet/stream')?.body, /proxy_buffering off/, 'the live stream is not buffered');
  for (const [up, svc, port] of [['fleet_gateway', 'gateway', 'GATEWAY_PORT'], ['fleet_api', 'api', 'API_PORT']] as const) {
    const block = new RegExp(`upstream ${up} \\{[^}]*server ${svc}:(\\d+)`).exec(conf);
    t.equal(Number(block?.[1]), parseSettings(envOf(services[svc]!))[port], `upstream ${up} is ${svc} on its ${port}`);
  }
  const body = /client_max_body_size\s+(\d+)m;/.exec(server);
  const cfg = parseSettings(envOf(services.gateway!));
  t.ok(Number(body?.[1]) * 1024 * 1024 > Math.max(cfg.BODY_LIMIT_BYTES, cfg.ARTIFACT_CHUNK_BYTES), 'nginx lets the gateway answer 413 itself');
});

t.test('ClickHouse may drop a partition of any size: the retention job drops whole months (docs/operations.md "Data retention")', async (t) => {
  const mount = (services.clickhouse!.volumes as string[]).find((v) => v.startsWith('./clickhouse-retention.xml:'));
  t.equal(mount, './clickhouse-retention.xml:/etc/clickhouse-server/config.d/retention.xml:ro', 'compose mounts the override into config.d');
  t.match(readFileSync(join(DIR, 'clickhouse-retention.xml'), 'utf8'), /<clickhouse>\s*<max_partition_size_to_drop>0<\/max_partition_size_to_drop>\s*<\/clickhouse>/);
  t.match(clickhouseConfig('/tmp/x', 1, 2), /<max_partition_size_to_drop>0<\/max_partition_size_to_drop>/, 'the project-local server too');
});
