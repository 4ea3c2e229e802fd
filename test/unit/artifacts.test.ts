// Artifact uploads, the pure pieces (lib/store/artifacts.ts, gateway/artifacts.ts, gateway/http/artifact-routes.ts): Range, Content-Disposition, the chunk bitmap and sizes, the byte budget.
import t from 'tap';
import { parseRange, contentDisposition, bitmapNew, bitmapSet, bitmapHas, bitmapList, chunkCount, chunkLength, mapLimit } from '../../lib/store/artifacts.js';
import { artifactIdOf } from '../../gateway/artifacts.js';
import { ByteBudget } from '../../gateway/http/artifact-routes.js';

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
