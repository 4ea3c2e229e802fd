// The floor plan, enforced (docs/architecture.md "Floor plan"): which folder may import which.
// Checked by `npm test` (test/unit/structure.test.ts); by hand: `npx depcruise --config .dependency-cruiser.cjs gateway workers api cli deploy bench lib`.
//
//   processes   gateway/ workers/ api/ cli/   each its own entry; none imports another
//               (gateway/http/ is the gateway's transport: its core, gateway/*.ts, does not import it)
//   harness     deploy/ (starts servers and processes), bench/, test/: may import the processes
//   lib/store/     the only place with SQL and Redis keys of an aggregate (docs/architecture.md)
//   lib/domain/    rules more than one process uses
//   lib/infra/     clients of the servers, config, logging, metrics
//   lib/contract/  routes, schemas, the queue's message format, answers: imports nothing of lib
//
// A layer imports only the layers under it: processes → store → domain → infra → contract.
const PROCESSES = ['gateway', 'workers', 'api', 'cli'];
const other = (p) => `^(${PROCESSES.filter((q) => q !== p).join('|')}|deploy|bench|test)/`;

module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      comment: 'No module imports itself through others, type-only imports included (a type cycle is a design cycle).',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    ...PROCESSES.map((p) => ({
      name: `${p}-is-a-process`,
      comment: `${p}/ imports no other process, and no harness (deploy/, bench/, test/): what two processes share lives in lib/.`,
      severity: 'error',
      from: { path: `^${p}/` },
      to: { path: other(p) },
    })),
    {
      name: 'deploy-is-not-bench',
      comment: 'deploy/ (the launcher and the servers) does not import the bench; the bench imports deploy/.',
      severity: 'error',
      from: { path: '^deploy/' },
      to: { path: '^(bench|test)/' },
    },
    {
      name: 'gateway-core-knows-no-transport',
      comment: 'The gateway\'s ingest core (gateway/*.ts) does not import its HTTP transport (gateway/http/, uWS): a test or another transport calls the core alike. Only the entry (gateway/main.ts) wires the two.',
      severity: 'error',
      from: { path: '^gateway/[^/]+\\.ts$', pathNot: '^gateway/main\\.ts$' },
      to: { path: '^gateway/http/' },
    },
    {
      name: 'lib-serves-the-processes',
      comment: 'lib/ imports no process and no harness.',
      severity: 'error',
      from: { path: '^lib/' },
      to: { path: '^(gateway|workers|api|cli|deploy|bench|test|dashboard)/' },
    },
    {
      name: 'store-is-under-the-processes',
      comment: 'lib/store/ imports domain, infra and contract only.',
      severity: 'error',
      from: { path: '^lib/store/' },
      to: { path: '^lib/(?!store/|domain/|infra/|contract/)' },
    },
    {
      name: 'domain-holds-rules-not-storage',
      comment: 'lib/domain/ imports infra and contract only: a rule that needs SQL belongs in lib/store/.',
      severity: 'error',
      from: { path: '^lib/domain/' },
      to: { path: '^lib/(store)/' },
    },
    {
      name: 'infra-knows-no-rules',
      comment: 'lib/infra/ imports contract only.',
      severity: 'error',
      from: { path: '^lib/infra/' },
      to: { path: '^lib/(store|domain)/' },
    },
    {
      name: 'contract-is-the-ground',
      comment: 'lib/contract/ imports nothing else of lib/: the dashboard and every process read it.',
      severity: 'error',
      from: { path: '^lib/contract/' },
      to: { path: '^lib/(store|domain|infra)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist|\\.data)/' },
    // Type-only imports count: they are arrows of the design even though they vanish when compiled.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.json'] },
  },
};
