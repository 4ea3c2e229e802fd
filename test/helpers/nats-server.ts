// A NATS server of a test's own, for tests that stop and restart it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect as tcpConnect } from 'node:net';
import { connect } from 'nats';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bindable } from '../../deploy/local-servers.js';

/**
 * `count` consecutive ports below the kernel's ephemeral range (32768 up), free now, for a stack
 * that is started, stopped and started again on the same ports: a port from freePort() (the
 * ephemeral range) may meanwhile become some connection's own port, which answers no probe but
 * refuses a listener (a worker then runs without its /readyz). Drawn at random from 10000-13999,
 * where no fixed port of the project lies (deploy/local-servers.ts, deploy/cluster.ts).
 */
export async function stablePorts(count: number): Promise<number[]> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const first = 10_000 + Math.floor(Math.random() * (4000 - count));
    const ports = Array.from({ length: count }, (_, i) => first + i);
    if ((await Promise.all(ports.map(bindable))).every(Boolean)) return ports;
  }
  throw new Error(`no ${count} consecutive free ports in 10000-13999`);
}

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

function probe(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect(port, '127.0.0.1');
    s.on('data', () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
    s.setTimeout(500, () => {
      s.destroy();
      resolve(false);
    });
  });
}

export class OwnNats {
  private child: ChildProcess | null = null;
  readonly dir = mkdtempSync(join(tmpdir(), 'fleet-nats-'));
  constructor(readonly port: number) {}

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.child = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(this.port), '-js', '-sd', this.dir], { stdio: 'ignore' });
    // Never outlive the test process (its teardown stops it; this covers a test that died first).
    const child = this.child;
    process.once('exit', () => child.kill('SIGKILL'));
    for (let i = 0; i < 100; i++) {
      if (await probe(this.port)) break;
      if (i === 99) throw new Error('own nats-server did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
    // The port answers before JetStream does (it recovers its store first, slowly on a busy machine).
    const nc = await connect({ servers: this.url, reconnect: false });
    try {
      for (let i = 0; ; i++) {
        try {
          await (await nc.jetstreamManager({ timeout: 2000 })).getAccountInfo();
          return;
        } catch (e) {
          if (i >= 30) throw e;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    } finally {
      await nc.close();
    }
  }

  async stop(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.on('exit', r));
    c.kill('SIGTERM');
    await exited;
  }

  /** kill -9: no shutdown at all (a crash); start() again brings it back on the same data. */
  async kill9(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.on('exit', r));
    c.kill('SIGKILL');
    await exited;
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
