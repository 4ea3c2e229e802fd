// The queue's message format (lib/contract/messages.ts): reports and batches round-trip, the raw body untouched; delivered and acked command ids; the codec between the wire's short keys and the readable Report.
import t from 'tap';
import { encodeReport, encodeBatch, decodeBatch, reportSlices, shareRepeated, toReport, toWire, DecodeError, type Report, type WireReport } from '../../lib/contract/messages.js';
import { envelopeRefusal, reportChecker } from '../../lib/domain/report-check.js';
import { treeErrors, TREE_MAX_DEPTH } from '../../lib/domain/storable.js';
import { randomUUID } from 'node:crypto';

t.test('a batch round-trips, the raw body untouched', async (t) => {
  const raw = Buffer.from('{"items":[{"code":1,"severity":0,"message":"é \\" \\n"}]}');
  const r = encodeReport({ id: 'a', kind: 'diagnostics', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 5, idempotencyKey: 'key "x"' }, raw);
  const b = decodeBatch(encodeBatch([r, encodeReport({ id: 'b', kind: 'heartbeat', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 6 }, null)]));
  t.equal(b.r.length, 2);
  t.same(b.r[0]!.b, JSON.parse(raw.toString()));
  t.equal(b.r[0]!.ik, 'key "x"');
  t.same(b.r[1]!.b, {});
  t.throws(() => decodeBatch(Buffer.from('nope')), DecodeError);
  t.throws(() => decodeBatch(Buffer.from('{"v":2,"r":[]}')), DecodeError);
});

t.test('a report carries the delivered command ids and the acked command id', async (t) => {
  const ids = [randomUUID(), randomUUID()];
  const base = { id: 'r', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 1 } as const;
  const hb = encodeReport({ ...base, kind: 'heartbeat', deliveredCommands: ids }, Buffer.from('{}'));
  const plain = encodeReport({ ...base, kind: 'heartbeat', deliveredCommands: [] }, null);
  const ack = encodeReport({ ...base, kind: 'command_ack', commandId: ids[0] }, Buffer.from('{"result":"success"}'));
  const b = decodeBatch(encodeBatch([hb, plain, ack]));
  t.same(b.r[0]!.dc, ids);
  t.equal(b.r[1]!.dc, undefined, 'no ids, no field');
  t.equal(b.r[2]!.k, 'command_ack');
  t.equal(b.r[2]!.ci, ids[0]);
  t.same(b.r[2]!.b, { result: 'success' });
});

