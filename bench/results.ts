// Where every figure of a bench or cluster run is kept, and which run it came from. Each run gets an
// id, its start time, the git commit it measured and its mode; every file under bench/results/ says
// so, a ratio is computed only from two figures of the same run, and a partial run (`--only`)
// writes files of its own: it never rewrites the full or quick run's file, its ratios, or the
// tables generated from them (bench/README.md, docs/operations.md "Capacity model").
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export { gitState, newRun, type RunInfo, type RunMode } from '../deploy/run-info.js';
import { newRun, type RunInfo } from '../deploy/run-info.js';

/** A measured figure: which run measured it travels with it. */
export interface Figure {
  run_id: string;
  requests_per_s: number;
}

/**
 * `a / b × scale`, rounded to 2 places; null when either figure is missing, when b is 0, or when the
 * two figures come from different runs (on a shared machine a ratio across runs measures the machine).
 */
export function ratio(a: Figure | undefined, b: Figure | undefined, scale = 1): number | null {
  if (!a || !b || !a.run_id || a.run_id !== b.run_id || !(b.requests_per_s > 0)) return null;
  return Math.round(((a.requests_per_s * scale) / b.requests_per_s) * 100) / 100;
}

/** The ratios of the heartbeat targets, from the figures of one run (null where it lacks one). */
export function benchRatios(t: Record<string, Figure | undefined>) {
  return {
    gateway_vs_ceiling: ratio(t.gateway_heartbeat, t.ceiling_bare_uws),
    gateway_vs_alternative: ratio(t.gateway_heartbeat, t.alternative_fastify_pg),
    // Reports per second: a batch request carries 100 heartbeats.
    batch_vs_single_reports: ratio(t.gateway_batch, t.gateway_heartbeat, 100),
  };
}

const stampOf = (iso: string) => iso.replace(/[:.]/g, '-');

/**
 * The files a run writes, relative to bench/results/: full and quick runs `<finished>-<mode>.json`
 * and `latest-<mode>.json`; an `only` run `only-<names>-<finished>-<quick|full>.json` and
 * `latest-only-<names>-<quick|full>.json`, so it can never land on a full or quick run's file.
 */
export function resultFileNames(run: Pick<RunInfo, 'mode' | 'quick' | 'only'>, finishedAt: string): { stamped: string; latest: string } {
  const duration = run.quick ? 'quick' : 'full';
  if (run.mode === 'only') {
    const names = (run.only ?? []).map((s) => s.replace(/[^a-z0-9-]/gi, '_')).join('+');
    return { stamped: `only-${names}-${stampOf(finishedAt)}-${duration}.json`, latest: `latest-only-${names}-${duration}.json` };
  }
  return { stamped: `${stampOf(finishedAt)}-${run.mode}.json`, latest: `latest-${run.mode}.json` };
}

/** Writes a run's results (its RunInfo fields at the top) under `dir`; returns the two paths. */
export function writeRunFiles(dir: string, results: RunInfo & { finished_at: string }): { stamped: string; latest: string } {
  const names = resultFileNames(results, results.finished_at);
  mkdirSync(dir, { recursive: true });
  const json = JSON.stringify(results, null, 2) + '\n';
  const out = { stamped: join(dir, names.stamped), latest: join(dir, names.latest) };
  writeFileSync(out.stamped, json);
  writeFileSync(out.latest, json);
  return out;
}

/** A run of the cluster tests: the RunInfo fields that apply (`only`: the file filters given, if any). */
export type ClusterRun = Pick<RunInfo, 'run_id' | 'started_at' | 'git_commit' | 'git_dirty' | 'only'>;

/**
 * The files of a cluster run: `cluster-failover-<started>.json` and `cluster-failover-latest.json`;
 * a run of some files only (`npm run test:cluster -- edge`, or a file run alone)
 * `cluster-failover-only-<names>-<started>.json` and `cluster-failover-only-<names>-latest.json`.
 */
export function clusterFileNames(run: ClusterRun): { stamped: string; latest: string } {
  const names = run.only ? run.only.map((s) => s.replace(/[^a-z0-9-]/gi, '_')).join('+') : null;
  const kind = names ? `cluster-failover-only-${names}` : 'cluster-failover';
  return { stamped: `${kind}-${stampOf(run.started_at)}.json`, latest: `${kind}-latest.json` };
}

/**
 * One entry of a cluster failover test (test/cluster/), added to its run's files (clusterFileNames).
 * The files of one `npm run test:cluster` run one after another and share its id (CLUSTER_RUN, set
 * by deploy/stack.ts). An entry of another run is never kept beside this run's.
 */
export function recordClusterResult(dir: string, run: ClusterRun, name: string, entry: Record<string, unknown>): string {
  mkdirSync(dir, { recursive: true });
  const names = clusterFileNames(run);
  const file = join(dir, names.stamped);
  let doc: Record<string, any> = { run_id: run.run_id, started_at: run.started_at, git_commit: run.git_commit, git_dirty: run.git_dirty, mode: 'test:cluster', only: run.only, failures: {} };
  if (existsSync(file)) {
    const prev = JSON.parse(readFileSync(file, 'utf8')) as Record<string, any>;
    if (prev.run_id === run.run_id) doc = prev;
  }
  doc.failures[name] = { ...entry, recorded_at: new Date().toISOString() };
  doc.updated_at = new Date().toISOString();
  const json = JSON.stringify(doc, null, 2) + '\n';
  writeFileSync(file, json);
  writeFileSync(join(dir, names.latest), json);
  return file;
}

/**
 * The run a cluster test file belongs to: its `npm run test:cluster` run's (CLUSTER_RUN, JSON), else
 * (the file run on its own) a run of that file only.
 */
export function clusterRun(root: string, file: string, env: NodeJS.ProcessEnv = process.env): ClusterRun {
  if (env.CLUSTER_RUN) {
    const r = JSON.parse(env.CLUSTER_RUN) as RunInfo;
    if (r.run_id && r.started_at) return { run_id: r.run_id, started_at: r.started_at, git_commit: r.git_commit ?? null, git_dirty: r.git_dirty ?? null, only: r.only ?? null };
  }
  const r = newRun(root, { quick: false, only: null });
  return { run_id: r.run_id, started_at: r.started_at, git_commit: r.git_commit, git_dirty: r.git_dirty, only: [file] };
}
