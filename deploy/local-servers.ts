// Project-local NATS, Redis, Postgres and ClickHouse on loopback, with their data under DATA_DIR.
// Never the machine's system services or default ports. Each server runs in its own process group
// (so a Ctrl-C reaches the stack runner, which stops the app first and the servers last) and leaves
// a pid file, so a server orphaned by a killed runner is stopped at the next start.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, openSync, readFileSync, readlinkSync, rmSync, writeFileSync, chownSync, readdirSync } from 'node:fs';
import { connect as netConnect, createServer as netServer } from 'node:net';
import { dirname, join } from 'node:path';
import { configOrExit, type Config } from '../lib/infra/config.js';
import { createDatabaseIfMissing } from '../lib/store/admin.js';

export interface LocalServer {
  name: string;
  stop(): Promise<void>;
}

type Log = (msg: string) => void;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function waitExit(pid: number, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (!alive(pid)) return true;
    await sleep(100);
  }
  return !alive(pid);
}

/**
 * Whether `pid` is a server of ours for `dir`: its working directory or its command line names the
 * folder. A pid file can outlive its process and the pid be reused by anything else, which must not
 * be killed (Redis rewrites its command line, hence the working directory too).
 */
export function servesDir(pid: number, dir: string): boolean {
  try {
    const cwd = readlinkSync(`/proc/${pid}/cwd`);
    if (cwd === dir || cwd.startsWith(dir + '/')) return true;
  } catch {
    /* not ours to inspect, or gone */
  }
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dir);
  } catch {
    return false;
  }
}

/** Stops a server left running by an earlier runner that was killed without cleaning up. */
export async function stopStale(pidFile: string, log: Log): Promise<void> {
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  const dir = dirname(pidFile);
  if (pid > 0 && alive(pid) && servesDir(pid, dir)) {
    log(`stopping a server left from an earlier run (pid ${pid})`);
    process.kill(pid, 'SIGTERM');
    if (!(await waitExit(pid, 20_000))) process.kill(pid, 'SIGKILL');
  }
  rmSync(pidFile, { force: true });
}

export async function waitFor(name: string, probe: () => Promise<boolean>, child: ChildProcess, logFile: string, ms = 60_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (child.exitCode !== null) {
      throw new Error(`${name} exited with code ${child.exitCode} while starting; see ${logFile}`);
    }
    if (await probe().catch(() => false)) return;
    await sleep(150);
  }
  throw new Error(`${name} did not become ready within ${ms} ms; see ${logFile}`);
}

export function tcpProbe(port: number, expect: string | null, send?: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = netConnect({ host: '127.0.0.1', port });
    let buf = '';
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(1000, () => done(false));
    sock.on('error', () => done(false));
    // A server that answers and hangs up (ZooKeeper's four-letter words) without the expected text.
    sock.on('close', () => done(buf.includes(expect ?? '') && expect !== null));
    sock.on('connect', () => {
      if (send) sock.write(send);
      if (expect === null) done(true);
    });
    sock.on('data', (d) => {
      buf += d.toString();
      if (expect !== null && buf.includes(expect)) done(true);
    });
  });
}

/** A port another process holds: a server started on it would fail, and its probe reach the other one. */
export class PortInUseError extends Error {
  constructor(
    readonly port: number,
    readonly variable: string,
    detail = 'is in use by another process',
  ) {
    super(`port ${port} ${detail}; set ${variable} to a free port (another stack, or a server of the machine, may hold it)`);
    this.name = 'PortInUseError';
  }
}

/**
 * Refuses a port something already listens on (checked after our own stale server is stopped), or
 * that cannot be bound on loopback: a client socket of any process whose own (ephemeral) port it
 * is holds it just as well, and answers no probe. A server started there would fail to listen
 * (a worker would run without its /readyz), so the start says which variable to change instead.
 */
