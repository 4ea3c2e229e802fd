// Which run a figure or a test result came from: an id, its start time, the git commit it measured
// and its mode. The bench writes it into every results file (bench/results.ts); `npm run
// test:cluster` gives it to the cluster tests, which record their failover figures under it.
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';

/** `full` and `quick`: every scenario; `only`: the scenarios named by `--only` (quick or full durations). */
export type RunMode = 'full' | 'quick' | 'only';

export interface RunInfo {
  run_id: string;
  started_at: string;
  /** `git rev-parse HEAD` of the measured tree, null outside a git checkout. */
  git_commit: string | null;
  /** Whether the tree had uncommitted changes (outside bench/results/) when the run started. */
  git_dirty: boolean | null;
  mode: RunMode;
  /** Quick durations (`--quick`), also for an `only` run. */
  quick: boolean;
  /** The scenarios of an `only` run, sorted; null for full and quick runs. */
  only: string[] | null;
}

export function gitState(root: string): { git_commit: string | null; git_dirty: boolean | null } {
  const git = (...a: string[]) => spawnSync('git', a, { cwd: root, encoding: 'utf8' });
  const head = git('rev-parse', 'HEAD');
  if (head.status !== 0) return { git_commit: null, git_dirty: null };
  // Result files are what a run writes: they do not make the measured code a different one.
  const status = git('status', '--porcelain', '--', '.', ':(exclude)bench/results');
  return { git_commit: head.stdout.trim(), git_dirty: status.status === 0 ? status.stdout.trim() !== '' : null };
}

export function newRun(root: string, opt: { quick: boolean; only: Iterable<string> | null }, now = new Date()): RunInfo {
  const only = opt.only ? [...new Set(opt.only)].sort() : null;
  return { run_id: randomUUID(), started_at: now.toISOString(), ...gitState(root), mode: only ? 'only' : opt.quick ? 'quick' : 'full', quick: opt.quick, only };
}

