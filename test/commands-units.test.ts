// Agent commands, the pure pieces: what a snapshot advertises, argument checks against params, the
// delivered/ack fields of a queued report, and the NATS hint format.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { advertisedCommands, checkArgs, decodeHint, encodeHint } from '../lib/commands.js';
import { pgJson } from '../lib/db/postgres.js';
import { decodeBatch, encodeBatch, encodeReport } from '../lib/messages.js';

t.test('advertised commands: modules.<module>.commands, malformed entries skipped', async (t) => {
  t.same(advertisedCommands(null), []);
  t.same(advertisedCommands({ modules: 'x' }), []);
  t.same(advertisedCommands({ modules: { a: { commands: 'nope' }, b: null } }), []);
  t.same(
    advertisedCommands({
      modules: {
        zeta: { commands: [{ name: 'z1', label: 7, params: null }] },
        alpha: { commands: [{ name: 'a2' }, { name: '' }, { label: 'no name' }, 42, { name: 'a1', label: 'A one', params: [{ name: 'p' }] }] },
      },
    }),
    [
      { module: 'alpha', name: 'a2', label: null, params: null },
      { module: 'alpha', name: 'a1', label: 'A one', params: [{ name: 'p' }] },
      { module: 'zeta', name: 'z1', label: null, params: null },
    ],
  );
});

t.test('args against params: checked only when params is a list of {name, required?}', async (t) => {
  const params = [{ name: 'version', required: true }, { name: 'channel' }];
  t.equal(checkArgs(params, { version: '2' }), null);
  t.equal(checkArgs(params, { version: '2', channel: 'beta' }), null);
  t.match(checkArgs(params, {}), /missing required argument\(s\) version/);
  t.match(checkArgs(params, { version: '2', force: true }), /unknown argument\(s\) "force"/);
  t.match(checkArgs([], { x: 1 }), /unknown argument/, 'an empty list means: no arguments');
  t.equal(checkArgs({ type: 'object' }, { anything: 1 }), null, 'another shape: not checked');
  t.equal(checkArgs(['version'], { anything: 1 }), null, 'a list of strings: not checked');
  t.equal(checkArgs(null, { anything: 1 }), null);
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

t.test('hints round-trip; anything unreadable is no hint', async (t) => {
  const refs = [{ customerId: randomUUID(), machine: 'm1', software: 'agent' }];
  t.same(decodeHint(encodeHint(refs)), refs);
  t.same(decodeHint(Buffer.from('nope')), []);
  t.same(decodeHint(Buffer.from('{"i":[["a","b"],[1,2,3],["a","b","c"]]}')), [{ customerId: 'a', machine: 'b', software: 'c' }]);
});

t.test('JSON for jsonb: NULs and lone surrogates cannot reach Postgres, in values or keys (one sanitiser, lib/db/postgres.ts)', async (t) => {
  t.equal(pgJson({ a: 'x' }), '{"a":"x"}');
  t.equal(pgJson({ a: 'x\u0000y', b: '\ud800' }), '{"a":"xy","b":"\ufffd"}');
  t.equal(pgJson({ 'k\u0000': { 'n\ud800': 1 } }), '{"k":{"n\ufffd":1}}');
});
