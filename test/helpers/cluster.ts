// The cluster topology of `npm run cluster` (deploy/cluster.ts) for one test file of
// `npm run test:cluster`: started fresh under DATA_DIR/<name> on ports from CLUSTER_TEST_BASE_PORT
// (default 22700), a customer with a token, and HTTPS through nginx with the cluster's own
// certificate. Stopped at teardown.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Test } from 'tap';
import { Agent, fetch as undiciFetch } from 'undici';
import { Cluster } from '../../deploy/cluster.js';
import { createClickHouse, type ClickHouseClient } from '../../lib/infra/clickhouse.js';
import { createPool, type Pool } from '../../lib/infra/postgres.js';
import { connectNats, type NatsConnection } from '../../lib/infra/nats.js';
import { createCustomer, createToken, type Customer } from '../../lib/store/customers.js';
import { localTable } from '../../lib/store/schema.js';
import type { Answer } from './http.js';
import { ROOT } from '../../deploy/service-process.js';
import { clusterRun, recordClusterResult, type ClusterRun } from '../../bench/results.js';
import { storedOnce as storedIn } from './stored-once.js';
import { ingestPartitions, type IngestPartition } from '../../lib/contract/messages.js';

export interface TestCluster {
  c: Cluster;
  pool: Pool;
  /** ClickHouse through nginx (either replica). */
  ch: ClickHouseClient;
  /** ClickHouse on replica i only. */
  replica(i: number): ClickHouseClient;
  nc: NatsConnection;
  customer: Customer;
  token: string;
  /** An HTTPS request through nginx, trusting only the cluster's certificate; `from`: the client's own loopback address. */
  https(method: string, path: string, token: string | null, body?: unknown, headers?: Record<string, string>, from?: string): Promise<Answer>;
  /** A Server-Sent Events stream through nginx: its raw text so far. */
  stream(path: string, token: string): Promise<{ status: number; headers: Headers; text(): string; close(): Promise<void> }>;
  /** The server name (n1, n2, n3) of a stream's leader (default: partition 0's main stream). */
  streamLeader(stream?: string): Promise<string>;
  /** The ingest partitions (lib/contract/messages.ts): their streams and subjects. */
  partitions: IngestPartition[];
  /** The run this file belongs to (bench/results.ts `clusterRun`). */
  run: ClusterRun;
  /**
   * Keeps what a failure measured in the run's results file under bench/results/ (the figures
   * docs/operations.md "Cluster failover" quotes); returns the file's path.
   */
  record(failure: string, entry: Record<string, unknown>): string;
}

