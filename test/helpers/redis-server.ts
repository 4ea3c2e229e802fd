// A Redis server of a test's own, for tests that make it refuse writes (maxmemory, noeviction; a
// replica's READONLY) or stop it: run as the stack's is (deploy/local-servers.ts), without persistence, on a port the
// caller picks (freePort: one the OS hands out).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

export class OwnRedis {
  private child: ChildProcess | null = null;
  readonly dir = mkdtempSync(join(tmpdir(), 'fleet-redis-'));
  constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  async start(): Promise<void> {
    const args = [
      '--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir,
      '--save', '', '--appendonly', 'no', '--notify-keyspace-events', 'Ex',
      '--maxmemory-policy', 'noeviction', '--daemonize', 'no', '--logfile', '',
    ];
    this.child = spawn('redis-server', args, { stdio: 'ignore' });
    // Never outlive the test process (its teardown stops it; this covers a test that died first).
    const child = this.child;
    process.once('exit', () => child.kill('SIGKILL'));
    const r = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on('error', () => {});
    try {
      for (let i = 0; ; i++) {
        try {
          await r.connect();
          await r.ping();
          return;
        } catch (e) {
          if (i >= 100 || child.exitCode !== null) throw new Error(`own redis-server did not start: ${(e as Error).message}`);
          r.disconnect();
          await new Promise((res) => setTimeout(res, 100));
        }
      }
    } finally {
      r.disconnect();
    }
  }

  /** CONFIG SET on this server (maxmemory, …), over a connection of its own. */
  async config(name: string, value: string): Promise<void> {
    await this.command('CONFIG', 'SET', name, value);
  }

  /** Any command on this server (REPLICAOF, …), over a connection of its own. */
  async command(name: string, ...args: string[]): Promise<unknown> {
    const r = new Redis(this.url, { maxRetriesPerRequest: 1 });
    try {
      return await r.call(name, ...args);
    } finally {
      r.disconnect();
    }
  }

  async stop(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.on('exit', r));
    c.kill('SIGTERM');
    await exited;
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
