// Agent commands, the pure pieces (lib/store/commands.ts): what a snapshot advertises, argument checks, the hint format.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { advertisedCommands, checkArgs, decodeHint, encodeHint } from '../../lib/store/commands.js';

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

t.test('hints round-trip; anything unreadable is no hint', async (t) => {
  const refs = [{ customerId: randomUUID(), machine: 'm1', software: 'agent' }];
  t.same(decodeHint(encodeHint(refs)), refs);
  t.same(decodeHint(Buffer.from('nope')), []);
  t.same(decodeHint(Buffer.from('{"i":[["a","b"],[1,2,3],["a","b","c"]]}')), [{ customerId: 'a', machine: 'b', software: 'c' }]);
});
