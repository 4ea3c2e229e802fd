// A worker's /healthz (the process runs), /readyz (it can do its job: every server it writes to
// answers, the consumer delivers) and /metrics, on WORKER_HTTP_HOST:WORKER_HTTP_PORT. A worker
// never exits because a server went away; it says so here and waits.
import { createServer, type Server } from 'node:http';
import { ping, type Pool } from '../lib/infra/postgres.js';
import type { ClickHouseClient } from '../lib/infra/clickhouse.js';
import type { Redis } from '../lib/infra/redis.js';
import type { Logger } from '../lib/infra/log.js';
import type { Metrics } from '../lib/infra/metrics.js';

/** Named problems; ready when there is none. */
export class Readiness {
  private readonly problems = new Map<string, string>();

  set(name: string, problem: string | null): void {
    if (problem === null) this.problems.delete(name);
    else this.problems.set(name, problem);
  }

  /** null when ready, else every problem in one line. */
  problem(): string | null {
    if (this.problems.size === 0) return null;
    return [...this.problems.entries()].map(([k, v]) => `${k}: ${v}`).join('; ');
  }
}

function within<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))),
  ]);
}

/** Asks Postgres, ClickHouse and Redis every `everyMs` whether they answer; returns a stop function. */
export function probeDependencies(r: Readiness, deps: { pool: Pool; ch: ClickHouseClient; redis: Redis }, everyMs: number, log: Logger): () => void {
  const probes: [string, () => Promise<unknown>][] = [
    ['postgres', () => ping(deps.pool)],
    ['clickhouse', async () => {
      const p = await deps.ch.ping();
      if (!p.success) throw p.error;
    }],
    ['redis', () => (deps.redis.status === 'ready' ? deps.redis.ping() : Promise.reject(new Error(`connection ${deps.redis.status}`)))],
  ];
  let running = false;
  const tick = async () => {
    if (running) return;
    running = true;
    await Promise.all(
      probes.map(async ([name, probe]) => {
        try {
          await within(probe(), Math.max(1000, everyMs));
          r.set(name, null);
        } catch (e) {
          r.set(name, 'unreachable');
          log.debug({ err: e, dependency: name }, 'dependency probe failed');
        }
      }),
    );
    running = false;
  };
  void tick();
  const t = setInterval(() => void tick(), everyMs);
  t.unref();
  return () => clearInterval(t);
}

export function serveHealth(host: string, port: number, r: Readiness, metrics: Metrics, log: Logger): Server {
  const json = { 'Content-Type': 'application/json' };
  const server = createServer((req, res) => {
    if (req.url === '/metrics') {
      void metrics.text().then((t) => res.writeHead(200, { 'Content-Type': metrics.contentType }).end(t));
    } else if (req.url === '/healthz') {
      res.writeHead(200, json).end('{"ok":true}');
    } else if (req.url === '/readyz') {
      const p = r.problem();
      if (p === null) res.writeHead(200, json).end('{"ok":true}');
      else res.writeHead(503, json).end(JSON.stringify({ detail: `not ready: ${p}` }));
    } else res.writeHead(404, json).end('{"detail":"not found"}');
  });
  server.on('error', (e) => log.error({ err: e, host, port }, 'worker HTTP endpoint failed (is the port taken? each worker needs its own WORKER_HTTP_PORT)'));
  server.listen(port, host, () => log.info({ host, port: (server.address() as { port: number }).port }, 'worker http listening'));
  return server;
}
