// Runs the tap suite (compiled to dist/test) against the test stack's servers and ends with the
// plain line `N passed, N failed` (printed by deploy/stack.ts once the servers are stopped): N counts the named tests (t.test blocks) of every file; a file
// that fails outside any named test counts as one failed test. The cluster tests (test/cluster/,
// `npm run test:cluster`) are a suite of their own: each file starts its own cluster topology
// (deploy/cluster.ts), so they run one at a time and never in `npm test`.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { Config } from '../lib/infra/config.js';

function findTests(root: string, dir = join(root, 'dist', 'test')): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...findTests(root, p));
    // A compiled test whose source was removed (dist/ is not cleaned between builds) is not run.
    else if (e.endsWith('.test.js') && existsSync(join(root, relative(join(root, 'dist'), p)).replace(/\.js$/, '.ts'))) out.push(p);
  }
  return out.sort();
}

export interface TapCounts {
  passed: number;
  failed: number;
  /** One line per failed test: `file: test: first failing assertion`, or the file alone. */
  failures: string[];
}

/**
 * Counts test points one level inside each file (named tests); a failing file with none counts
 * once. Names each failure, so the end of a long CI log says what failed (`.ci/run` repeats them).
 */
export function countTap(output: string): TapCounts {
  let passed = 0;
  let failed = 0;
  let fileFailuresInside = 0;
  const failures: string[] = [];
  let file = '';
  let firstAssertion = '';
  for (const line of output.split('\n')) {
    const fileStart = /^# Subtest: (.*)$/.exec(line);
    if (fileStart) {
      file = fileStart[1]!;
      continue;
    }
    if (/^ {4}# Subtest: /.test(line)) {
      firstAssertion = '';
      continue;
    }
    const assertion = /^ {8}not ok \d+ - (.*)$/.exec(line);
    if (assertion && !firstAssertion) {
      firstAssertion = assertion[1]!;
      continue;
    }
    const inner = /^ {4}(not )?ok \d+ - (.*?)(?: # time=[\d.]+m?s)?$/.exec(line);
    if (inner) {
      if (inner[1]) {
        failed++;
        fileFailuresInside++;
        failures.push(`${file}: ${inner[2]}${firstAssertion ? `: ${firstAssertion}` : ''}`);
      } else passed++;
      firstAssertion = '';
      continue;
    }
    const top = /^(not )?ok \d+ - (.*)$/.exec(line);
    if (top) {
      if (top[1] && fileFailuresInside === 0) {
        failed++;
        failures.push(top[2]!);
      }
      fileFailuresInside = 0;
      file = '';
    }
  }
  return { passed, failed, failures };
}

/** The lines that name each failure; `.ci/run` collects them by their prefix. */
export function failureLines(counts: TapCounts): string {
  return counts.failures.map((f) => `FAILED: ${f}\n`).join('');
}

const CLUSTER_DIR = join('dist', 'test', 'cluster');

export async function runTests(cfg: Config | null, root: string, filters: string[]): Promise<TapCounts> {
  const cluster = cfg === null;
  const all = findTests(root).filter((f) => relative(root, f).startsWith(CLUSTER_DIR + '/') === cluster);
  // A fragment names a file by its path (`test/stack/lanes`) or by its path without the layer's
  // folder (`test/lanes`, as files were named before test/ was grouped by layer).
  const flat = (f: string) => f.replace(/\/test\/(unit|servers|stack|browser)\//, '/test/');
  const files = filters.length ? all.filter((f) => filters.some((x) => f.includes(x.replace(/\.ts$/, '')) || flat(f).includes(x.replace(/\.ts$/, '')))) : all;
  if (files.length === 0) {
    process.stdout.write('no test files matched\n');
    return { passed: 0, failed: 1, failures: ['no test files matched'] };
  }
  const servers = cfg ? { NATS_URL: cfg.natsUrl, REDIS_URL: cfg.redisUrl, DATABASE_URL: cfg.databaseUrl, CLICKHOUSE_URL: cfg.clickhouseUrl } : {};
  const env = {
    ...process.env,
    ...servers,
    FLEET_ROOT: root,
    NODE_OPTIONS: '--enable-source-maps',
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
  };
  // Files that measure latency under load run alone, after the others (test/README.md "Files that
  // run alone"): a second file beside them on two cores would measure that file, not the service.
  const alone = files.filter((f) => runsAlone(root, f));
  const together = files.filter((f) => !alone.includes(f));
  const counts: TapCounts = { passed: 0, failed: 0, failures: [] };
  for (const [group, jobs] of [[together, cluster ? '1' : (process.env.TEST_JOBS ?? '2')], [alone, '1']] as const) {
    if (group.length === 0) continue;
    const c = await runTap(root, group, jobs, env);
    counts.passed += c.passed;
    counts.failed += c.failed;
    counts.failures.push(...c.failures);
  }
  return counts;
}

/** The marker of a file that runs alone: a line `// Runs alone: <why>` in its source. */
function runsAlone(root: string, compiled: string): boolean {
  const source = join(root, relative(join(root, 'dist'), compiled)).replace(/\.js$/, '.ts');
  return /^\/\/ Runs alone: /m.test(readFileSync(source, 'utf8'));
}

async function runTap(root: string, files: string[], jobs: string, env: NodeJS.ProcessEnv): Promise<TapCounts> {
  const args = [
    join(root, 'node_modules', 'tap', 'dist', 'esm', 'run.mjs'),
    '--disable-coverage',
    '--allow-empty-coverage',
    '-R', 'tap',
    '--timeout', process.env.TEST_TIMEOUT_S ?? '600',
    '--jobs', jobs,
    ...files.map((f) => relative(root, f)),
  ];
  const child = spawn(process.execPath, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => {
    output += d.toString();
    process.stdout.write(d);
  });
  const code: number = await new Promise((resolve) => child.on('close', (c) => resolve(c ?? 1)));
  const counts = countTap(output);
  if (code !== 0 && counts.failed === 0) {
    // tap failed outside any test (crash, timeout)
    counts.failed = 1;
    counts.failures.push(`tap exited with ${code} outside any test`);
  }
  return counts;
}
