// The production shape on loopback: `npm run cluster`, and the topology the cluster tests
// (test/cluster/) start for themselves. The same code as `npm start`; only configuration differs:
//
//   agents, browsers ──HTTPS──▶ nginx (TLS, self-signed) ──▶ 2 gateways ──▶ NATS: 3 servers, JetStream R3
//                                                   └──────▶ 2 apis                    │
//                                                                          2 workers ◀─┘
//   gateways, workers, apis ──▶ Postgres, Redis Cluster (3 primaries, 3 replicas);
//                           ──HTTP──▶ nginx ──▶ 2 ClickHouse replicas ◀─▶ ZooKeeper
//
// ClickHouse: CLICKHOUSE_CLUSTER=fleet, so the migrations create ReplicatedReplacingMergeTree
// tables with Distributed tables over them (lib/store/schema.ts); the services reach either replica
// through nginx (as a Service would in Kubernetes), which passes a request to the other replica
// when one does not answer. Every server runs in its own process group with its data under
// DATA_DIR (default .data/cluster) and can be killed and started again on the same data.
import { spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, type Config } from '../lib/infra/config.js';
import { migrate } from '../lib/store/migrate.js';
import { connectNats, ensureStreams, placeStreamLeaders } from '../lib/infra/nats.js';
import { ingestPartitions } from '../lib/contract/messages.js';
import {
  clickhouseCommand,
  clickhouseConfig,
  clickhousePing,
  clickhouseUsers,
  natsConfig,
  spawnServer,
  startPostgres,
  stopServers,
  stopStale,
  tcpProbe,
  waitExit,
  waitFor,
  which,
  type LocalServer,
} from './local-servers.js';
import { Proc, sessionSecret } from './service-process.js';

type Log = (msg: string) => void;

/** The ClickHouse cluster (remote_servers) and NATS cluster name. */
export const CLUSTER_NAME = 'fleet';

/** `npm run cluster` listens from here on (22400-22443; CLUSTER_BASE_PORT); the cluster tests from 22700 (CLUSTER_TEST_BASE_PORT). */
export const CLUSTER_BASE_PORT = 22400;

/** Every port of a cluster, as offsets from its base (all below base + 100). */
export function clusterPorts(base: number) {
  return {
    nats: [base, base + 1, base + 2],
    natsRoute: [base + 3, base + 4, base + 5],
    natsMonitor: [base + 6, base + 7, base + 8],
    zookeeper: base + 9,
    clickhouseHttp: [base + 10, base + 11],
    clickhouseTcp: [base + 12, base + 13],
    clickhouseInterserver: [base + 14, base + 15],
    /** nginx in front of both ClickHouse replicas: the services' CLICKHOUSE_URL. */
    clickhouseProxy: base + 16,
    postgres: base + 17,
    redis: base + 18,
    /** The Redis Cluster's nodes (first three start as primaries) and their cluster bus ports. */
    redisCluster: [base + 26, base + 27, base + 28, base + 29, base + 30, base + 31],
    redisClusterBus: [base + 32, base + 33, base + 34, base + 35, base + 36, base + 37],
    gateway: [base + 20, base + 21],
    api: [base + 22, base + 23],
    worker: [base + 24, base + 25],
    https: base + 43,
  };
}
export type ClusterPorts = ReturnType<typeof clusterPorts>;

/** A server of the cluster: started, killed (kill -9) and started again on the same data. */
export class ClusterServer {
  private child: ChildProcess | null = null;

