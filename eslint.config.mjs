// ESLint (typescript-eslint): a small rule set of real mistakes, not style (formatting is left to
// the editor). Run by `npm test` (test/unit/structure.test.ts) over the server, bench, deploy and test code;
// the dashboard has its own type check (dashboard/tsconfig.json).
import tseslint from 'typescript-eslint';

// SQL (Postgres and ClickHouse statements) lives in lib/store/ (docs/architecture.md "Floor plan"):
// a string or template that starts a statement anywhere else is an error. When the rule came, 43
// files outside lib/store/ held SQL; all of it has moved into store modules since.
const SQL = '^\\s*(SELECT|INSERT INTO|UPDATE \\w+ SET|DELETE FROM|WITH \\w+ AS|CREATE (TABLE|MATERIALIZED)|ALTER (TABLE|SYSTEM)|DROP TABLE|OPTIMIZE TABLE|TRUNCATE|SYSTEM (STOP|START))\\b';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'dashboard/**', '.data/**', 'test/artifacts/**', 'bin/**', '**/*.mjs'] },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.base],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // A promise nobody awaits or handles: an error in it is lost, or crashes the process.
      '@typescript-eslint/no-floating-promises': ['error', { ignoreVoid: true }],
      // Awaiting what is not a promise, or passing an async function where nothing waits for it.
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      // Type-only imports stay type-only (no runtime import, and no import cycle from a type).
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      'no-var': 'error',
      'prefer-const': 'error',
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'no-throw-literal': 'error',
    },
  },
  {
    files: ['gateway/**/*.ts', 'workers/**/*.ts', 'api/**/*.ts', 'cli/**/*.ts', 'deploy/**/*.ts', 'lib/**/*.ts'],
    ignores: ['lib/store/**'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: `Literal[value=/${SQL}/]`, message: 'SQL lives in lib/store/ (docs/architecture.md "Floor plan")' },
        { selector: `TemplateElement[value.raw=/${SQL}/]`, message: 'SQL lives in lib/store/ (docs/architecture.md "Floor plan")' },
      ],
    },
  },
  {
    // Tests read answers of any shape.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off', '@typescript-eslint/no-floating-promises': 'off' },
  },
);
