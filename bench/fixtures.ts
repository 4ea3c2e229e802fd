// What the load looks like: many customers, each with its own token, many machines per customer,
// and the report bodies (heartbeat; diagnostics with 10 items; status with a 4 KiB snapshot; host
// metrics with 100 records, whose ids bench/wrk/ingest.lua makes unique per request).
import { writeFileSync, mkdirSync } from 'node:fs';
import pg from 'pg';
import { join } from 'node:path';
import { createPool, type Pool } from '../lib/infra/postgres.js';
import type { Config } from '../lib/infra/config.js';
import { createClickHouse } from '../lib/infra/clickhouse.js';
import { connectNats, ensureStreams, ensureConsumer } from '../lib/infra/nats.js';
import { deadLetterStream, ingestStreams } from '../lib/contract/messages.js';
import type { JetStreamManager } from 'nats';
import { createCustomer, createToken } from '../lib/store/customers.js';

/**
 * Statements on the `postgres` database of the server of `databaseUrl`, each over a connection of
 * its own (CREATE and DROP DATABASE cannot run inside the database they name): a bench's
 * database of its own is made and removed with it.
 */
export function serverAdmin(databaseUrl: string): (sql: string) => Promise<void> {
  const adminUrl = new URL(databaseUrl);
  adminUrl.pathname = '/postgres';
  return async (sql) => {
    const c = new pg.Client({ connectionString: adminUrl.toString() });
    await c.connect();
    try {
      await c.query(sql);
    } finally {
      await c.end();
    }
  };
}

/** The per-customer rates lifted (a bench measures throughput, and its few customers send everything). */
export const LIFTED_CUSTOMER_RATES = {
  QUOTA_INGEST_REQUESTS_PER_S: '100000000',
  QUOTA_INGEST_BYTES_PER_S: String(64 * 1024 ** 3),
};

export interface Fixtures {
  customers: { id: string; slug: string; token: string }[];
  dir: string;
  /** `path<TAB>token` per line, for one report kind. */
  targets(kind: string, software?: string): string;
  body(kind: keyof typeof BODIES): string;
}

export const BODIES = {
  heartbeat: JSON.stringify({ version: '5.10.2', uptime_seconds: 86_400, pid: 4242, ip_addresses: ['10.0.0.7'] }),
  diagnostics: JSON.stringify({
    items: Array.from({ length: 10 }, (_, i) => ({ code: 1000 + i, message: `check ${i}: value within limits (sensor ${i})`, severity: i % 3 === 0 ? 1 : 0 })),
  }),
  status: (() => {
    const snapshot: Record<string, unknown> = { modules: {} };
    for (let i = 0; JSON.stringify(snapshot).length < 4000; i++) {
      (snapshot.modules as Record<string, unknown>)[`module-${i}`] = { state: 'ok', version: `1.${i}.0`, queue: i * 7, cpu: { value: 12.5, type: 'percent' } };
    }
    return JSON.stringify({ status: 'running', message: 'all modules up', snapshot });
  })(),
  /** Batch ingest: 100 heartbeats of 100 machines of one customer in one request. */
  batch: JSON.stringify({
    entries: Array.from({ length: 100 }, (_, i) => ({ machine: `b-${i}`, software: 'agent', kind: 'heartbeat', body: { version: '5.10.2', uptime_seconds: 86_400, pid: 4242, ip_addresses: ['10.0.0.7'] } })),
  }),
  metrics: JSON.stringify({
    items: Array.from({ length: 100 }, (_, i) => ({
      client_metric_id: `@@ID@@-${i}`,
      values: { cpu_percent: 12.5 + i, mem_used_mb: 2048 + i, disk_used_percent: 71.2 },
      labels: { source: 'bench' },
    })),
  }),
};

export async function createFixtures(pool: Pool, dir: string, customers: number, machinesPerCustomer: number): Promise<Fixtures> {
  mkdirSync(dir, { recursive: true });
  const cs: Fixtures['customers'] = [];
  for (let i = 0; i < customers; i++) {
    const c = await createCustomer(pool, `bench-${i}-${Date.now().toString(36)}`);
    const { token } = await createToken(pool, c.id, 'bench');
    cs.push({ id: c.id, slug: c.slug, token });
  }
  for (const [kind, body] of Object.entries(BODIES)) writeFileSync(join(dir, `${kind}.json`), body);
  return {
    customers: cs,
    dir,
    targets(kind: string, software = 'agent') {
      const file = join(dir, `targets-${kind}-${software}.tsv`);
      const lines: string[] = [];
      if (kind === 'batch') {
        // One path per customer: the machines are in the body.
        for (const c of cs) lines.push(`/api/ingest/${c.slug}/batch\t${c.token}`);
        writeFileSync(file, lines.join('\n') + '\n');
        return file;
      }
      // Interleave customers so consecutive requests hit different tokens and machines.
      for (let m = 0; m < machinesPerCustomer; m++) {
        for (const c of cs) lines.push(`/api/ingest/${c.slug}/m-${m}/${software}/${kind}\t${c.token}`);
      }
      writeFileSync(file, lines.join('\n') + '\n');
      return file;
    },
    body(kind) {
      return join(dir, `${kind}.json`);
    },
  };
}

/**
 * The servers a soak talks to: a Postgres pool, ClickHouse, NATS with the stream and the workers'
 * consumer made, and the stream and its dead letters emptied, so what the soak counts is its own.
 */
export async function soakServers(cfg: Config, name: string, poolSize: number) {
  const pool = createPool(cfg.databaseUrl, poolSize, name);
  const ch = createClickHouse({ url: cfg.clickhouseUrl, database: cfg.clickhouseDatabase });
  const nc = await connectNats(cfg.natsUrl, name);
  const jsm = await nc.jetstreamManager();
  await ensureStreams(jsm, cfg);
  for (const stream of ingestStreams(cfg.streamName)) {
    await ensureConsumer(jsm, stream, cfg.worker.consumerName, cfg.worker.ackWaitS);
    await jsm.streams.purge(stream);
  }
  await jsm.streams.purge(deadLetterStream(cfg.streamName));
  return { pool, ch, nc, jsm };
}

/** Messages of both lanes (lib/contract/messages.ts) not yet applied: pending or delivered and not acked. */
export async function backlog(jsm: JetStreamManager, cfg: Pick<Config, 'streamName'> & { worker: { consumerName: string } }): Promise<number> {
  const infos = await Promise.all(ingestStreams(cfg.streamName).map((n) => jsm.consumers.info(n, cfg.worker.consumerName)));
  return infos.reduce((n, i) => n + i.num_pending + i.num_ack_pending, 0);
}
