// The route table (lib/contract/routes.ts): paths match, handlers must match it, metrics and artifact paths distinct.
import t from 'tap';
import { pathRegex, routes, checkHandlers } from '../../lib/contract/routes.js';

t.test('route table: paths match, handlers must match the table', async (t) => {
  const re = pathRegex('/api/ingest/{customer}/{machine}/{software}/heartbeat');
  t.ok(re.test('/api/ingest/a/b/c/heartbeat'));
  t.notOk(re.test('/api/ingest/a/b/heartbeat'));
  t.notOk(re.test('/api/ingest/a/b/c/heartbeatx'));
  const ids = new Set(routes.map((r) => `${r.service} ${r.method} ${r.path}`));
  t.equal(ids.size, routes.length, 'no route twice');
  t.throws(() => checkHandlers('gateway', {}), /missing/);
});

t.test('route table: metrics only under the literal logcollector; artifact paths distinct', async (t) => {
  const metrics = routes.find((r) => r.operationId === 'ingest_metrics')!;
  t.ok(pathRegex(metrics.path).test('/api/ingest/c/m/logcollector/metrics'));
  t.notOk(pathRegex(metrics.path).test('/api/ingest/c/m/agent/metrics'));
  const ids = routes.map((r) => r.operationId);
  t.equal(new Set(ids).size, ids.length, 'operation ids unique');
  for (const id of ['ingest_artifact_init', 'ingest_artifact_chunk', 'ingest_artifact_status', 'ingest_artifact_complete', 'get_machine_metrics', 'list_machine_artifacts', 'download_artifact']) {
    t.ok(ids.includes(id), id);
  }
});
