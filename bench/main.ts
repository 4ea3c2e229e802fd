// Entry of `npm run bench` (deploy/bootstrap.mjs starts it after install and build): benchmarks
// on servers with their normal durability settings (fsync on), started empty under .data/bench on
// ports of their own (deploy/local-servers.ts `useDefaults`), then bench/run.ts (bench/README.md).
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configOrExit } from '../lib/infra/config.js';
import { useDefaults, freshServers, stopServers } from '../deploy/local-servers.js';
import { runBench, needsServers } from './run.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const log = (msg: string) => process.stderr.write(`[stack] ${msg}\n`);
const args = process.argv.slice(2);

useDefaults('bench');
// `--only whitelist` measures code in this process: no servers.
const { cfg, servers } = needsServers(args) ? await freshServers(false, log) : { cfg: configOrExit('stack'), servers: [] };
let code = 0;
try {
  await runBench(cfg, root, args);
} catch (e) {
  log(`bench failed: ${(e as Error).stack ?? e}`);
  code = 1;
} finally {
  await stopServers(servers, log);
}
process.exit(code);