t.test('the codec: encodeReport -> decodeBatch -> toReport gives the readable report back, the bytes as ever', async (t) => {
  const full: Report = {
    id: '0b9b3c1e-5f0a-4c4e-9a51-2d7e1c3f8a10',
    kind: 'command_ack',
    customerId: '7d1f2a9e-3b4c-4d5e-8f60-718293a4b5c6',
    customer: 'acme',
    machine: 'm-1',
    software: 'agent',
    tokenId: 'c3a1b2d4-e5f6-4789-a0b1-c2d3e4f5a6b7',
    receivedAt: 1763625600000,
    idempotencyKey: 'key "x"',
    deliveredCommands: ['11111111-2222-4333-8444-555555555555', '66666666-7777-4888-9999-aaaaaaaaaaaa'],
    commandId: 'bbbbbbbb-cccc-4ddd-8eee-ffffffffffff',
    body: { result: 'success' },
  };
  const { body: _body, ...head } = full;
  const bytes = encodeReport(head, Buffer.from('{"result":"success"}'));
  // What a gateway queued before the codec, byte for byte (short keys, this order, the body spliced in last).
  t.equal(
    bytes.toString(),
    '{"id":"0b9b3c1e-5f0a-4c4e-9a51-2d7e1c3f8a10","k":"command_ack","c":"7d1f2a9e-3b4c-4d5e-8f60-718293a4b5c6","cs":"acme","m":"m-1","s":"agent",' +
      '"t":"c3a1b2d4-e5f6-4789-a0b1-c2d3e4f5a6b7","at":1763625600000,"ik":"key \\"x\\"","dc":["11111111-2222-4333-8444-555555555555","66666666-7777-4888-9999-aaaaaaaaaaaa"],' +
      '"ci":"bbbbbbbb-cccc-4ddd-8eee-ffffffffffff","b":{"result":"success"}}',
  );
  const plain: Report = { id: 'a', kind: 'heartbeat', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 5, body: {} };
  const { body: _plainBody, ...plainHead } = plain;
  const plainBytes = encodeReport(plainHead, null);
  t.equal(plainBytes.toString(), '{"id":"a","k":"heartbeat","c":"c","cs":"cs","m":"m","s":"s","t":"t","at":5,"b":{}}', 'no optional keys, an empty body');
  // The head is written into the report's buffer in place: its length in bytes, not characters.
  const wide = encodeReport({ ...plainHead, idempotencyKey: 'ключ-𝄞-é' }, Buffer.from('{"m":"ü𝄞"}'));
  t.equal(wide.toString(), '{"id":"a","k":"heartbeat","c":"c","cs":"cs","m":"m","s":"s","t":"t","at":5,"ik":"ключ-𝄞-é","b":{"m":"ü𝄞"}}', 'a key and a body of several bytes per character');
  t.equal(wide.length, Buffer.byteLength(wide.toString()), 'no byte left over');
  const wire = decodeBatch(encodeBatch([bytes, plainBytes])).r;
  t.strictSame(wire.map(toReport), [full, plain], 'the readable reports back, no optional field made up');
  t.strictSame(wire.map((w) => toWire(toReport(w))), wire, 'toWire undoes toReport');
});

const text = (b: Uint8Array) => Buffer.from(b).toString('utf8');

t.test("reportSlices: each report's bytes as queued, whatever they hold, without a stack", async (t) => {
  const a = encodeReport({ id: 'a', kind: 'status', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 5 }, Buffer.from('{"status":"running","message":"] , } [ { \\" ,"}'));
  const deep = encodeReport({ id: 'b', kind: 'command_ack', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 6 }, Buffer.from(`{"result":"success","output":${'['.repeat(20_000)}${']'.repeat(20_000)}}`));
  const c = encodeReport({ id: 'c', kind: 'heartbeat', customerId: 'c', customer: 'cs', machine: 'm', software: 's', tokenId: 't', receivedAt: 7, idempotencyKey: 'x"]}' }, null);
  const batch = encodeBatch([a, deep, c]);
  const slices = reportSlices(batch)!;
  t.equal(slices.length, 3);
  t.same(slices.map(text), [a, deep, c].map(String), 'byte for byte');
  t.throws(() => JSON.stringify(decodeBatch(batch)), RangeError, 'what re-serialising it would do');
  // Another writer's layout: whitespace, other keys around, `r` not first, values that look like keys.
  const odd = Buffer.from(' { "x" : {"r":[1]} ,\n "v" : 1 , "r" : [ {"id":"p"} ,\t{"id":"q","r":[2]} ] , "y":"r" } ');
  t.same(reportSlices(odd)!.map(text), ['{"id":"p"}', '{"id":"q","r":[2]}']);
  t.same(reportSlices(Buffer.from('{"v":1,"r":[]}')), []);
  // The last `r` wins, as in JSON.parse.
  t.same(reportSlices(Buffer.from('{"r":[{"a":1}],"v":1,"r":[{"b":2},{"c":3}]}'))!.map(text), ['{"b":2}', '{"c":3}']);
  t.equal(reportSlices(Buffer.from('{"v":1}')), null, 'no r');
  t.equal(reportSlices(Buffer.from('[{"r":[1]}]')), null, 'not an object');
  t.equal(reportSlices(Buffer.from('{"\\u0072":[{"a":1}]}')), null, 'an escaped key: the caller keeps the whole message');
});