  constructor(
    readonly name: string,
    readonly dir: string,
    private readonly command: () => { cmd: string; args: string[] },
    private readonly ready: () => Promise<boolean>,
    private readonly log: Log,
    private readonly stopSignal: NodeJS.Signals = 'SIGTERM',
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(ms = 120_000): Promise<void> {
    if (this.running) return;
    await stopStale(join(this.dir, 'server.pid'), this.log);
    const { cmd, args } = this.command();
    const { child, logFile } = spawnServer(cmd, args, this.dir);
    this.child = child;
    await waitFor(this.name, this.ready, child, logFile, ms);
    this.log(`${this.name} ready (data ${this.dir})`);
  }

  /** A crash: SIGKILL, no shutdown. */
  async kill9(): Promise<void> {
    const c = this.child;
    if (!c || !this.running) return;
    c.kill('SIGKILL');
    await waitExit(c.pid!, 10_000);
    rmSync(join(this.dir, 'server.pid'), { force: true });
  }

  async stop(): Promise<void> {
    const c = this.child;
    if (c && this.running) {
      c.kill(this.stopSignal);
      if (!(await waitExit(c.pid!, 30_000))) {
        this.log(`${this.name} did not stop in 30 s; killing it`);
        c.kill('SIGKILL');
        await waitExit(c.pid!, 5000);
      }
    }
    rmSync(join(this.dir, 'server.pid'), { force: true });
  }
}

/** A self-signed certificate for 127.0.0.1 and localhost (openssl), made once per data folder. */
function ensureCertificate(dir: string): { cert: string; key: string } {
  const cert = join(dir, 'tls.crt');
  const key = join(dir, 'tls.key');
  if (existsSync(cert) && existsSync(key)) return { cert, key };
  const r = spawnSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '365', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', key, '-out', cert],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`openssl could not make the certificate: ${r.stderr || r.error}`);
  return { cert, key };
}

/**
 * nginx: TLS on one origin in front of the gateways and the apis (the routing of
 * deploy/compose/nginx.conf, on loopback ports), and plain HTTP in front of the ClickHouse replicas.
 */
export function nginxConfig(dir: string, p: ClusterPorts, tls: { cert: string; key: string }, runAs: string | null): string {
  const servers = (ports: number[]) => ports.map((x) => `        server 127.0.0.1:${x} max_fails=1 fail_timeout=2s;`).join('\n');
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((k) => `    ${k}_temp_path ${join(dir, 'tmp', k)};`).join('\n');
  return `# Generated by deploy/cluster.ts for \`npm run cluster\`; rewritten at every start.
daemon off;
worker_processes 1;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
${runAs ? `user ${runAs};\n` : ''}events {
    worker_connections 4096;
}

http {
    access_log off;
${temp}

    upstream fleet_gateway {
${servers(p.gateway)}
        keepalive 64;
    }

    upstream fleet_api {
${servers(p.api)}
        keepalive 16;
    }

    # Both ClickHouse replicas; below ClickHouse's own keep-alive timeout (10 s), so nginx never
    # sends on a connection ClickHouse is closing.
    upstream clickhouse {
${servers(p.clickhouseHttp)}
        keepalive 16;
        keepalive_timeout 5s;
    }

    server {
        listen 127.0.0.1:${p.https} ssl http2;
        ssl_certificate     ${tls.cert};
        ssl_certificate_key ${tls.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:fleet_tls:10m;
        add_header Strict-Transport-Security "max-age=31536000" always;

        client_max_body_size 16m;

        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        # Appends the peer's address: the services trust this hop only (TRUST_PROXY=127.0.0.1).
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_connect_timeout 2s;

        location ~ ^/(metrics|healthz|readyz)$ {
            return 404;
        }

        # A request that met a gateway going away (connection refused, or closed before an answer)
        # goes to the other one, POST included: the same as the agent retrying, and exactly once
        # with an Idempotency-Key (docs/operations.md, "Cluster").
        location /api/ingest/ {
            proxy_pass http://fleet_gateway;
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 2;
            proxy_read_timeout 60s;
        }

        location = /api/fleet/stream {
            proxy_pass http://fleet_api;
            proxy_buffering off;
            proxy_read_timeout 1h;
        }

        # Reads that met an api going away are asked again of the other one (idempotent methods only).
        location / {
            proxy_pass http://fleet_api;
            proxy_next_upstream error timeout http_502 http_503 http_504;
            proxy_next_upstream_tries 2;
            proxy_max_temp_file_size 0;
        }
    }

    server {
        listen 127.0.0.1:${p.clickhouseProxy};
        client_max_body_size 0;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_connect_timeout 2s;
        proxy_read_timeout 120s;
        location / {
            proxy_pass http://clickhouse;
            # An insert is safe to repeat: replicated tables drop a block they already hold, and
            # ReplacingMergeTree collapses rows by their report id.
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 2;
        }
    }
}
`;
}

export interface ClusterOptions {
  dataDir: string;
  base: number;
  log: Log;
  /** Remove the data first (tests). */
  fresh?: boolean;
  /** Copy the services' logs to stderr (`npm run cluster`). */
  echo?: boolean;
  /** Extra environment for every service process. */
  env?: Record<string, string>;
}

export class Cluster {
  readonly ports: ClusterPorts;
  readonly nats: ClusterServer[];
  readonly zookeeper: ClusterServer;
  readonly clickhouse: ClusterServer[];
  readonly nginx: ClusterServer;
  /** The Redis Cluster's six nodes: three primaries, each with a replica. */
  readonly redis: ClusterServer[];
  private others: LocalServer[] = [];
  readonly gateways: (Proc | null)[] = [null, null];
  readonly workers: (Proc | null)[] = [null, null];
  readonly apis: (Proc | null)[] = [null, null];
  /** The environment every service process gets. */
  readonly env: Record<string, string>;
  readonly cfg: Config;
  readonly tls: { cert: string; key: string };

