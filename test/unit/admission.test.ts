// The gateway's ingest decisions without uWS (gateway/admission.ts): each kind's policy, and the
// refusal each step gives.
import t from 'tap';
import { KINDS, pathRefusal, parseBearer, authorise, machineRefusal, isJson, headRefusal, parseJsonObject, deepRefusal, batchHeadRefusal, entryHeadRefusal, entryBodyRefusal, sizeRefusal, entryJsonRefusal } from '../../gateway/admission.js';
import { reportChecker } from '../../lib/domain/report-check.js';
import { HttpError } from '../../lib/contract/errors.js';
import type { RequestHead } from '../../gateway/types.js';
import type { TokenInfo } from '../../gateway/token-cache.js';
import { compilePattern } from '../../lib/domain/whitelist.js';

const head = (h: Partial<RequestHead> = {}): RequestHead => ({ params: [], authorization: '', contentType: 'application/json', contentLength: '', idempotencyKey: '', framing: null, fault: '', ...h });
const checker = reportChecker(1000);

t.test('the policy of each kind', async (t) => {
  t.same(Object.keys(KINDS).sort(), ['artifact-init', 'command_ack', 'diagnostics', 'heartbeat', 'help', 'metrics', 'status']);
  t.ok(KINDS.heartbeat.offersCommands && KINDS.status.offersCommands && !KINDS.diagnostics.offersCommands, 'commands go out with heartbeats and status reports');
  t.notOk(KINDS.help.createsMachines || KINDS.command_ack.createsMachines, 'help texts and command acks make no machine (no device limit)');
  t.ok(KINDS.command_ack.namesCommand);
});

t.test('path slugs, bearer, token', async (t) => {
  t.equal(pathRefusal({ customer: 'c', machine: 'm-1', software: 'agent' }), null);
  t.match(pathRefusal({ customer: 'c', machine: 'Bad_Machine', software: 'agent' })?.detail, /invalid machine slug/);
  t.match(pathRefusal({ customer: 'c', machine: 'm', software: 'x'.repeat(65) })?.status, 400);
  t.equal(parseBearer('Bearer abc'), 'abc');
  t.equal(parseBearer('bearer  abc '), 'abc');
  t.equal(parseBearer('Basic abc'), null);
  t.equal(parseBearer(`Bearer ${'x'.repeat(513)}`), null);
  const tok: TokenInfo = { id: 't', customerId: 'cid', customer: 'c', scopes: ['ingest'], revoked: false } as TokenInfo;
  t.equal(authorise(tok, 'c'), null);
  t.match(authorise(tok, 'other')?.detail, /not authorised for customer other/);
  t.match(authorise({ ...tok, revoked: true }, 'c')?.detail, /revoked/);
  t.match(authorise({ ...tok, scopes: ['read'] }, 'c')?.detail, /ingest scope/);
});

t.test('token expiry and machine binding', async (t) => {
  const tok = { id: 't', customerId: 'cid', customer: 'c', scopes: ['ingest'], revoked: false, expiresMs: Infinity, machine: null, machineOk: null, usedAt: 0 } as TokenInfo;
  const at = Date.parse('2030-01-01T00:00:00Z');
  t.equal(authorise({ ...tok, expiresMs: at }, 'c', 'm', at - 1), null, 'valid until its expiry');
  const expired = authorise({ ...tok, expiresMs: at }, 'c', 'm', at);
  t.equal(expired?.status, 403);
  t.equal(expired?.detail, 'token expired at 2030-01-01T00:00:00.000Z');
  t.equal(authorise(tok, 'c', 'any-machine'), null, 'an unbound token posts as any machine');
  const one = { ...tok, machine: 'm1', machineOk: compilePattern('m1') };
  t.equal(authorise(one, 'c', 'm1'), null);
  t.equal(authorise(one, 'c'), null, 'a route without a machine (batch) checks each entry instead');
  t.equal(authorise(one, 'c', 'm10')?.detail, 'token bound to machine m1: it cannot post as m10');
  t.match(authorise(one, 'other', 'm1')?.detail, /not authorised for customer/, 'the customer is checked first');
  const rack = { ...tok, machine: 'rack?-*', machineOk: compilePattern('rack?-*') };
  t.equal(machineRefusal(rack, 'rack1-a'), null);
  t.equal(machineRefusal(rack, 'rack12-a')?.detail, 'token bound to machines rack?-*: it cannot post as rack12-a');
  t.equal(machineRefusal(tok, 'whatever'), null);
});

