// What a scenario costs each process of the stack, read from /proc: CPU-seconds (user + system) of
// the gateway, the workers and every server the stack started for this data folder, and the rows
// Postgres wrote (pg_stat_user_tables). bench/run.ts takes a snapshot before and after a scenario
// and divides the difference by the reports it carried.
import { readdirSync, readFileSync } from 'node:fs';
import { servesDir } from '../deploy/local-servers.js';
import type { Pool } from '../lib/infra/postgres.js';

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ: 100 on every Linux the stack runs on). */
const HZ = 100;

interface Stat {
  comm: string;
  ppid: number;
  /** Own user + system time, s. */
  self: number;
  /** User + system time of waited-for children, s. */
  children: number;
}

function stat(pid: number): Stat | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // comm is in parentheses and may hold spaces: the fields start after the last ')'.
    const close = s.lastIndexOf(')');
    const comm = s.slice(s.indexOf('(') + 1, close);
    const f = s.slice(close + 2).split(' ');
    // f[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17; ppid field 4.
    return { comm, ppid: Number(f[1]), self: (Number(f[11]) + Number(f[12])) / HZ, children: (Number(f[13]) + Number(f[14])) / HZ };
  } catch {
    return null;
  }
}

function pids(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
}

export type Servers = Record<'nats-server' | 'postgres' | 'clickhouse-server' | 'redis-server', number>;

/** The pids of the servers started for `dataDir` (Postgres: the postmaster). */
export function serverPids(dataDir: string): Partial<Servers> {
  const out: Partial<Servers> = {};
  const all = pids().map((pid) => ({ pid, s: stat(pid) }));
  for (const { pid, s } of all) {
    if (!s || !servesDir(pid, dataDir)) continue;
    const name = serverName(s.comm);
    if (!name) continue;
    // The server, not a process it forked: Postgres's backends have the postmaster as parent, and
    // Redis's snapshot child (`redis-rdb-bgsave`) has Redis. Taken for Redis, that child (its CPU
    // counted from 0 at the fork) made a light run's Redis -37 µs per change.
    const parent = stat(s.ppid);
    if (parent && serverName(parent.comm) === name) continue;
    out[name] = pid;
  }
  return out;
}

function serverName(comm: string): keyof Servers | null {
  return comm.startsWith('clickhouse') ? 'clickhouse-server' : comm.startsWith('redis') ? 'redis-server' : comm === 'nats-server' ? 'nats-server' : comm === 'postgres' ? 'postgres' : null;
}

/** Servers whose work runs partly in children they fork: Postgres's backends, Redis's snapshot child. */
export const FORKING_SERVERS: ReadonlySet<string> = new Set(['postgres', 'redis-server']);

/**
 * CPU-seconds used so far by a process; with `withChildren`, also by every child it has (live ones
 * counted directly, exited ones through the kernel's cutime/cstime): Postgres works in backends.
 */
export function cpuSeconds(pid: number, withChildren = false): number {
  if (!withChildren) return stat(pid)?.self ?? 0;
  // A child reaped while its siblings are read is in neither: gone from /proc when its turn came,
  // and not yet in the parent's cutime read before. So the parent is read again after the
  // children, and the reading taken again while that moved (a child's CPU went to it meanwhile):
  // read once, a Postgres backend that exited then vanished from one reading, and the next one got
  // its whole lifetime back at once (test/servers/bench-cpu.test.ts).
  for (let attempt = 0; ; attempt++) {
    const before = stat(pid);
    if (!before) return 0;
    let live = 0;
    for (const p of pids()) {
      const c = stat(p);
      if (c && c.ppid === pid) live += c.self;
    }
    const after = stat(pid);
    if (!after) return 0;
    if (after.children === before.children || attempt >= 50) return before.self + before.children + live;
  }
}

/**
 * The whole machine's CPU-seconds so far, from the first line of /proc/stat: `busy` every state but
 * idle and iowait (steal included), `steal` the time the hypervisor gave this machine's CPUs to
 * someone else while they had work. A run's processes' own CPU against `busy` says how much went
 * to anything else (the bench, other programs); `steal` says the machine itself was slowed.
 */
