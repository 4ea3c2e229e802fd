// The api in-process for tests of test/servers/: buildApi() over the test stack's own Postgres,
// ClickHouse and Redis, asked through Fastify's inject (no port, no process), closed at teardown.
import type { Test } from 'tap';
import { pino } from 'pino';
import { buildApi } from '../../api/server.js';
import { Sessions } from '../../api/session.js';
import { LightHub } from '../../api/light-stream.js';
import { WhitelistChecks } from '../../api/whitelist-check.js';
import { CommandHints } from '../../lib/store/commands.js';
import { createMetrics } from '../../lib/infra/metrics.js';
import { loadConfig } from '../../lib/infra/config.js';
import type { TestStack } from './stack.js';

/** The api over `s`, with `env` over the stack's environment (API_COUNT_CACHE_MS, …). */
export async function injectApi(t: Test, s: TestStack, env: Record<string, string> = {}) {
  const cfg = loadConfig({ ...process.env, ...s.env, ...env });
  const log = pino({ level: 'silent' });
  const app = await buildApi({
    cfg,
    log,
    metrics: createMetrics('api'),
    pool: s.pool,
    ch: s.ch,
    redis: s.redis,
    sessions: new Sessions(s.env.JWT_SECRET!, 3600),
    artifacts: () => null,
    lights: new LightHub(log, 15, 100),
    hints: new CommandHints('t.hints'),
    deadLetters: () => null,
    whitelistChecks: new WhitelistChecks(),
  });
  t.teardown(() => app.close());
  return app;
}