t.test('before the body: command id, Content-Type, Idempotency-Key, announced size', async (t) => {
  t.ok(isJson('application/json; charset=utf-8'));
  t.notOk(isJson('text/plain'));
  t.equal(headRefusal('heartbeat', head(), '', 1024), null);
  t.equal(headRefusal('command_ack', head(), 'not-a-uuid', 1024)?.status, 400);
  t.equal(headRefusal('heartbeat', head({ contentType: 'text/plain' }), '', 1024)?.status, 415);
  t.equal(headRefusal('heartbeat', head({ idempotencyKey: 'k'.repeat(257) }), '', 1024)?.status, 400);
  t.equal(headRefusal('heartbeat', head({ contentLength: '1025' }), '', 1024)?.status, 413);
});

t.test('the body: UTF-8, JSON, an object; beyond the schema', async (t) => {
  const L = { maxDepth: 64, maxNodes: 100_000 };
  const data = (r: ReturnType<typeof parseJsonObject>) => (r instanceof HttpError ? r : r.data);
  t.same(data(parseJsonObject(Buffer.alloc(0), L)), {}, 'an empty body is {}');
  t.same(data(parseJsonObject(Buffer.from('{"a":1}'), L)), { a: 1 });
  const bad = parseJsonObject(Buffer.from([0x7b, 0xff, 0x7d]), L);
  t.ok(bad instanceof HttpError && bad.status === 400 && /UTF-8/.test(bad.detail));
  t.equal((parseJsonObject(Buffer.from('{'), L) as HttpError).status, 400);
  t.equal((parseJsonObject(Buffer.from('[1]'), L) as HttpError).status, 422);
  // 40 KB that once ended a gateway: refused before anything walks it, with where.
  const deep = parseJsonObject(Buffer.from(`{"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}`), L);
  t.ok(deep instanceof HttpError && deep.status === 422 && deep.errors?.[0]?.path.startsWith('/x/0/0') && /deeper than 64/.test(deep.detail), 'too deep: 422 with the path');
  const wide = parseJsonObject(Buffer.from(`{"a":[${'0,'.repeat(100_000)}0]}`), L);
  t.ok(wide instanceof HttpError && wide.status === 422 && wide.errors?.[0]?.path === '/a/99998', 'too many values: 422 at the value over the limit');
  t.equal((parseJsonObject(Buffer.from(`{"a":[${'0,'.repeat(99_997)}0]}`), L) as { data: unknown }).data !== undefined, true, 'exactly at the limit passes');
  const spans = parseJsonObject(Buffer.from('{"items":[{"v":9e20} , {"v":1}]}'), L, ['items', '*']);
  t.same(spans instanceof HttpError ? null : [...spans.spans.values()], [[10, 20], [23, 30]], 'spans of the values at the path');
  // A batch's entries held to a single body's limits from the shapes of the one scan: the entry at
  // a limit passes, the one over it is refused with the path its single request would get.
  const E = { maxDepth: 3, maxNodes: 6 };
  const batch = Buffer.from('{"entries":[{"body":{"a":[[1]]}},{"body":{"a":[[[1]]]}},{"body":[1,2,3,4,5]},{"body":[1,2,3,4,5,6]},{"body":7}]}');
  const pb = parseJsonObject(batch, { maxDepth: 20, maxNodes: 1000 }, ['entries', '*', 'body']);
  t.ok(!(pb instanceof HttpError));
  if (!(pb instanceof HttpError)) {
    const verdicts = [0, 1, 2, 3, 4].map((i) => {
      const [a, b] = pb.spans.get(i)!;
      const r = entryJsonRefusal(batch.subarray(a, b), E, pb.shapes.get(i));
      return r === null ? 'ok' : `${r.status} ${r.errors?.[0]?.path}`;
    });
    t.same(verdicts, ['ok', '422 /a/0/0', 'ok', '422 /5', 'ok'], 'depth 3 and 6 values pass; depth 4 and 7 values refused where they go over');
    t.same([...pb.shapes.values()], [[4, 3], [5, 4], [6, 1], [7, 1], [1, 0]], 'the shapes');
  }
  t.equal(deepRefusal('status', { status: 'running', snapshot: { a: 'x\u0000' } }, 20, checker)?.status, 422);
  t.equal(deepRefusal('status', { status: 'running', snapshot: { big: 'x'.repeat(300_000) } }, 300_100, checker)?.status, 413);
  t.equal(deepRefusal('heartbeat', { version: '1' }, 20, checker), null);
  t.equal(deepRefusal('command_ack', { result: 'success', output: { 'k\u0000': 1 } }, 30, checker)?.status, 422);
});

