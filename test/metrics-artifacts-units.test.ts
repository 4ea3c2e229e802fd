// Pure pieces of issue 6: Range parsing, Content-Disposition, the chunk bitmap and sizes, the
// gateway's byte budget, metric steps and rows, the OpenAPI-facing route table.
import t from 'tap';
import { parseRange, contentDisposition, bitmapNew, bitmapSet, bitmapHas, bitmapList, chunkCount, chunkLength, mapLimit } from '../lib/artifacts.js';
import { ByteBudget, artifactIdOf } from '../gateway/artifacts.js';
import { parseStep, autoStep } from '../api/handlers/metrics.js';
import { metricRows, VER_BASE } from '../workers/metrics.js';
import { metricKey } from '../gateway/metrics.js';
import { routes, pathRegex } from '../lib/routes.js';
import type { Report } from '../lib/messages.js';

t.test('Range: one range served, several or garbage ignored, past the end unsatisfiable', async (t) => {
  t.same(parseRange('bytes=0-99', 1000), { start: 0, end: 99 });
  t.same(parseRange('bytes=990-2000', 1000), { start: 990, end: 999 }, 'end clamped');
  t.same(parseRange('bytes=990-', 1000), { start: 990, end: 999 });
  t.same(parseRange('bytes=-10', 1000), { start: 990, end: 999 });
  t.same(parseRange('bytes=-5000', 1000), { start: 0, end: 999 });
  t.same(parseRange('Bytes=5-6', 1000), { start: 5, end: 6 }, 'unit case-insensitive');
  t.equal(parseRange('bytes=1000-', 1000), 'unsatisfiable');
  t.equal(parseRange('bytes=-0', 1000), 'unsatisfiable');
  t.equal(parseRange('bytes=0-', 0), 'unsatisfiable');
  t.equal(parseRange(undefined, 1000), null);
  t.equal(parseRange('bytes=0-1,5-6', 1000), null, 'several ranges: the whole file');
  t.equal(parseRange('bytes=9-1', 1000), null, 'invalid: ignored');
  t.equal(parseRange('items=0-1', 1000), null);
  t.equal(parseRange('bytes=-', 1000), null);
});

t.test('Content-Disposition survives any file name', async (t) => {
  t.equal(contentDisposition('a.log'), `attachment; filename="a.log"; filename*=UTF-8''a.log`);
  t.equal(contentDisposition('../../etc/passwd'), `attachment; filename="passwd"; filename*=UTF-8''passwd`, 'no path');
  t.equal(contentDisposition('C:\\dumps\\x.dmp'), `attachment; filename="x.dmp"; filename*=UTF-8''x.dmp`);
  t.equal(contentDisposition('grüße "1".txt'), `attachment; filename="gr__e _1_.txt"; filename*=UTF-8''gr%C3%BC%C3%9Fe%20%221%22.txt`);
  t.notMatch(contentDisposition('a\r\nSet-Cookie: x=1'), /[\r\n]/, 'no header injection');
});

t.test('chunk bitmap and sizes', async (t) => {
  let b = bitmapNew(20);
  t.same(bitmapList(b, 20), []);
  t.equal(bitmapList(b, 20, false).length, 20);
  for (const n of [0, 7, 8, 19]) b = bitmapSet(b, n);
  t.same(bitmapList(b, 20), [0, 7, 8, 19]);
  t.ok(bitmapHas(b, 7));
  t.notOk(bitmapHas(b, 6));
  b = bitmapSet(b, 7, false);
  t.same(bitmapList(b, 20), [0, 8, 19]);
  t.equal(Buffer.from(bitmapNew(2048), 'base64').length, 256, '2 GiB in 1 MiB chunks: 256 bytes');
  t.equal(chunkCount(0, 10), 0);
  t.equal(chunkCount(10, 10), 1);
  t.equal(chunkCount(11, 10), 2);
  t.same([0, 1, 2].map((n) => chunkLength(25, 10, n)), [10, 10, 5]);
  t.same(await mapLimit([3, 1, 2], 2, async (x) => x * 2), [6, 2, 4]);
  t.equal(artifactIdOf('u'), artifactIdOf('u'), 'every replica names the artifact the same');
});

t.test('byte budget: bounded, but a lone request always passes', async (t) => {
  const b = new ByteBudget(100);
  t.ok(b.take(150), 'the first is admitted even over the limit');
  t.notOk(b.take(1));
  b.release(150);
  t.ok(b.take(60));
  t.ok(b.take(40));
  t.notOk(b.take(1));
  b.release(40);
  t.ok(b.take(40));
});

t.test('metric steps', async (t) => {
  t.equal(parseStep('60'), 60_000);
  t.equal(parseStep('60s'), 60_000);
  t.equal(parseStep('5m'), 300_000);
  t.equal(parseStep('2h'), 7_200_000);
  t.equal(parseStep('1d'), 86_400_000);
  t.equal(parseStep('250ms'), 250);
  t.equal(parseStep('0'), null);
  t.equal(parseStep('1w'), null);
  t.equal(autoStep(86_400_000), 300_000, '24 h: 5 minutes');
  t.equal(autoStep(3_600_000), 15_000, '1 h: 15 s');
  t.equal(autoStep(1000), 1000);
  t.equal(autoStep(365 * 86_400_000), 7 * 86_400_000);
});

t.test('metric rows: one per value, receive time when no ts, the first copy has the highest version', async (t) => {
  const r = (at: number, b: unknown): Report => ({ id: 'r', k: 'metrics', c: 'c', cs: 'cs', m: 'm', s: 'logcollector', t: 't', at, b });
  const rows = metricRows(
    [
      r(1000, { items: [{ client_metric_id: 'a', values: { y: 2, x: 1 }, labels: { z: '1', a: '2' } }] }),
      r(2000, { items: [{ client_metric_id: 'a', ts: '2026-01-01T00:00:00Z', values: { x: 1 } }] }),
      { ...r(3000, {}), k: 'heartbeat' },
    ],
    () => 'mid',
  ) as Record<string, unknown>[];
  t.equal(rows.length, 3);
  t.match(rows[0], { name: 'y', value: 2, ts_ms: 1000, machine_id: 'mid', label_keys: ['a', 'z'], label_values: ['2', '1'], ver: VER_BASE - 1000 });
  t.equal(rows[2]!.ts_ms, Date.parse('2026-01-01T00:00:00Z'));
  t.ok((rows[0]!.ver as number) > (rows[2]!.ver as number), 'earlier receive time wins');
  t.equal(metricRows([r(1, { items: [{ client_metric_id: 'a', values: { x: 1 } }] })], () => undefined).length, 0, 'no machine, no row');
  t.equal(metricKey('p:', 'c', 'm', 'id'), metricKey('p:', 'c', 'm', 'id'));
  t.not(metricKey('p:', 'c', 'm', 'id'), metricKey('p:', 'c', 'm2', 'id'), 'per machine');
  t.not(metricKey('p:', 'c', 'm', 'id'), metricKey('p:', 'c2', 'm', 'id'), 'per customer');
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