export function hostCpu(): { busy: number; steal: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is inside user already)
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return { busy: (user + nice + system + irq + softirq + steal) / HZ, steal: steal / HZ };
}

export interface CpuSnapshot {
  at: number;
  /** The machine's (hostCpu). */
  host: { busy: number; steal: number };
  seconds: Record<string, number>;
  /** Rows written so far, per table. */
  pgRows: Record<string, number>;
}

/** Rows inserted, updated and deleted in each of this database's tables so far (Postgres's statistics). */
export async function pgRowsWritten(pool: Pool): Promise<Record<string, number>> {
  // The statistics a backend collected reach the shared counters when it is idle for a moment.
  const r = await pool.query<{ t: string; n: string }>('SELECT relname AS t, (n_tup_ins + n_tup_upd + n_tup_del)::text AS n FROM pg_stat_user_tables');
  return Object.fromEntries(r.rows.map((x) => [x.t, Number(x.n)]));
}

export async function snapshot(dataDir: string, procs: Record<string, number | undefined>, pool: Pool): Promise<CpuSnapshot> {
  const servers = serverPids(dataDir);
  const host = hostCpu();
  const seconds: Record<string, number> = {};
  for (const [name, pid] of Object.entries(procs)) if (pid) seconds[name] = cpuSeconds(pid);
  for (const [name, pid] of Object.entries(servers)) seconds[name] = cpuSeconds(pid, FORKING_SERVERS.has(name));
  return { at: Date.now(), host, seconds, pgRows: await pgRowsWritten(pool) };
}

/** CPU-seconds per 100,000 reports of each process between two snapshots, and Postgres rows. */
export function perHundredThousand(a: CpuSnapshot, b: CpuSnapshot, reports: number) {
  const k = 100_000 / Math.max(1, reports);
  const cpu: Record<string, number> = {};
  let total = 0;
  for (const [name, s] of Object.entries(b.seconds)) {
    const d = s - (a.seconds[name] ?? 0);
    total += d;
    cpu[name] = Math.round(d * k * 100) / 100;
  }
  cpu.total = Math.round(total * k * 100) / 100;
  // Which tables the rows went to: the first question whenever the total moves.
  const byTable: Record<string, number> = {};
  let rows = 0;
  for (const [t, n] of Object.entries(b.pgRows)) {
    const d = n - (a.pgRows[t] ?? 0);
    rows += d;
    if (d > 0) byTable[t] = Math.round(d * k);
  }
  return { reports, wall_s: Math.round((b.at - a.at) / 100) / 10, cpu_s_per_100k: cpu, pg_rows_per_100k: Math.round(rows * k), pg_rows_per_100k_by_table: byTable };
}

/** Redis's own account so far: CPU µs and calls per command (INFO commandstats) and keys expired. */
export interface RedisStats {
  commands: Record<string, { usec: number; calls: number }>;
  expiredKeys: number;
}

export async function redisStats(redis: { info: (section: string) => Promise<string> }): Promise<RedisStats> {
  const commands: RedisStats['commands'] = {};
  for (const m of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) commands[m[1]!] = { calls: Number(m[2]), usec: Number(m[3]) };
  const expired = /^expired_keys:(\d+)/m.exec(await redis.info('stats'));
  return { commands, expiredKeys: Number(expired?.[1] ?? 0) };
}

/**
 * What Redis did between two of its accounts: the commands that took the most of its time (µs of
 * Redis CPU per 100,000 reports, and calls), and the keys it expired. Read beside the process's CPU
 * when `redis-server` moves: a command the scenario did not send, or expiries, are Redis's work
 * for something else (an earlier scenario's keys, a sweep).
 */
export function redisDelta(a: RedisStats, b: RedisStats, reports: number) {
  const k = 100_000 / Math.max(1, reports);
  const top = Object.entries(b.commands)
    .map(([cmd, x]) => ({ cmd, us_per_100k: Math.round((x.usec - (a.commands[cmd]?.usec ?? 0)) * k), calls: x.calls - (a.commands[cmd]?.calls ?? 0) }))
    .filter((x) => x.calls > 0)
    .sort((x, y) => y.us_per_100k - x.us_per_100k)
    .slice(0, 6);
  return { top_commands: top, expired_keys: b.expiredKeys - a.expiredKeys };
}