t.test('envelopeRefusal: what a gateway writes passes, what a bypassing publisher may write is named', async (t) => {
  const ok = { id: randomUUID(), k: 'heartbeat', c: randomUUID(), cs: 'acme', m: 'm-1', s: 'agent', t: randomUUID(), at: Date.now(), dc: [randomUUID()], ci: randomUUID(), ik: 'k' };
  t.equal(envelopeRefusal(ok), null);
  t.match(envelopeRefusal({ ...ok, id: 'x' }), /id must be a UUID/);
  t.match(envelopeRefusal({ ...ok, c: 'ghost' }), /c must be a UUID/);
  t.match(envelopeRefusal({ ...ok, m: 'Not A Slug' }), /slugs/);
  t.match(envelopeRefusal({ ...ok, at: 'yesterday' }), /at must be a time/);
  t.match(envelopeRefusal({ ...ok, at: 1e20 }), /at must be a time/);
  t.match(envelopeRefusal({ ...ok, at: 1.5 }), /at must be a time/);
  t.match(envelopeRefusal({ ...ok, dc: ['x'] }), /dc must be/);
  t.match(envelopeRefusal({ ...ok, ik: 5 }), /ik must be/);
});

t.test('free trees: deeper than TREE_MAX_DEPTH is not storable, found without recursion', async (t) => {
  const nest = (n: number): unknown => JSON.parse('['.repeat(n) + ']'.repeat(n));
  t.same(treeErrors(nest(TREE_MAX_DEPTH), '/output'), []);
  const deeper = treeErrors(nest(TREE_MAX_DEPTH + 1), '/output');
  t.equal(deeper.length, 1);
  t.match(deeper[0]!.message, `nested deeper than ${TREE_MAX_DEPTH} levels`);
  t.equal(treeErrors(nest(50_000), '/output').length, 1, '50,000 levels: one error, no stack overflow');
  // The check the gateway answers 422 with, and the worker proves a queued report at fault with.
  const check = reportChecker(100);
  t.equal(check.check('command_ack', { result: 'success', output: nest(TREE_MAX_DEPTH) }), null);
  t.match(check.check('command_ack', { result: 'success', output: nest(20_000) })?.detail, /^output cannot be stored: \/output\/0\/0.* nested deeper than 1000 levels$/);
});

// The worker replaces the strings its reports repeat with one copy each (workers/ingest-consumer.ts
// decode): the values must not change, whatever a bypassing publisher put there, and the copies
// kept are bounded.
t.test('shareRepeated: repeated strings become one copy, every value as it was, non-strings untouched, the copies bounded', async (t) => {
  const reports = Array.from({ length: 50 }, (_, i) =>
    encodeReport({ id: randomUUID(), kind: i % 2 ? 'heartbeat' : 'status', customerId: 'cust-1', customer: 'acme', machine: `m-${i}`, software: 'agent', tokenId: 'tok-1', receivedAt: i }, Buffer.from('{"a":1}')),
  );
  const wires = decodeBatch(encodeBatch(reports)).r;
  const before = JSON.stringify(wires);
  const seen = new Map<string, string>();
  for (const w of wires) shareRepeated(w, seen);
  t.equal(JSON.stringify(wires), before, 'every value as it was');
  t.same([...seen.keys()].sort(), ['acme', 'agent', 'cust-1', 'heartbeat', 'status', 'tok-1'], 'one copy of each repeated value; ids, machines and bodies not kept');
  t.same(wires.map(toReport).map((r) => r.customerId), Array(50).fill('cust-1'));
  // What the envelope check must still see: values that are not strings, and absent keys.
  const odd = { id: 'x', k: 7, c: null, cs: ['a'], t: { x: 1 }, m: 'm', at: 1, b: {} } as unknown as WireReport;
  const copy = { ...odd };
  shareRepeated(odd, seen);
  t.same(odd, copy, 'non-strings untouched');
  t.notOk('s' in odd, 'an absent key stays absent');
  const many = new Map<string, string>();
  for (let i = 0; i < 10_000; i++) shareRepeated({ id: 'x', k: 'heartbeat', c: `c-${i}`, cs: 'a', t: 't', m: 'm', s: 's', at: 1, b: {} }, many);
  t.ok(many.size <= 4096, `at most 4096 copies kept (${many.size})`);
});