  constructor(readonly o: ClusterOptions) {
    const p = (this.ports = clusterPorts(o.base));
    const d = o.dataDir;
    if (o.fresh) rmSync(d, { recursive: true, force: true });
    mkdirSync(d, { recursive: true });
    chmodSync(d, 0o755);
    this.nats = p.nats.map((port, i) => {
      const dir = join(d, `nats-${i + 1}`);
      const node = { serverName: `n${i + 1}`, clusterName: CLUSTER_NAME, routePort: p.natsRoute[i]!, routes: p.natsRoute, httpPort: p.natsMonitor[i]! };
      return new ClusterServer(
        `nats-server n${i + 1}`,
        dir,
        () => {
          mkdirSync(join(dir, 'jetstream'), { recursive: true });
          writeFileSync(join(dir, 'nats.conf'), natsConfig(dir, port, node));
          return { cmd: which('nats-server') ?? 'nats-server', args: ['-c', join(dir, 'nats.conf')] };
        },
        () => tcpProbe(port, 'INFO'),
        o.log,
      );
    });
    const zkDir = join(d, 'zookeeper');
    this.zookeeper = new ClusterServer(
      'zookeeper',
      zkDir,
      () => {
        mkdirSync(join(zkDir, 'data'), { recursive: true });
        // Standalone, on loopback, no admin web server (it would take port 8080), the 4-letter srvr only.
        writeFileSync(
          join(zkDir, 'zoo.cfg'),
          `tickTime=2000\ndataDir=${join(zkDir, 'data')}\nclientPort=${p.zookeeper}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\nmaxClientCnxns=0\n`,
        );
        const jars = ['/usr/share/java/zookeeper.jar', '/usr/share/java/slf4j-simple.jar'].filter((j) => existsSync(j));
        if (jars.length === 0) throw new Error('ZooKeeper not found (apt-get install zookeeper)');
        return {
          cmd: which('java') ?? 'java',
          args: ['-Xmx256m', '-Dzookeeper.jmx.log4j.disable=true', '-cp', [zkDir, ...jars].join(':'), 'org.apache.zookeeper.server.quorum.QuorumPeerMain', join(zkDir, 'zoo.cfg')],
        };
      },
      // `ruok` says imok before the database is loaded; `srvr` names the mode only once it serves.
      // (ClickHouse 18.16 may crash when its first ZooKeeper session fails: start it only after this.)
      () => tcpProbe(p.zookeeper, 'Mode: ', 'srvr'),
      o.log,
    );
    this.clickhouse = p.clickhouseHttp.map((httpPort, i) => {
      const dir = join(d, `clickhouse-${i + 1}`);
      const rep = { cluster: CLUSTER_NAME, replicaTcpPorts: p.clickhouseTcp, interserverPort: p.clickhouseInterserver[i]!, zookeeperPort: p.zookeeper, shard: '01', replica: `ch${i + 1}` };
      return new ClusterServer(
        `clickhouse-server ch${i + 1}`,
        dir,
        () => {
          for (const sub of ['data', 'tmp', 'user_files', 'format_schemas', 'log']) mkdirSync(join(dir, sub), { recursive: true });
          writeFileSync(join(dir, 'config.xml'), clickhouseConfig(dir, httpPort, p.clickhouseTcp[i]!, rep));
          writeFileSync(join(dir, 'users.xml'), clickhouseUsers(true));
          const { bin, args } = clickhouseCommand(join(dir, 'config.xml'));
          return { cmd: bin, args };
        },
        clickhousePing(httpPort),
        o.log,
      );
    });
    this.redis = p.redisCluster.map((port, i) => {
      const dir = join(d, `redis-${i + 1}`);
      return new ClusterServer(
        `redis-server r${i + 1}`,
        dir,
        () => {
          mkdirSync(dir, { recursive: true });
          // As startRedis (deploy/local-servers.ts), in cluster mode: expired-key events on every
          // node (a replica publishes once promoted), a failover after 3 s without its primary.
          const args = [
            '--port', String(port), '--bind', '127.0.0.1', '--dir', dir,
            '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-port', String(p.redisClusterBus[i]),
            '--cluster-node-timeout', '3000',
            '--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec',
            '--notify-keyspace-events', 'Ex', '--daemonize', 'no', '--logfile', '',
            '--maxmemory-policy', 'noeviction',
          ];
          return { cmd: which('redis-server') ?? 'redis-server', args };
        },
        () => tcpProbe(port, '+PONG', 'PING\r\n'),
        o.log,
      );
    });
    const ngDir = join(d, 'nginx');
    mkdirSync(ngDir, { recursive: true });
    this.tls = ensureCertificate(ngDir);
    this.nginx = new ClusterServer(
      'nginx',
      ngDir,
      () => {
        // As root, nginx's workers run as nobody: their temporary folders must be theirs.
        const root = process.getuid?.() === 0;
        for (const k of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) {
          const t = join(ngDir, 'tmp', k);
          mkdirSync(t, { recursive: true });
          if (root) chownSync(t, 65534, 65534);
        }
        const conf = join(ngDir, 'nginx.conf');
        writeFileSync(conf, nginxConfig(ngDir, p, this.tls, root ? 'nobody nogroup' : null));
        const bin = which('nginx') ?? '/usr/sbin/nginx';
        const test = spawnSync(bin, ['-t', '-q', '-p', ngDir, '-c', conf], { encoding: 'utf8' });
        if (test.status !== 0) throw new Error(`nginx refuses ${conf}: ${test.stderr}`);
        return { cmd: bin, args: ['-p', ngDir, '-c', conf] };
      },
      () => tcpProbe(p.https, null),
      o.log,
    );
    const natsUrl = p.nats.map((x) => `nats://127.0.0.1:${x}`).join(',');
    this.env = {
      DATA_DIR: d,
      NATS_URL: natsUrl,
      STREAM_REPLICAS: '3',
      // Three ingest partitions, each stream's leader on its own server (prepare): one server's core
      // carries one partition's share of ingest (docs/architecture.md "Partitions").
      STREAM_PARTITIONS: '3',
      DATABASE_URL: `postgres://postgres@127.0.0.1:${p.postgres}/fleet`,
      REDIS_URL: `redis-cluster://${p.redisCluster.map((x) => `127.0.0.1:${x}`).join(',')}`,
      // A heartbeat kept only in Redis is on a replica before its report is acknowledged: a primary
      // killed loses none (workers/heartbeat-state.ts).
      REDIS_WAIT_REPLICAS: '1',
      CLICKHOUSE_URL: `http://127.0.0.1:${p.clickhouseProxy}`,
      CLICKHOUSE_CLUSTER: CLUSTER_NAME,
      // nginx is the one hop in front, and it connects from 127.0.0.1: only that hop is trusted,
      // so a client on another address cannot choose the address the services log.
      TRUST_PROXY: '127.0.0.1',
      COOKIE_SECURE: '1',
      PUBLIC_API_URL: `https://127.0.0.1:${p.https}`,
      PUBLIC_GATEWAY_URL: `https://127.0.0.1:${p.https}`,
      JWT_SECRET: sessionSecret(d),
      ...o.env,
    };
    this.cfg = loadConfig({ ...this.env, PG_PORT: String(p.postgres), REDIS_PORT: String(p.redis) });
  }

