// The code's own checks, in `npm test`: ESLint (eslint.config.mjs: typescript-eslint, a small rule
// set of real mistakes, and SQL only in lib/store/) and the floor plan (.dependency-cruiser.cjs:
// which folder may import which, and no import cycle, type-only imports included).
import t from 'tap';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ESLint } from 'eslint';
import { cruise, type IReporterOutput, type ICruiseResult } from 'dependency-cruiser';
import { ROOT } from '../../deploy/service-process.js';

t.test('ESLint finds nothing', async (t) => {
  const eslint = new ESLint({ cwd: ROOT });
  const results = await eslint.lintFiles(['.']);
  const problems = results.flatMap((r) => r.messages.map((m) => `${r.filePath.slice(ROOT.length + 1)}:${m.line}:${m.column} ${m.ruleId ?? ''} ${m.message}`));
  t.ok(results.length > 100, `${results.length} files linted`);
  t.same(problems, [], 'no problems');
});

t.test('the floor plan holds: no process imports another, each layer of lib/ only the layers under it, no cycle', async (t) => {
  const config = createRequire(import.meta.url)(join(ROOT, '.dependency-cruiser.cjs'));
  const cwd = process.cwd();
  process.chdir(ROOT);
  let out: IReporterOutput;
  try {
    out = await cruise(['gateway', 'workers', 'api', 'cli', 'deploy', 'bench', 'lib'], { ...config.options, ruleSet: { forbidden: config.forbidden }, validate: true });
  } finally {
    process.chdir(cwd);
  }
  const r = out.output as ICruiseResult;
  t.ok(r.summary.totalCruised > 150, `${r.summary.totalCruised} modules read`);
  t.ok(config.forbidden.length >= 8, `${config.forbidden.length} rules`);
  const broken = r.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}${v.cycle ? ` (${v.cycle.map((c) => c.name).join(' -> ')})` : ''}`);
  t.same(broken, [], 'no rule broken');
});

t.test('the floor plan rules catch what they forbid (a tree written for it)', async (t) => {
  const { mkdtempSync, mkdirSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(join(tmpdir(), 'floor-plan-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const files: Record<string, string> = {
    'gateway/a.ts': "import { b } from '../workers/b.js';\nexport const a = b;\n",
    'workers/b.ts': 'export const b = 1;\n',
    'gateway/core.ts': "import { e } from './http/edge.js';\nexport const core = e;\n",
    'gateway/http/edge.ts': 'export const e = 1;\n',
    'gateway/main.ts': "import { e } from './http/edge.js';\nexport const main = e;\n",
    'lib/contract/c.ts': "import { d } from '../store/d.js';\nexport const c = d;\n",
    'lib/store/d.ts': 'export const d = 1;\n',
    'lib/domain/x.ts': "import type { Y } from './y.js';\nexport interface X { y?: Y }\n",
    'lib/domain/y.ts': "import type { X } from './x.js';\nexport interface Y { x?: X }\n",
  };
  for (const [p, src] of Object.entries(files)) {
    mkdirSync(join(dir, p, '..'), { recursive: true });
    writeFileSync(join(dir, p), src);
  }
  const config = createRequire(import.meta.url)(join(ROOT, '.dependency-cruiser.cjs'));
  const cwd = process.cwd();
  process.chdir(dir);
  let out: IReporterOutput;
  try {
    const { tsConfig: _none, ...options } = config.options;
    out = await cruise(['gateway', 'workers', 'lib'], { ...options, ruleSet: { forbidden: config.forbidden }, validate: true });
  } finally {
    process.chdir(cwd);
  }
  const names = new Set((out.output as ICruiseResult).summary.violations.map((v) => v.rule.name));
  t.ok(names.has('gateway-is-a-process'), 'a process importing another');
  const transport = (out.output as ICruiseResult).summary.violations.filter((v) => v.rule.name === 'gateway-core-knows-no-transport').map((v) => v.from);
  t.same(transport, ['gateway/core.ts'], "the gateway's core importing its transport (its entry may)");
  t.ok(names.has('contract-is-the-ground'), 'the contract importing the store');
  t.ok(names.has('no-cycles'), 'a cycle of type-only imports');
});
