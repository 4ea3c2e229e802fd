// A NATS server of a test's own, for tests that stop and restart it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect as tcpConnect } from 'node:net';
import { connect } from 'nats';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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