  /** The address agents and browsers use. */
  get url(): string {
    return `https://127.0.0.1:${this.ports.https}`;
  }

  get servers(): ClusterServer[] {
    return [...this.nats, this.zookeeper, ...this.clickhouse, ...this.redis, this.nginx];
  }

  /** The servers, the schema and the streams. */
  async startServers(): Promise<void> {
    const log = this.o.log;
    const pg = startPostgres(this.cfg, log).then((s) => (this.others = [s]));
    const redis = Promise.all(this.redis.map((r) => r.start())).then(() => this.formRedisCluster());
    await Promise.all([...this.nats.map((n) => n.start()), this.zookeeper.start(), pg, redis]);
    await Promise.all(this.clickhouse.map((c) => c.start()));
    await this.nginx.start();
    await this.prepare();
  }

  /**
   * Joins the six Redis nodes into one cluster the first time (three primaries, a replica each;
   * `redis-cli --cluster create`); later starts find it in their nodes.conf. Waits until every slot
   * is served.
   */
  async formRedisCluster(): Promise<void> {
    const log = this.o.log;
    const port = this.ports.redisCluster[0]!;
    const info = () => spawnSync('redis-cli', ['-p', String(port), 'cluster', 'info'], { encoding: 'utf8' }).stdout ?? '';
    if (/cluster_known_nodes:1\b/.test(info())) {
      const r = spawnSync(
        'redis-cli',
        ['--cluster', 'create', ...this.ports.redisCluster.map((x) => `127.0.0.1:${x}`), '--cluster-replicas', '1', '--cluster-yes'],
        { encoding: 'utf8' },
      );
      if (r.status !== 0) throw new Error(`redis-cli --cluster create failed: ${r.stderr || r.stdout}`);
      log('Redis Cluster formed: 3 primaries, 3 replicas');
    }
    await retry('the Redis Cluster', log, async () => {
      if (!/cluster_state:ok/.test(info())) throw new Error('cluster_state is not ok yet');
    });
  }

