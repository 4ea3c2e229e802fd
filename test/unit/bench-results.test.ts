// Which run every bench figure came from (bench/results.ts, bench/run.ts `assembleResults` and
// `publishResults`): a partial run (`--only`) writes files of its own and leaves the full or quick
// run's file, its ratios and the generated tables byte-identical; a ratio of two figures of
// different runs is refused. Cluster failover results (test/cluster/) keep to their run the same way.
import t, { type Test } from 'tap';
import { mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assembleResults, publishResults, type BenchResults } from '../../bench/run.js';
import { benchRatios, clusterFileNames, newRun, ratio, recordClusterResult, resultFileNames } from '../../bench/results.js';
import type { WrkResult } from '../../bench/wrk.js';

const wrk = (requestsPerS: number): WrkResult => ({ requestsPerS, requests: requestsPerS * 4, non2xx: 0, socketErrors: 0, latencyP50Ms: 1, latencyP99Ms: 2, seconds: 4 });
const machine = { cores: 2, cpu: 'test', memory_gib: 1, node: process.version };
const load = { customers: 1, machines: 1, wrk: { threads: 1, connections: 64, seconds: 4 } };

/** A scratch repository root with the two documents a full run rewrites. */
function scratchRoot(t: Test): string {
  const root = mkdtempSync(join(tmpdir(), 'bench-results-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'bench'), { recursive: true });
  mkdirSync(join(root, 'docs'), { recursive: true });
  writeFileSync(join(root, 'bench', 'README.md'), '# Benchmarks\n\n<!-- results:start -->\nold table\n<!-- results:end -->\n');
  writeFileSync(join(root, 'docs', 'operations.md'), '# Operations\n\n<!-- capacity:start -->\nold capacity\n<!-- capacity:end -->\n');
  return root;
}

/** Every file under root/bench/results and the two documents, by name: their bytes. */
function snapshotFiles(root: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const f of readdirSync(join(root, 'bench', 'results'))) out.set(`bench/results/${f}`, readFileSync(join(root, 'bench', 'results', f), 'utf8'));
  out.set('bench/README.md', readFileSync(join(root, 'bench', 'README.md'), 'utf8'));
  out.set('docs/operations.md', readFileSync(join(root, 'docs', 'operations.md'), 'utf8'));
  return out;
}

function run(root: string, quick: boolean, only: string[] | null, throughput: Record<string, WrkResult>, extra: Record<string, unknown> = {}, finishedAt?: Date) {
  const results: BenchResults = { ...newRun(root, { quick, only }), args: [], machine, load, ...extra };
  return publishResults(root, assembleResults(results, throughput, {}, finishedAt));
}

t.test('a ratio of figures of different runs is refused; of one run, computed', async (t) => {
  t.equal(ratio({ run_id: 'a', requests_per_s: 30 }, { run_id: 'a', requests_per_s: 100 }), 0.3);
  t.equal(ratio({ run_id: 'a', requests_per_s: 30 }, { run_id: 'b', requests_per_s: 100 }), null, 'different run ids');
  t.equal(ratio({ run_id: '', requests_per_s: 30 }, { run_id: '', requests_per_s: 100 }), null, 'figures without a run id');
  t.equal(ratio({ run_id: 'a', requests_per_s: 30 }, undefined), null, 'a figure missing');
  t.equal(ratio({ run_id: 'a', requests_per_s: 30 }, { run_id: 'a', requests_per_s: 0 }), null, 'a zero denominator');
  t.equal(ratio({ run_id: 'a', requests_per_s: 1248 }, { run_id: 'a', requests_per_s: 31462 }, 100), 3.97, 'batch: 100 reports per request');
  // The figures of latest-full.json before this change: the gateway of a later `--only gateway` run
  // over the ceiling of the full run (31,462 / 96,237 = 0.33) – now absent.
  const mixed = benchRatios({
    ceiling_bare_uws: { run_id: 'full', requests_per_s: 96237 },
    alternative_fastify_pg: { run_id: 'full', requests_per_s: 3990 },
    gateway_heartbeat: { run_id: 'only-gateway', requests_per_s: 31462 },
    gateway_batch: { run_id: 'only-gateway', requests_per_s: 1248 },
  });
  t.same(mixed, { gateway_vs_ceiling: null, gateway_vs_alternative: null, batch_vs_single_reports: 3.97 });
});

t.test('a run stamps its figures with its id and computes its ratios from them only', async (t) => {
  const root = scratchRoot(t);
  const results: BenchResults = { ...newRun(root, { quick: true, only: ['gateway'] }), args: [], machine, load };
  const done = assembleResults(results, { gateway_heartbeat: wrk(30_000), gateway_batch: wrk(1_500) }, {});
  t.match(done, { mode: 'only', quick: true, only: ['gateway'], run_id: results.run_id, started_at: String, finished_at: String });
  t.ok('git_commit' in done && 'git_dirty' in done, 'the commit is recorded (null outside a git checkout)');
  const tp = done.throughput as Record<string, { run_id: string }>;
  t.same(Object.values(tp).map((f) => f.run_id), [results.run_id, results.run_id]);
  t.same(done.ratios, { gateway_vs_ceiling: null, gateway_vs_alternative: null, batch_vs_single_reports: 5 }, 'no ceiling in this run: no gateway / ceiling');
});

t.test('`--quick` then `--quick --only traffic-light`: the quick run’s file, ratios and the documents unchanged', async (t) => {
  const root = scratchRoot(t);
  const quick = run(root, true, null, { ceiling_bare_uws: wrk(100_000), alternative_fastify_pg: wrk(4_000), gateway_heartbeat: wrk(40_000) }, {}, new Date('2026-11-25T18:00:00.000Z'));
  const before = snapshotFiles(root);
  const quickRun = JSON.parse(before.get('bench/results/latest-quick.json')!) as Record<string, any>;
  t.same(quickRun.ratios, { gateway_vs_ceiling: 0.4, gateway_vs_alternative: 10, batch_vs_single_reports: null });
  t.equal(before.get('bench/README.md'), readFileSync(join(root, 'bench', 'README.md'), 'utf8'));
  t.match(before.get('bench/README.md'), /old table/, 'a quick run leaves bench/README.md alone');

  const only = run(root, true, ['traffic-light'], {}, { traffic_light: { red_instances: 10_000 } }, new Date('2026-11-25T18:05:00.000Z'));
  const after = snapshotFiles(root);
  for (const [name, bytes] of before) t.equal(after.get(name), bytes, `${name} byte-identical`);
  t.same([...after.keys()].filter((k) => !before.has(k)).sort(), ['bench/results/latest-only-traffic-light-quick.json', 'bench/results/only-traffic-light-2026-11-25T18-05-00-000Z-quick.json']);
  t.not(only.stamped, quick.stamped);
  const partial = JSON.parse(after.get('bench/results/latest-only-traffic-light-quick.json')!) as Record<string, any>;
  t.not(partial.run_id, quickRun.run_id, 'a run of its own');
  t.match(partial, { mode: 'only', only: ['traffic-light'], traffic_light: { red_instances: 10_000 } });
  t.same(partial.throughput, {}, 'none of the quick run’s figures copied in');
});

t.test('a full run rewrites the table naming its file; a later `--only gateway` leaves it and the full file byte-identical', async (t) => {
  const root = scratchRoot(t);
  const full = run(root, false, null, { ceiling_bare_uws: wrk(96_237), alternative_fastify_pg: wrk(3_990), gateway_heartbeat: wrk(42_426) }, {}, new Date('2026-11-23T14:55:08.006Z'));
  t.equal(full.stamped, join(root, 'bench', 'results', '2026-11-23T14-55-08-006Z-full.json'));
  const before = snapshotFiles(root);
  const readme = before.get('bench/README.md')!;
  t.notMatch(readme, /old table/, 'a full run rewrites the table');
  t.match(readme, /every figure below: `bench\/results\/2026-11-23T14-55-08-006Z-full\.json`/, 'the table names its file');
  t.match(readme, /\| gateway \/ ceiling \| 0\.44 \|/);

  run(root, false, ['gateway'], { gateway_heartbeat: wrk(31_462), gateway_batch: wrk(1_248) }, {}, new Date('2026-11-23T14:57:37.827Z'));
  const after = snapshotFiles(root);
  for (const [name, bytes] of before) t.equal(after.get(name), bytes, `${name} byte-identical`);
  const partial = JSON.parse(after.get('bench/results/latest-only-gateway-full.json')!) as Record<string, any>;
  t.same(partial.ratios, { gateway_vs_ceiling: null, gateway_vs_alternative: null, batch_vs_single_reports: 3.97 }, 'only the ratio both of whose figures it measured');
});

t.test('result file names: an `only` run can never be named like a full or quick run', async (t) => {
  const at = '2026-11-25T18:00:00.000Z';
  t.same(resultFileNames({ mode: 'full', quick: false, only: null }, at), { stamped: '2026-11-25T18-00-00-000Z-full.json', latest: 'latest-full.json' });
  t.same(resultFileNames({ mode: 'quick', quick: true, only: null }, at), { stamped: '2026-11-25T18-00-00-000Z-quick.json', latest: 'latest-quick.json' });
  t.same(resultFileNames({ mode: 'only', quick: false, only: ['ceiling', 'gateway'] }, at), { stamped: 'only-ceiling+gateway-2026-11-25T18-00-00-000Z-full.json', latest: 'latest-only-ceiling+gateway-full.json' });
  t.same(resultFileNames({ mode: 'only', quick: false, only: ['../x'] }, at).latest, 'latest-only-___x-full.json', 'no path out of the folder');
});

t.test('cluster failover results: one file per run; a later run or a partial one keeps nothing of another run', async (t) => {
  const root = scratchRoot(t);
  const dir = join(root, 'bench', 'results');
  const a = { run_id: 'run-a', started_at: '2026-11-25T18:10:00.000Z', git_commit: 'abc', git_dirty: false, only: null };
  recordClusterResult(dir, a, 'stream_leader_kill', { longest_gap_ms: 4000 });
  recordClusterResult(dir, a, 'rolling_restart', { longest_gap_ms: 700 });
  const first = JSON.parse(readFileSync(join(dir, 'cluster-failover-latest.json'), 'utf8')) as Record<string, any>;
  t.match(first, { run_id: 'run-a', git_commit: 'abc', failures: { stream_leader_kill: { longest_gap_ms: 4000 }, rolling_restart: { longest_gap_ms: 700 } } });
  t.equal(readFileSync(join(dir, 'cluster-failover-2026-11-25T18-10-00-000Z.json'), 'utf8'), readFileSync(join(dir, 'cluster-failover-latest.json'), 'utf8'));

  const full = snapshotFiles(root);
  const partial = { run_id: 'run-b', started_at: '2026-11-25T18:20:00.000Z', git_commit: 'abc', git_dirty: false, only: ['edge'] };
  t.same(clusterFileNames(partial), { stamped: 'cluster-failover-only-edge-2026-11-25T18-20-00-000Z.json', latest: 'cluster-failover-only-edge-latest.json' });
  recordClusterResult(dir, partial, 'stream_leader_kill', { longest_gap_ms: 9000 });
  const after = snapshotFiles(root);
  for (const [name, bytes] of full) t.equal(after.get(name), bytes, `${name} byte-identical after a partial run`);

  const c = { run_id: 'run-c', started_at: '2026-11-25T18:30:00.000Z', git_commit: 'def', git_dirty: false, only: null };
  recordClusterResult(dir, c, 'clickhouse_replica_kill', { longest_gap_ms: 300 });
  const latest = JSON.parse(readFileSync(join(dir, 'cluster-failover-latest.json'), 'utf8')) as Record<string, any>;
  t.same(Object.keys(latest.failures), ['clickhouse_replica_kill'], 'run c keeps none of run a’s entries');
  t.equal(latest.run_id, 'run-c');
  t.equal(readFileSync(join(dir, 'cluster-failover-2026-11-25T18-10-00-000Z.json'), 'utf8'), full.get('bench/results/cluster-failover-2026-11-25T18-10-00-000Z.json'), 'run a’s own file kept');
});
