// A service process (gateway, worker, api) spawned from dist/ by tests and benchmarks, its JSON log
// lines kept so callers can wait for one ("listening") or assert on them.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The project root (dist/deploy/service-process.js -> ../..). */
export const ROOT = process.env.FLEET_ROOT ?? join(import.meta.dirname, '..', '..');

/**
 * Node's flags for one of the service processes (by its script under dist/). Workers and the api
 * get a larger young generation. A worker's batch lives for the whole batch, and with the default
 * 16 MiB semi-space its reports were promoted and swept as old objects (GC took 31 % of a draining
 * worker's CPU; 64 MiB raised a 1,000,000-report drain from 49k to 61k reports/s). The api's list
 * requests outlive scavenges the same way once they queue for Postgres: 64 MiB took a quarter off
 * its CPU per list request at 50 readers ([A8] in bench/README.md).
 */
export function nodeFlags(script: string): string[] {
  const flags = ['--enable-source-maps'];
  if (script.startsWith('workers/') || script.startsWith('api/')) flags.push('--max-semi-space-size=64');
  // FLEET_PROFILE_DIR: every service process writes a V8 CPU profile there when it exits (how the
  // bench's misses are explained; open the .cpuprofile files in Chrome's DevTools).
  if (process.env.FLEET_PROFILE_DIR) flags.push('--cpu-prof', `--cpu-prof-dir=${process.env.FLEET_PROFILE_DIR}`);
  return flags;
}

/**
 * The api's session key for a local stack: JWT_SECRET when set, else one generated once into
 * `dataDir/jwt-secret` (mode 600), the same for every api replica of that stack.
 */
export function sessionSecret(dataDir: string, jwtSecret = ''): string {
  if (jwtSecret) return jwtSecret;
  const file = join(dataDir, 'jwt-secret');
  if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString('hex') + '\n', { mode: 0o600 });
  return readFileSync(file, 'utf8').trim();
}

export interface LogLine {
  msg?: string;
  level?: number;
  port?: number;
  [k: string]: unknown;
}

/**
 * The processes this one started and that still run: when this process ends without stopping them
 * (a test file that failed before its teardown), they end with it instead of running on.
 */
const live = new Set<Proc>();
process.once('exit', () => {
  for (const p of live) if (p.running) p.child.kill('SIGKILL');
});

export class Proc {
  readonly child: ChildProcess;
  readonly lines: LogLine[] = [];
  output = '';
  private waiters: { pred: (l: LogLine) => boolean; resolve: (l: LogLine) => void }[] = [];
  readonly exited: Promise<number | null>;

  constructor(
    readonly name: string,
    script: string,
    env: Record<string, string>,
    /**
     * `echo`: copy its output to stderr, each chunk prefixed with the name and pid (`npm run cluster`).
     * `flags`: Node's flags in place of `nodeFlags(script)` (the bench scripts that have always run
     * their services on Node's defaults, with a CPU profile of one where asked).
     */
    opts: { echo?: boolean; flags?: string[] } = {},
  ) {
    this.child = spawn(process.execPath, [...(opts.flags ?? nodeFlags(script)), join(ROOT, 'dist', script)], {
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: 'info', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let buf = '';
    const onData = (d: Buffer) => {
      this.output += d.toString();
      if (opts.echo || process.env.FLEET_PROC_LOGS) process.stderr.write(`[${this.name} ${this.child.pid}] ${d.toString()}`);
      buf += d.toString();
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let parsed: LogLine;
        try {
          parsed = JSON.parse(line);
        } catch {
          parsed = { msg: line };
        }
        this.lines.push(parsed);
        for (const w of [...this.waiters]) {
          if (w.pred(parsed)) {
            this.waiters.splice(this.waiters.indexOf(w), 1);
            w.resolve(parsed);
          }
        }
      }
    };
    this.child.stdout!.on('data', onData);
    this.child.stderr!.on('data', onData);
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
    live.add(this);
    void this.exited.then(() => live.delete(this));
  }

  waitFor(pred: (l: LogLine) => boolean, ms = 30_000): Promise<LogLine> {
    const hit = this.lines.find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name}: no matching log line in ${ms} ms; output:\n${this.output.slice(-4000)}`)), ms);
      const w = {
        pred,
        resolve: (l: LogLine) => {
          clearTimeout(timer);
          resolve(l);
        },
      };
      this.waiters.push(w);
      void this.exited.then((code) => {
        if (this.waiters.includes(w)) {
          clearTimeout(timer);
          reject(new Error(`${this.name} exited (${code}) before the expected log line; output:\n${this.output.slice(-4000)}`));
        }
      });
    });
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM', ms = 15_000): Promise<void> {
    if (!this.running) return;
    this.child.kill(signal);
    const t = setTimeout(() => this.child.kill('SIGKILL'), ms);
    await this.exited;
    clearTimeout(t);
  }
}