t.test('batch: the request before its body, each entry before and after the rate', async (t) => {
  t.equal(batchHeadRefusal(head({ contentLength: '4096' }), 4096), null, 'at the batch limit');
  t.equal(batchHeadRefusal(head({ contentLength: '4097' }), 4096)?.status, 413, 'one byte over');
  t.equal(batchHeadRefusal(head({ contentType: 'text/plain' }), 4096)?.status, 415);
  t.match(batchHeadRefusal(head({ idempotencyKey: 'k' }), 4096)?.detail, /each entry its own idempotency_key/);
  t.equal(sizeRefusal(1024, 1024), null);
  t.equal(sizeRefusal(1025, 1024)?.status, 413);
  t.equal(sizeRefusal('', 1024), null, 'no Content-Length: counted while it arrives');

  t.same(entryHeadRefusal({ machine: 'm', software: 's', kind: 'status' }, 'c'), { kind: 'status', path: { customer: 'c', machine: 'm', software: 's' } });
  t.same(entryHeadRefusal({ machine: 'm', software: 's', kind: 'heartbeat', customer: 'c' }, 'c'), { kind: 'heartbeat', path: { customer: 'c', machine: 'm', software: 's' } }, "naming the path's customer");
  const status = (x: unknown) => (x instanceof HttpError ? x.status : 0);
  t.equal(status(entryHeadRefusal('x', 'c')), 422, 'not an object');
  t.equal(status(entryHeadRefusal([], 'c')), 422);
  t.equal(status(entryHeadRefusal(null, 'c')), 422);
  for (const kind of ['metrics', 'artifact-init', 'command_ack', 'HEARTBEAT', undefined]) {
    t.equal(status(entryHeadRefusal({ machine: 'm', software: 's', kind }, 'c')), 422, `kind ${kind}: not a batch kind`);
  }
  t.equal(status(entryHeadRefusal({ machine: 'm', software: 's', kind: 'heartbeat', customer: 'other' }, 'c')), 403, 'another customer');
  t.notMatch((entryHeadRefusal({ machine: 'm', software: 's', kind: 'heartbeat', customer: 'zzz' }, 'c') as HttpError).detail, /zzz/, 'without echoing it');
  t.equal(status(entryHeadRefusal({ machine: 'Bad', software: 's', kind: 'heartbeat' }, 'c')), 400);
  t.equal(status(entryHeadRefusal({ machine: 'm', kind: 'heartbeat' }, 'c')), 400, 'no software');
  t.equal((entryHeadRefusal({ machine: 'M', software: 's', kind: 'heartbeat' }, 'c') as HttpError).detail, pathRefusal({ customer: 'c', machine: 'M', software: 's' })!.detail, "the single route's detail");

  t.same(entryBodyRefusal({}), { idemKey: '', body: {} }, 'no body: {} as an empty body');
  t.same(entryBodyRefusal({ body: { a: 1 }, idempotency_key: 'k'.repeat(256) }), { idemKey: 'k'.repeat(256), body: { a: 1 } });
  t.equal(status(entryBodyRefusal({ idempotency_key: 'k'.repeat(257) })), 400);
  t.equal(status(entryBodyRefusal({ idempotency_key: 7 })), 422);
  for (const body of [null, [], 'x', 1]) t.equal(status(entryBodyRefusal({ body })), 422, `body ${JSON.stringify(body)}`);
});