export async function ensurePortFree(port: number, variable: string): Promise<void> {
  if (await tcpProbe(port, null)) throw new PortInUseError(port, variable);
  if (!(await bindable(port))) throw new PortInUseError(port, variable, "is held by another process's socket (a connection's own port, or a server)");
}

/** Whether a server could listen on 127.0.0.1:`port` now (it is bound and closed again at once). */
export function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = netServer();
    srv.once('error', () => resolve(false));
    srv.listen({ port, host: '127.0.0.1', exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/** The inodes of the sockets listening on 127.0.0.1 (or any address) at `port` (/proc/net/tcp, tcp6). */
function listeningInodes(port: number): Set<string> {
  const out = new Set<string>();
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const col = line.trim().split(/\s+/);
      // local_address is ADDR:PORT in hex; state 0A is LISTEN; the inode is the tenth column.
      if (col.length > 9 && col[1]!.endsWith(`:${hex}`) && col[3] === '0A') out.add(col[9]!);
    }
  }
  return out;
}

/** Whether process `pid`, or a child of it (a server that forks a watchdog), holds a socket listening on `port`. */
export function listensOn(pid: number, port: number): boolean {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return false;
  const holds = (p: number) => {
    try {
      for (const fd of readdirSync(`/proc/${p}/fd`)) {
        try {
          const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${p}/fd/${fd}`));
          if (m && inodes.has(m[1]!)) return true;
        } catch {
          /* closed meanwhile */
        }
      }
    } catch {
      /* gone, or not ours to inspect */
    }
    return false;
  };
  return holds(pid) || childrenOf(pid).some(holds);
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces and parentheses.
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(e));
    } catch {
      /* gone */
    }
  }
  return out;
}

/**
 * After a server answered its probe: that it was ours that answered (it holds the listening socket),
 * not another process on the same port. Stops ours and throws otherwise.
 */
async function ensureOurs(name: string, child: ChildProcess, ports: [number, string][], stop: () => Promise<void>): Promise<void> {
  for (const [port, variable] of ports) {
    if (child.pid && listensOn(child.pid, port)) continue;
    await stop();
    throw new PortInUseError(port, variable, `answered, but not by the ${name} this stack started (pid ${child.pid})`);
  }
}

export function spawnServer(cmd: string, args: string[], dir: string, opts: { uid?: number; gid?: number; env?: NodeJS.ProcessEnv } = {}) {
  const logFile = join(dir, 'server.log');
  const out = openSync(logFile, 'a');
  const child = spawn(cmd, args, {
    cwd: dir,
    detached: true,
    stdio: ['ignore', out, out],
    uid: opts.uid,
    gid: opts.gid,
    env: opts.env ?? process.env,
  });
  writeFileSync(join(dir, 'server.pid'), `${child.pid}\n`);
  child.on('error', () => {});
  return { child, logFile };
}

function stopper(name: string, child: ChildProcess, dir: string, signal: NodeJS.Signals, log: Log): () => Promise<void> {
  return async () => {
    if (child.exitCode === null && child.pid) {
      child.kill(signal);
      if (!(await waitExit(child.pid, 30_000))) {
        log(`${name} did not stop in 30 s; killing it`);
        child.kill('SIGKILL');
      }
    }
    rmSync(join(dir, 'server.pid'), { force: true });
  };
}

export function which(cmd: string): string | null {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

/** A clustered nats-server: its name, the route port, every route of the cluster, a monitoring port. */
export interface NatsClusterNode {
  serverName: string;
  clusterName: string;
  routePort: number;
  routes: number[];
  httpPort: number;
}

/** nats.conf for one server; alone (the stack) or one node of a JetStream cluster (deploy/cluster.ts). */
export function natsConfig(dir: string, port: number, node?: NatsClusterNode): string {
  // max_payload above a report's 1 MiB limit: a published batch carries several reports.
  const jetstream = `jetstream {\n  store_dir: "${join(dir, 'jetstream')}"\n  max_file_store: 64GB\n  max_memory_store: 256MB\n}\n`;
  if (!node) return `listen: 127.0.0.1:${port}\nmax_payload: 8MB\n${jetstream}`;
  const routes = node.routes.map((p) => `    nats-route://127.0.0.1:${p}`).join('\n');
  return (
    `server_name: ${node.serverName}\nlisten: 127.0.0.1:${port}\nhttp: 127.0.0.1:${node.httpPort}\nmax_payload: 8MB\n${jetstream}` +
    `cluster {\n  name: ${node.clusterName}\n  listen: 127.0.0.1:${node.routePort}\n  routes: [\n${routes}\n  ]\n}\n`
  );
}

export async function startNats(cfg: Config, log: Log): Promise<LocalServer> {
  const dir = join(cfg.dataDir, 'nats');
  mkdirSync(join(dir, 'jetstream'), { recursive: true });
  await stopStale(join(dir, 'server.pid'), log);
  await ensurePortFree(cfg.ports.nats, 'NATS_PORT');
  writeFileSync(join(dir, 'nats.conf'), natsConfig(dir, cfg.ports.nats));
  const { child, logFile } = spawnServer(which('nats-server') ?? 'nats-server', ['-c', join(dir, 'nats.conf')], dir);
  const stop = stopper('nats-server', child, dir, 'SIGTERM', log);
  await waitFor('nats-server', () => tcpProbe(cfg.ports.nats, 'INFO'), child, logFile);
  await ensureOurs('nats-server', child, [[cfg.ports.nats, 'NATS_PORT']], stop);
  log(`nats-server ready on 127.0.0.1:${cfg.ports.nats} (data ${dir})`);
  return { name: 'nats', stop };
}

export async function startRedis(cfg: Config, log: Log): Promise<LocalServer> {
  const dir = join(cfg.dataDir, 'redis');
  mkdirSync(dir, { recursive: true });
  await stopStale(join(dir, 'server.pid'), log);
  // Expired-key events drive the traffic light (issue 4): the project turns them on itself.
  // Append-only file: BullMQ jobs and heartbeat keys survive a restart of the stack.
  const args = [
    '--port', String(cfg.ports.redis), '--bind', '127.0.0.1', '--dir', dir,
    '--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec',
    '--notify-keyspace-events', 'Ex', '--daemonize', 'no', '--logfile', '',
    '--maxmemory-policy', 'noeviction',
  ];
  await ensurePortFree(cfg.ports.redis, 'REDIS_PORT');
  const { child, logFile } = spawnServer(which('redis-server') ?? 'redis-server', args, dir);
  const stop = stopper('redis-server', child, dir, 'SIGTERM', log);
  await waitFor('redis-server', () => tcpProbe(cfg.ports.redis, '+PONG', 'PING\r\n'), child, logFile);
  await ensureOurs('redis-server', child, [[cfg.ports.redis, 'REDIS_PORT']], stop);
  log(`redis-server ready on 127.0.0.1:${cfg.ports.redis} (data ${dir})`);
  return { name: 'redis', stop };
}

function postgresBin(): string {
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(`/usr/lib/postgresql/${v}/bin/initdb`)) return `/usr/lib/postgresql/${v}/bin`;
  throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)');
}

function postgresUser(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null; // not root: run as ourselves
  const r = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const g = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error('running as root needs the system user "postgres" (from the postgresql package)');
  return { uid: Number(r.stdout.trim()), gid: Number(g.stdout.trim()) };
}

export async function startPostgres(cfg: Config, log: Log, opts: { fast?: boolean } = {}): Promise<LocalServer> {
  const bin = postgresBin();
  const user = postgresUser();
  // initdb and postgres refuse to run as root: as root they run as the "postgres" user, which must
  // be able to reach the data folder. A clone under a mode-700 home is out of its reach: then the
  // cluster lives under /var/lib/fleet-ingest instead (named after DATA_DIR), and we say so.
  let dir = join(cfg.dataDir, 'postgres');
  mkdirSync(dir, { recursive: true });
  if (user) {
    chownSync(dir, user.uid, user.gid);
    const ok = spawnSync('test', ['-w', dir, '-a', '-x', dir], { uid: user.uid, gid: user.gid }).status === 0;
    if (!ok) {
      const alt = join('/var/lib/fleet-ingest', createHash('sha256').update(cfg.dataDir).digest('hex').slice(0, 16), 'postgres');
      log(`the postgres user cannot reach ${dir}; keeping the Postgres cluster in ${alt}`);
      dir = alt;
      mkdirSync(dir, { recursive: true });
      chownSync(dir, user.uid, user.gid);
    }
  }
  const data = join(dir, 'data');
  const pgEnv = { ...process.env, LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8', HOME: dir };
  if (!existsSync(join(data, 'PG_VERSION'))) {
    log('initialising the Postgres cluster');
    const r = spawnSync(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8'], {
      cwd: dir,
      uid: user?.uid,
      gid: user?.gid,
      env: pgEnv,
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`initdb failed: ${r.stderr || r.stdout}`);
  }
  // A postmaster left from a killed run keeps its pid in postmaster.pid.
  const pmPid = join(data, 'postmaster.pid');
  if (existsSync(pmPid)) await stopStale(pmPid, log);
  const args = [
    '-D', data, '-p', String(cfg.ports.postgres), '-k', dir,
    '-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300', '-c', 'shared_buffers=256MB',
  ];
  // PG_SLOWLOG=<ms>: log statements slower than that, with parse, bind and execute times (test/README.md).
  if (/^\d+$/.test(process.env.PG_SLOWLOG ?? '')) args.push('-c', `log_min_duration_statement=${process.env.PG_SLOWLOG}`);
  // PG_STAT_STATEMENTS=1: load pg_stat_statements, so a bench can say which statements took the time (bench/README.md).
  if (process.env.PG_STAT_STATEMENTS === '1') args.push('-c', 'shared_preload_libraries=pg_stat_statements', '-c', 'pg_stat_statements.track=all');
  // Test stacks are thrown away after the run: skip fsync there.
  if (opts.fast) args.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
  await ensurePortFree(cfg.ports.postgres, 'PG_PORT');
  const { child, logFile } = spawnServer(join(bin, 'postgres'), args, dir, { uid: user?.uid, gid: user?.gid, env: pgEnv });
  // SIGINT = fast shutdown: roll back open transactions and stop at once.
  const stop = stopper('postgres', child, dir, 'SIGINT', log);
  await waitFor('postgres', () => pgReady(bin, cfg.ports.postgres), child, logFile);
  await ensureOurs('postgres', child, [[cfg.ports.postgres, 'PG_PORT']], stop);
  // The application database.
  const dbName = new URL(cfg.databaseUrl).pathname.slice(1) || 'fleet';
  await createAppDatabase(cfg.ports.postgres, dbName);
  log(`postgres ready on 127.0.0.1:${cfg.ports.postgres} (data ${data})`);
  return { name: 'postgres', stop };
}

async function pgReady(bin: string, port: number): Promise<boolean> {
  const r = spawnSync(join(bin, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port), '-q'], { stdio: 'ignore' });
  return r.status === 0;
}

/** The application database, made on the maintenance database as the superuser (lib/store/admin.ts). */
async function createAppDatabase(port: number, name: string): Promise<void> {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
  await c.connect();
  try {
    await createDatabaseIfMissing(c, name);
  } finally {
    await c.end();
  }
}

/** One replica of a replicated ClickHouse (deploy/cluster.ts): its cluster, ZooKeeper, macros. */
export interface ClickHouseReplica {
  cluster: string;
  /** Native-protocol ports of every replica of the one shard, this one's among them. */
  replicaTcpPorts: number[];
  interserverPort: number;
  zookeeperPort: number;
  shard: string;
  replica: string;
}

/** config.xml; a replica adds remote_servers, ZooKeeper, macros, interserver and distributed DDL. */
export function clickhouseConfig(dir: string, httpPort: number, tcpPort: number, rep?: ClickHouseReplica): string {
  const replication = rep
    ? `  <interserver_http_port>${rep.interserverPort}</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <remote_servers>
    <${rep.cluster}>
      <shard>
        <internal_replication>true</internal_replication>
${rep.replicaTcpPorts.map((p) => `        <replica><host>127.0.0.1</host><port>${p}</port></replica>`).join('\n')}
      </shard>
    </${rep.cluster}>
  </remote_servers>
  <zookeeper>
    <node><host>127.0.0.1</host><port>${rep.zookeeperPort}</port></node>
    <session_timeout_ms>30000</session_timeout_ms>
  </zookeeper>
  <macros>
    <shard>${rep.shard}</shard>
    <replica>${rep.replica}</replica>
  </macros>
  <distributed_ddl>
    <path>/clickhouse/task_queue/ddl</path>
  </distributed_ddl>
`
    : '';
  // Root element <yandex>: ClickHouse 18.16 does not know <clickhouse>. Newer releases accept both.
  return `<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>${dir}/log/clickhouse-server.log</log>
    <errorlog>${dir}/log/clickhouse-server.err.log</errorlog>
    <size>100M</size>
    <count>3</count>
  </logger>
  <http_port>${httpPort}</http_port>
  <tcp_port>${tcpPort}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>${dir}/data/</path>
  <tmp_path>${dir}/tmp/</tmp_path>
  <user_files_path>${dir}/user_files/</user_files_path>
  <format_schema_path>${dir}/format_schemas/</format_schema_path>
  <users_config>${dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>200</max_concurrent_queries>
  <keep_alive_timeout>10</keep_alive_timeout>
  <!-- Retention drops whole partitions (docs/operations.md "Data retention"); a month of
       diagnostics outgrows the default limit of 50 GB from about 120,000 devices on. 0: no limit. -->
  <max_partition_size_to_drop>0</max_partition_size_to_drop>
${replication}</yandex>
`;
}

/** users.xml; `replicated`: inserts into a Distributed table return only once stored (not queued). */
export function clickhouseUsers(replicated = false): string {
  const sync = replicated ? `\n      <insert_distributed_sync>1</insert_distributed_sync>` : '';
  return `<?xml version="1.0"?>
<yandex>
  <profiles>
    <default>
      <max_memory_usage>4000000000</max_memory_usage>
      <load_balancing>random</load_balancing>${sync}
    </default>
  </profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas>
    <default>
      <interval>
        <duration>3600</duration>
        <queries>0</queries>
        <errors>0</errors>
        <result_rows>0</result_rows>
        <read_rows>0</read_rows>
        <execution_time>0</execution_time>
      </interval>
    </default>
  </quotas>
</yandex>
`;
}

/** The ClickHouse server binary and its arguments for a config file. */
export function clickhouseCommand(configFile: string): { bin: string; args: string[] } {
  const bin = which('clickhouse-server') ?? which('clickhouse');
  if (!bin) throw new Error('clickhouse-server not found (apt-get install clickhouse-server)');
  return { bin, args: bin.endsWith('clickhouse') ? ['server', `--config-file=${configFile}`] : [`--config-file=${configFile}`] };
}

export const clickhousePing = (port: number) => async () => {
  const r = await fetch(`http://127.0.0.1:${port}/ping`, { signal: AbortSignal.timeout(1000) });
  return (await r.text()).startsWith('Ok.');
};

export async function startClickHouse(cfg: Config, log: Log): Promise<LocalServer> {
  const dir = join(cfg.dataDir, 'clickhouse');
  for (const sub of ['data', 'tmp', 'user_files', 'format_schemas', 'log']) mkdirSync(join(dir, sub), { recursive: true });
  await stopStale(join(dir, 'server.pid'), log);
  writeFileSync(join(dir, 'config.xml'), clickhouseConfig(dir, cfg.ports.clickhouseHttp, cfg.ports.clickhouseTcp));
  writeFileSync(join(dir, 'users.xml'), clickhouseUsers());
  const { bin, args } = clickhouseCommand(join(dir, 'config.xml'));
  const ports: [number, string][] = [
    [cfg.ports.clickhouseHttp, 'CLICKHOUSE_HTTP_PORT'],
    [cfg.ports.clickhouseTcp, 'CLICKHOUSE_TCP_PORT'],
  ];
  for (const [port, variable] of ports) await ensurePortFree(port, variable);
  const { child, logFile } = spawnServer(bin, args, dir);
  const stop = stopper('clickhouse-server', child, dir, 'SIGTERM', log);
  await waitFor('clickhouse-server', clickhousePing(cfg.ports.clickhouseHttp), child, logFile, 120_000);
  await ensureOurs('clickhouse-server', child, ports, stop);
  log(`clickhouse-server ready on 127.0.0.1:${cfg.ports.clickhouseHttp} (data ${dir})`);
  return { name: 'clickhouse', stop };
}

/** Starts every server the environment does not point elsewhere (NATS_URL, REDIS_URL, ...). */
export async function startLocalServers(cfg: Config, log: Log, opts: { fast?: boolean } = {}): Promise<LocalServer[]> {
  mkdirSync(cfg.dataDir, { recursive: true });
  const e = process.env;
  const starts: Promise<LocalServer>[] = [];
  if (!e.NATS_URL) starts.push(startNats(cfg, log));
  if (!e.REDIS_URL) starts.push(startRedis(cfg, log));
  if (!e.DATABASE_URL) starts.push(startPostgres(cfg, log, opts));
  if (!e.CLICKHOUSE_URL) starts.push(startClickHouse(cfg, log));
  const results = await Promise.allSettled(starts);
  const started = results.filter((r): r is PromiseFulfilledResult<LocalServer> => r.status === 'fulfilled').map((r) => r.value);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await stopServers(started, log);
    throw failed.reason;
  }
  return started;
}

export async function stopServers(servers: LocalServer[], log: Log): Promise<void> {
  await Promise.all(
    servers.map(async (s) => {
      await s.stop().catch((e) => log(`stopping ${s.name}: ${(e as Error).message}`));
      log(`${s.name} stopped`);
    }),
  );
}

/**
 * Test and bench stacks get their own data folder and ports, so they can run beside `npm start`
 * (14222, 15432, 16379, 18123, 19000). Every fixed port stays below 32768: above it lies the
 * kernel's ephemeral range, where a client socket may already hold the port.
 */
const STACK_PORTS = {
  test: { nats: 24222, redis: 26379, pg: 25432, chHttp: 28123, chTcp: 29000 },
  bench: { nats: 31222, redis: 31379, pg: 31432, chHttp: 31123, chTcp: 31900 },
};
export function useDefaults(kind: 'test' | 'bench'): void {
  const p = STACK_PORTS[kind];
  const defaults: Record<string, string> = {
    DATA_DIR: `.data/${kind}`,
    NATS_PORT: String(p.nats),
    REDIS_PORT: String(p.redis),
    PG_PORT: String(p.pg),
    CLICKHOUSE_HTTP_PORT: String(p.chHttp),
    CLICKHOUSE_TCP_PORT: String(p.chTcp),
  };
  for (const [k, v] of Object.entries(defaults)) if (!process.env[k]) process.env[k] = v;
}

/** A throw-away stack: the four servers started empty under DATA_DIR. */
export async function freshServers(fast: boolean, log: Log): Promise<{ cfg: Config; servers: LocalServer[] }> {
  const cfg = configOrExit('stack');
  for (const sub of ['nats', 'redis', 'postgres', 'clickhouse']) rmSync(join(cfg.dataDir, sub), { recursive: true, force: true });
  mkdirSync(cfg.dataDir, { recursive: true });
  const servers = await startLocalServers(cfg, log, { fast });
  const onSignal = () => void stopServers(servers, log).then(() => process.exit(130));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return { cfg, servers };
}