  /** Migrations ON CLUSTER and the R3 streams; retried while the clusters settle (leaders, ZooKeeper sessions). */
  async prepare(): Promise<void> {
    const log = this.o.log;
    await retry('the ClickHouse and Postgres schema', log, () => migrate(this.cfg, log));
    const nc = await connectNats(this.cfg.natsUrl, 'fleet-cluster');
    try {
      // A new JetStream cluster answers only once its meta leader is elected and every peer joined.
      await retry('the R3 streams', log, async () => ensureStreams(await nc.jetstreamManager({ timeout: 5000 }), this.cfg));
      // Each partition's leaders (its main stream and heartbeat lane) on one server, the partitions'
      // on different servers.
      await retry("the partitions' leaders apart", log, async () => {
        const jsm = await nc.jetstreamManager({ timeout: 5000 });
        const groups = ingestPartitions(this.cfg.streamName, this.cfg.subjectPrefix, this.cfg.streamPartitions).map((x) => [x.streams.reports, x.streams.heartbeats]);
        const leaders = await placeStreamLeaders(nc, jsm, groups);
        const apart = new Set(groups.map((g) => leaders[g[0]!])).size === Math.min(groups.length, this.nats.length);
        if (!apart || groups.some((g) => g.some((x) => leaders[x] !== leaders[g[0]!]))) throw new Error(`leaders not placed: ${JSON.stringify(leaders)}`);
        log(`partition leaders: ${JSON.stringify(leaders)}`);
      });
    } finally {
      await nc.close();
    }
  }

  private proc(kind: 'gateway' | 'worker' | 'api', i: number): Proc {
    const p = this.ports;
    const script = { gateway: 'gateway/main.js', worker: 'workers/main.js', api: 'api/main.js' }[kind];
    const own: Record<string, string> = { gateway: { GATEWAY_PORT: String(p.gateway[i]) }, worker: { WORKER_HTTP_PORT: String(p.worker[i]) }, api: { API_PORT: String(p.api[i]) } }[kind];
    return new Proc(`${kind} ${i + 1}`, script, { ...this.env, ...own }, { echo: this.o.echo });
  }

  /** Starts gateway i (0 or 1) and waits until it answers ready. */
  async startGateway(i: number): Promise<Proc> {
    const g = (this.gateways[i] = this.proc('gateway', i));
    await g.waitFor((l) => l.msg === 'listening', 60_000);
    await waitHttp(`http://127.0.0.1:${this.ports.gateway[i]}/readyz`);
    return g;
  }

  async startWorker(i: number): Promise<Proc> {
    const w = (this.workers[i] = this.proc('worker', i));
    await w.waitFor((l) => l.msg === 'consuming', 120_000);
    return w;
  }

  async startApi(i: number): Promise<Proc> {
    const a = (this.apis[i] = this.proc('api', i));
    await a.waitFor((l) => l.msg === 'listening', 60_000);
    await waitHttp(`http://127.0.0.1:${this.ports.api[i]}/readyz`);
    return a;
  }

  async startApps(): Promise<void> {
    await Promise.all([0, 1].flatMap((i) => [this.startGateway(i), this.startWorker(i), this.startApi(i)]));
  }

  /** Front doors first (no new work), then the workers finish their batches, then the servers. */
  async stop(): Promise<void> {
    const stopAll = (ps: (Proc | null)[]) => Promise.all(ps.map((x) => (x ? x.stop('SIGTERM', 30_000) : Promise.resolve())));
    await Promise.all([stopAll(this.gateways), stopAll(this.apis)]);
    await stopAll(this.workers);
    await this.nginx.stop();
    await Promise.all([...this.clickhouse.map((c) => c.stop()), ...this.nats.map((n) => n.stop())]);
    await this.zookeeper.stop();
    await Promise.all(this.redis.map((r) => r.stop()));
    await stopServers(this.others, this.o.log);
  }
}

async function retry<T>(what: string, log: Log, fn: () => Promise<T>, ms = 120_000): Promise<T> {
  const until = Date.now() + ms;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > until) throw e;
      if (attempt === 1 || attempt % 10 === 0) log(`${what}: ${(e as Error).message}; retrying`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

async function waitHttp(url: string, ms = 60_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const ok = await fetch(url, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} not ready after ${ms} ms`);
}
