// A Postgres server of a test's own, for tests that crash it (kill -9) and start it again. It runs
// as the stack's servers do (deploy/local-servers.ts: as the `postgres` user when root), in a
// folder under the test data folder, on a free port.
import { mkdtempSync, mkdirSync, readFileSync, rmSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { startPostgres, type LocalServer } from '../../deploy/local-servers.js';
import type { Config } from '../../lib/infra/config.js';
import { ROOT } from '../../deploy/service-process.js';

export class OwnPostgres {
  private server: LocalServer | null = null;
  readonly dir: string;

  constructor(readonly port: number) {
    const parent = join(ROOT, process.env.DATA_DIR ?? '.data/test');
    mkdirSync(parent, { recursive: true });
    this.dir = mkdtempSync(join(parent, 'own-pg-'));
    chmodSync(this.dir, 0o755);
  }

  /** A database URL on this server (`postgres` is the maintenance database). */
  url(db = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${db}`;
  }

  private get cfg(): Config {
    return { dataDir: this.dir, ports: { postgres: this.port }, databaseUrl: this.url() } as unknown as Config;
  }

  /** Starts it (again); after a kill -9 the old backends may need a moment to go: retried. */
  async start(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        this.server = await startPostgres(this.cfg, () => {}, { fast: true });
        return;
      } catch (e) {
        if (attempt >= 20) throw e;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /** kill -9 of the postmaster: a crash, no shutdown. */
  kill9(): void {
    const pid = Number(readFileSync(join(this.dir, 'postgres', 'server.pid'), 'utf8').trim());
    process.kill(pid, 'SIGKILL');
    this.server = null;
  }

  async destroy(): Promise<void> {
    await this.server?.stop().catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}