/** `env`: settings every service process of this file's cluster gets (deploy/cluster.ts ClusterOptions). */
export async function testCluster(t: Test, name: string, env: Record<string, string> = {}): Promise<TestCluster> {
  const base = Number(process.env.CLUSTER_TEST_BASE_PORT || 22700);
  const dataDir = resolve(process.env.DATA_DIR || '.data/cluster-test', name);
  const log = (msg: string) => {
    if (process.env.FLEET_PROC_LOGS) process.stderr.write(`[cluster] ${msg}\n`);
  };
  const c = new Cluster({ dataDir, base, log, fresh: true, env });
  const clients: { close(): Promise<unknown> }[] = [];
  t.teardown(async () => {
    for (const x of clients) await x.close().catch(() => {});
    await c.stop();
  });
  // A failed start must not leave servers behind: the teardown runs only once the file goes on.
  let pool: Pool, ch: ClickHouseClient, replicas: ClickHouseClient[], nc: NatsConnection, customer: Customer, token: string;
  try {
    await c.startServers();
    pool = createPool(c.cfg.databaseUrl, 4, 'cluster-test');
    clients.push({ close: () => pool.end() });
    ch = createClickHouse({ url: c.cfg.clickhouseUrl, database: c.cfg.clickhouseDatabase });
    clients.push(ch);
    replicas = c.ports.clickhouseHttp.map((p) => createClickHouse({ url: `http://127.0.0.1:${p}`, database: c.cfg.clickhouseDatabase }));
    clients.push(...replicas);
    nc = await connectNats(c.cfg.natsUrl, 'cluster-test');
    clients.push({ close: () => nc.close() });
    customer = await createCustomer(pool, `ct-${name}`, `cluster test ${name}`);
    token = (await createToken(pool, customer.id, 'cluster test')).token;
    await pool.query(`UPDATE licences SET device_limit = 100000`);
    await c.startApps();
  } catch (e) {
    for (const x of clients) await x.close().catch(() => {});
    clients.length = 0;
    await c.stop().catch(() => {});
    throw e;
  }

  const ca = readFileSync(c.tls.cert);
  const agents = new Map<string, Agent>();
  const agent = (from: string) => {
    let a = agents.get(from);
    if (!a) {
      a = new Agent({ connect: { ca }, localAddress: from, keepAliveTimeout: 2000 });
      agents.set(from, a);
      clients.push(a);
    }
    return a;
  };
  const https: TestCluster['https'] = async (method, path, tok, body, headers = {}, from = '127.0.0.1') => {
    const r = await undiciFetch(`${c.url}${path}`, {
      method,
      dispatcher: agent(from),
      headers: { ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...(tok ? { Authorization: `Bearer ${tok}` } : {}), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await r.text();
    let parsed: unknown = text;
    try {
      parsed = text === '' ? null : JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: r.status, body: parsed, headers: r.headers as unknown as Headers };
  };
  const stream: TestCluster['stream'] = async (path, tok) => {
    const ac = new AbortController();
    const r = await undiciFetch(`${c.url}${path}`, { dispatcher: agent('127.0.0.1'), headers: { Authorization: `Bearer ${tok}` }, signal: ac.signal });
    let raw = '';
    const done = (async () => {
      try {
        const dec = new TextDecoder();
        for await (const chunk of r.body!) raw += dec.decode(chunk as Uint8Array, { stream: true });
      } catch {
        /* aborted */
      }
    })();
    return {
      status: r.status,
      headers: r.headers as unknown as Headers,
      text: () => raw,
      close: async () => {
        ac.abort();
        await done;
      },
    };
  };
  const partitions = ingestPartitions(c.cfg.streamName, c.cfg.subjectPrefix, c.cfg.streamPartitions);
  const streamLeader = async (name = partitions[0]!.streams.reports) => {
    const jsm = await nc.jetstreamManager({ timeout: 5000 });
    const info = await jsm.streams.info(name);
    const leader = info.cluster?.leader;
    if (!leader) throw new Error('the stream has no leader');
    return leader;
  };
  const run = clusterRun(ROOT, name);
  const record = (failure: string, entry: Record<string, unknown>) => recordClusterResult(join(ROOT, 'bench', 'results'), run, failure, { test_file: `test/cluster/${name}.test.ts`, ...entry });
  return { c, pool, ch, replica: (i) => replicas[i]!, nc, customer, token, https, stream, streamLeader, partitions, run, record };
}

/** The cluster's data folder of a test (for the log files under it). */
export const clusterDataDir = (name: string) => join(resolve(process.env.DATA_DIR || '.data/cluster-test'), name);

/**
 * Steady ingest through nginx: `clients` agents each sending heartbeats (a unique `version` marker
 * each) and diagnostics, one after another. Records every answer, what was acknowledged (200, 202 for diagnostics), and
 * when (for the time without service).
 */
export function steadyIngest(k: TestCluster, prefix: string, clients = 6, machines: string[] = Array.from({ length: 10 }, (_, i) => `${prefix}-m${i}`)) {
  const acked: { kind: 'heartbeat' | 'diagnostics'; marker: string; machine: string; at: number }[] = [];
  const answered: { machine: string; status: string; at: number }[] = [];
  const answers = new Map<string, number>();
  const note = (key: string) => answers.set(key, (answers.get(key) ?? 0) + 1);
  let running = true;
  let seq = 0;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const client = async () => {
    while (running) {
      const n = seq++;
      const kind = n % 4 === 0 ? 'diagnostics' : 'heartbeat';
      const marker = `${prefix}-${n}`;
      const machine = machines[n % machines.length]!;
      const body = kind === 'heartbeat' ? { version: marker } : { items: [{ code: n % 1000, severity: 0, message: marker }] };
      try {
        const r = await k.https('POST', `/api/ingest/${k.customer.slug}/${machine}/agent/${kind}`, k.token, body);
        note(String(r.status));
        answered.push({ machine, status: String(r.status), at: Date.now() });
        if (r.status === 200 || r.status === 202) acked.push({ kind, marker, machine, at: Date.now() });
        else if (r.status === 503 && !r.headers.get('retry-after')) note('503 without Retry-After');
      } catch {
        note('network');
      }
      await sleep(20);
    }
  };
  const done = Promise.all(Array.from({ length: clients }, client));
  return {
    acked,
    answered,
    answers,
    /** Acknowledged reports after time `t` (ms). */
    ackedSince: (t: number) => acked.filter((a) => a.at > t).length,
    /** The longest time between two acknowledged reports from `from` on (ms). */
    longestGap(from: number, of: (machine: string) => boolean = () => true): number {
      let gap = 0;
      let last = from;
      for (const a of acked) {
        if (a.at < from || !of(a.machine)) continue;
        gap = Math.max(gap, a.at - last);
        last = a.at;
      }
      return gap;
    },
    /** 5xx answers other than 503 with Retry-After, and network errors. */
    bad(): string[] {
      return [...answers.entries()].filter(([s]) => (/^5/.test(s) && s !== '503') || s === '503 without Retry-After' || s === 'network').map(([s, n]) => `${s}×${n}`);
    },
    summary: () => [...answers.entries()].map(([s, n]) => `${s}×${n}`).join(', '),
    /** The answers by status (or `network`), for the results file. */
    counts: () => Object.fromEntries(answers),
    async stop() {
      running = false;
      await done;
    },
  };
}

/**
 * How the acknowledged reports are stored, counted on raw rows (no FINAL), read through `from`:
 * the Distributed tables through nginx (either replica answers), or replica i's own local tables
 * (`<name>_local`, lib/store/schema.ts). `missing`: markers with no row; `split`: markers held by more
 * than one report id (one request stored as two reports; merges never hide it, and it is wrong
 * even where copies of one report are allowed, after a kill -9 that loses an ack:
 * docs/architecture.md); `doubled`: markers with more than one raw row, a lower bound: merges run
 * here and may have collapsed copies of one report already. (Stopped merges, as in the one-server
 * tests, do not fit this load: a run of the failover file reached ClickHouse's 300 parts per
 * partition, inserts were refused and the reports never stored.)
 */
export async function storedOnce(k: TestCluster, acked: { kind: string; marker: string }[], prefix: string, from: 'distributed' | number = 'distributed') {
  const ch = from === 'distributed' ? k.ch : k.replica(from);
  const table = (name: 'heartbeats' | 'diagnostics') => (from === 'distributed' ? name : localTable(name));
  const like = `${prefix}-%`;
  const [h, d] = await Promise.all([
    storedIn(ch, table('heartbeats'), 'version', acked.filter((a) => a.kind === 'heartbeat').map((a) => a.marker), { like }),
    storedIn(ch, table('diagnostics'), 'message', acked.filter((a) => a.kind === 'diagnostics').map((a) => a.marker), { like }),
  ]);
  return { missing: [...h.missing, ...d.missing], doubled: [...h.doubled, ...d.doubled], split: [...h.split, ...d.split] };
}
