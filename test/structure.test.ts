// The code's own checks, in `npm test`: ESLint (eslint.config.mjs: typescript-eslint, a small rule
// set of real mistakes) and no import cycles between modules (dpdm; type-only imports are ignored,
// since they vanish from the compiled code).
import t from 'tap';
import { ESLint } from 'eslint';
import { parseDependencyTree, parseCircular, prettyCircular } from 'dpdm';
import { ROOT } from '../deploy/service-process.js';

t.test('ESLint finds nothing', async (t) => {
  const eslint = new ESLint({ cwd: ROOT });
  const results = await eslint.lintFiles(['.']);
  const problems = results.flatMap((r) => r.messages.map((m) => `${r.filePath.slice(ROOT.length + 1)}:${m.line}:${m.column} ${m.ruleId ?? ''} ${m.message}`));
  t.ok(results.length > 100, `${results.length} files linted`);
  t.same(problems, [], 'no problems');
});

t.test('no import cycles (type-only imports aside)', async (t) => {
  const entries = ['gateway/main.ts', 'workers/main.ts', 'api/main.ts', 'cli/fleet.ts', 'deploy/stack.ts', 'bench/run.ts'];
  const tree = await parseDependencyTree(entries, { context: ROOT, transform: true, tsconfig: 'tsconfig.json', include: /\.ts$/, exclude: /node_modules/ });
  t.ok(Object.keys(tree).length > 100, `${Object.keys(tree).length} modules read`);
  const cycles = parseCircular(tree, true);
  t.same(cycles, [], cycles.length ? prettyCircular(cycles) : 'none');
});
