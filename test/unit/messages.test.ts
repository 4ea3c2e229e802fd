// The queue's message format (lib/messages.ts): reports and batches round-trip, the raw body untouched; delivered and acked command ids.
import t from 'tap';
import { encodeReport, encodeBatch, decodeBatch, DecodeError } from '../../lib/messages.js';
import { randomUUID } from 'node:crypto';

t.test('a batch round-trips, the raw body untouched', async (t) => {
  const raw = Buffer.from('{"items":[{"code":1,"severity":0,"message":"é \\" \\n"}]}');
  const r = encodeReport({ id: 'a', k: 'diagnostics', c: 'c', cs: 'cs', m: 'm', s: 's', t: 't', at: 5, ik: 'key "x"' }, raw);
  const b = decodeBatch(encodeBatch([r, encodeReport({ id: 'b', k: 'heartbeat', c: 'c', cs: 'cs', m: 'm', s: 's', t: 't', at: 6 }, null)]));
  t.equal(b.r.length, 2);
  t.same(b.r[0]!.b, JSON.parse(raw.toString()));
  t.equal(b.r[0]!.ik, 'key "x"');
  t.same(b.r[1]!.b, {});
  t.throws(() => decodeBatch(Buffer.from('nope')), DecodeError);
  t.throws(() => decodeBatch(Buffer.from('{"v":2,"r":[]}')), DecodeError);
});

t.test('a report carries the delivered command ids and the acked command id', async (t) => {
  const ids = [randomUUID(), randomUUID()];
  const base = { id: 'r', c: 'c', cs: 'cs', m: 'm', s: 's', t: 't', at: 1 } as const;
  const hb = encodeReport({ ...base, k: 'heartbeat', dc: ids }, Buffer.from('{}'));
  const plain = encodeReport({ ...base, k: 'heartbeat', dc: [] }, null);
  const ack = encodeReport({ ...base, k: 'command_ack', ci: ids[0] }, Buffer.from('{"result":"success"}'));
  const b = decodeBatch(encodeBatch([hb, plain, ack]));
  t.same(b.r[0]!.dc, ids);
  t.equal(b.r[1]!.dc, undefined, 'no ids, no field');
  t.equal(b.r[2]!.k, 'command_ack');
  t.equal(b.r[2]!.ci, ids[0]);
  t.same(b.r[2]!.b, { result: 'success' });
});
