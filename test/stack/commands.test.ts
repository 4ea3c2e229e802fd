// Agent commands end to end: advertised in a status snapshot, queued through the read API (admin),
// handed out by the gateway in the answer to the instance's next heartbeat or status report (never
// another instance's), recorded as delivered by the worker, acknowledged through the gateway and
// JetStream. The gateways here re-read Postgres only every 10 minutes, so everything they learn in
// time comes from the NATS hints.
import t from 'tap';
import { testStack, post, get, eventually, drained, afterMarker } from '../helpers/stack.js';

const s = await testStack(t, 'commands', { env: { COMMAND_RESYNC_MS: '600000', COMMAND_MAX_OPEN: '3' } });
const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');
const ingest = (m: string, kind: string, sw = 'agent') => s.ingestUrl(m, kind, { software: sw });
const ackUrl = (m: string, id: string, sw = 'agent', base = s.gatewayUrl) => `${base}/api/ingest/${s.customer.slug}/${m}/${sw}/commands/${id}/ack`;

const snapshot = {
  cpu: { load: 0.1 },
  modules: {
    updater: {
      version: '1.2',
      commands: [
        { name: 'update', label: 'Update now', params: [{ name: 'version', required: true }, { name: 'channel' }] },
        { name: 'check' },
      ],
    },
    av: { commands: [{ name: 'scan', label: 'Full scan', params: { type: 'object' } }, { label: 'no name: skipped' }, 'junk'] },
    logs: { level: 'info' },
  },
};

/** An instance whose latest status snapshot advertises `snap`; returns its id. */
async function instance(m: string, snap: unknown = snapshot, sw = 'agent'): Promise<string> {
  const r = await post(ingest(m, 'status', sw), s.token, { status: 'running', snapshot: snap });
  if (r.status !== 200) throw new Error(`status report refused: ${r.status}`);
  return eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances?machine=${m}&software=${sw}`, s.token);
    const i = l.body.items?.[0];
    if (!i) return null;
    const a = await get(`${s.apiUrl}/api/instances/${i.id}/commands/available`, admin.jwt);
    return a.body.items?.length ? (i.id as string) : null;
  }, 10_000, `instance ${m} with its snapshot`);
}

async function queue(id: string, body: unknown, jwt = admin.jwt) {
  return post(`${s.apiUrl}/api/instances/${id}/commands`, jwt, body);
}

async function commandsOf(instanceId: string) {
  const r = await get(`${s.apiUrl}/api/instances/${instanceId}/commands`, viewer.jwt);
  if (r.status !== 200) throw new Error(`list refused: ${r.status}`);
  return r.body.items as any[];
}

async function commandState(instanceId: string, id: string, state: string) {
  return eventually(async () => {
    const c = (await commandsOf(instanceId)).find((x) => x.id === id);
    return c?.state === state ? c : null;
  }, 10_000, `command ${id} ${state}`);
}

/** Heartbeats until the answer carries commands (the gateway learnt about them from a hint). */
async function heartbeatUntilOffered(m: string, url = ingest(m, 'heartbeat'), body: unknown = {}) {
  return eventually(async () => {
    const r = await post(url, s.token, body);
    return r.status === 200 && r.body.commands?.length ? r.body.commands : null;
  }, 5000, `commands offered to ${m}`);
}

t.test('advertised commands come from the latest status snapshot', async (t) => {
  const id = await instance('adv');
  const a = await get(`${s.apiUrl}/api/instances/${id}/commands/available`, viewer.jwt);
  t.equal(a.status, 200);
  t.same(a.body.items, [
    { module: 'av', name: 'scan', label: 'Full scan', params: { type: 'object' } },
    { module: 'updater', name: 'update', label: 'Update now', params: [{ name: 'version', required: true }, { name: 'channel' }] },
    { module: 'updater', name: 'check', label: null, params: null },
  ], 'by module name, then in the order advertised');
  // A newer snapshot replaces what is advertised.
  t.equal((await post(ingest('adv', 'status'), s.token, { status: 'running', snapshot: { modules: { av: { commands: [{ name: 'scan' }] } } } })).status, 200);
  const b = await eventually(async () => {
    const r = await get(`${s.apiUrl}/api/instances/${id}/commands/available`, viewer.jwt);
    return r.body.items?.length === 1 ? r.body.items : null;
  });
  t.same(b, [{ module: 'av', name: 'scan', label: null, params: null }]);
  const other = await s.newCustomer('adv-other');
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/commands/available`, other.token)).status, 404, "another customer's instance: 404");
  t.equal((await get(`${s.apiUrl}/api/instances/not-a-uuid/commands/available`, viewer.jwt)).status, 400);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/commands/available`, null)).status, 401);
});

t.test('only an advertised command can be queued, and only by an admin', async (t) => {
  const id = await instance('only');
  const notAdvertised = await queue(id, { module: 'updater', command: 'format-disk' });
  t.equal(notAdvertised.status, 422);
  t.match(notAdvertised.body.detail, /not advertised.*updater\/update/);
  t.equal((await queue(id, { module: 'nomodule', command: 'update', args: { version: '2' } })).status, 422, 'unknown module');
  t.equal((await queue(id, { module: 'logs', command: 'level' })).status, 422, 'module without commands');
  const missing = await queue(id, { module: 'updater', command: 'update' });
  t.equal(missing.status, 422, 'required argument missing');
  t.match(missing.body.detail, /missing required argument\(s\) version/);
  t.equal((await queue(id, { module: 'updater', command: 'update', args: { version: '2', force: true } })).status, 422, 'unknown argument');
  t.equal((await queue(id, { module: 'updater', command: 'check' }, viewer.jwt)).status, 403, 'viewer may not queue');
  t.equal((await queue(id, { module: 'updater', command: 'check' }, s.token)).status, 403, 'an API token may not queue');
  t.equal((await queue(id, { command: 'check' })).status, 400, 'module missing');
  t.equal((await queue('00000000-0000-4000-8000-000000000000', { module: 'updater', command: 'check' })).status, 404);
  const other = await s.newCustomer('only-other');
  const otherAdmin = await s.newUser('admin', { customer: other.customer });
  t.equal((await queue(id, { module: 'updater', command: 'check' }, otherAdmin.jwt)).status, 404, "another customer's instance: 404");
  t.same(await commandsOf(id), [], 'nothing stored');
  // Nothing is handed out for a command that was refused. The marker: a command queued after the
  // refusals. Its hint reaches the gateway after any they could have sent (one api connection to
  // NATS, in order), and the gateway then re-reads the instance's open commands from Postgres: the
  // answer that offers the marker shows everything queued before it.
  const marker = await queue(id, { module: 'updater', command: 'check' });
  t.equal(marker.status, 201);
  t.same((await heartbeatUntilOffered('only')).map((c: any) => c.id), [marker.body.id], 'only the marker is offered');
});

t.test('queued -> delivered on the next heartbeat (not on another instance) -> ack success -> succeeded', async (t) => {
  const id = await instance('life-a');
  await instance('life-b');
  await instance('life-a', snapshot, 'other');
  const q = await queue(id, { module: 'updater', command: 'update', args: { version: '2.0', channel: 'stable' } });
  t.equal(q.status, 201);
  t.match(q.body, { module: 'updater', command: 'update', args: { version: '2.0', channel: 'stable' }, state: 'queued', created_by: admin.id, delivered_at: null });
  t.ok(Date.parse(q.body.expires_at) > Date.now() + 23 * 3600_000, 'expires in 24 h');
  t.same(q.body.history.map((e: any) => e.state), ['queued']);
  const cmdId = q.body.id;

  const offered = await heartbeatUntilOffered('life-a');
  t.same(offered, [{ id: cmdId, module: 'updater', command: 'update', args: { version: '2.0', channel: 'stable' } }]);
  t.same((await post(ingest('life-b', 'heartbeat'), s.token, {})).body, { ok: true }, 'another machine gets nothing');
  t.same((await post(ingest('life-a', 'heartbeat', 'other'), s.token, {})).body, { ok: true }, 'another software on the same machine gets nothing');
  const diag = (await post(ingest('life-a', 'diagnostics'), s.token, { items: [{ code: 1, severity: 0 }] })).body;
  t.equal(diag.ok, true);
  t.notOk('commands' in diag, 'diagnostics answers carry no commands (only missing_help, while help texts are missing)');

  const delivered = await commandState(id, cmdId, 'delivered');
  t.ok(delivered.delivered_at, 'delivery time recorded');
  t.ok(Date.parse(delivered.ack_deadline) > Date.now() + 3500_000, 'ack deadline an hour after delivery');

  // Offered again on each contact until acked.
  const again = await post(ingest('life-a', 'heartbeat'), s.token, {});
  t.same(again.body.commands?.map((c: any) => c.id), [cmdId], 'offered again');

  const ack = await post(ackUrl('life-a', cmdId), s.token, { result: 'success', message: 'updated to 2.0', output: { log: ['ok'] } });
  t.equal(ack.status, 200);
  t.same(ack.body, { ok: true });
  const done = await commandState(id, cmdId, 'succeeded');
  t.equal(done.result_message, 'updated to 2.0');
  t.same(done.result_output, { log: ['ok'] });
  t.ok(done.finished_at);
  t.same(done.history.map((e: any) => e.state), ['queued', 'delivered', 'succeeded']);
  const times = done.history.map((e: any) => Date.parse(e.at));
  t.ok(times[0] <= times[1] && times[1] <= times[2], 'history in time order');
  t.match(done.history[0], { actor: `user:${admin.id}` });
  t.match(done.history[2], { actor: 'agent', detail: 'updated to 2.0' });

  // No longer offered once acked.
  await eventually(async () => (await post(ingest('life-a', 'heartbeat'), s.token, {})).body.commands === undefined, 5000, 'no longer offered');
});

t.test('failure path, delivered in the answer to a status report', async (t) => {
  const id = await instance('fail');
  const q = await queue(id, { module: 'av', command: 'scan', args: { deep: true } });
  t.equal(q.status, 201);
  const offered = await heartbeatUntilOffered('fail', ingest('fail', 'status'), { status: 'running', snapshot });
  t.same(offered, [{ id: q.body.id, module: 'av', command: 'scan', args: { deep: true } }]);
  const ack = await post(ackUrl('fail', q.body.id), s.token, { result: 'failure', message: 'scanner not installed', output: 'exit code 3' });
  t.equal(ack.status, 200);
  const done = await commandState(id, q.body.id, 'failed');
  t.equal(done.result_message, 'scanner not installed');
  t.equal(done.result_output, 'exit code 3');
  t.same(done.history.map((e: any) => e.state), ['queued', 'delivered', 'failed']);
});

t.test('the same ack twice (and a contradicting one) is a no-op: the first ack wins', async (t) => {
  const id = await instance('twice');
  const q = await queue(id, { module: 'updater', command: 'check' });
  await heartbeatUntilOffered('twice');
  const body = { result: 'success', message: 'first' };
  const acks = await Promise.all([1, 2, 3].map(() => post(ackUrl('twice', q.body.id), s.token, body)));
  t.same(acks.map((a) => a.status), [200, 200, 200]);
  await commandState(id, q.body.id, 'succeeded');
  const again = await post(ackUrl('twice', q.body.id), s.token, body);
  t.equal(again.status, 200, 'ack after it was applied: still 200');
  // Applied before the contradicting ack is sent, so that this one reaches the worker in a batch of
  // its own: within one batch the earliest ack wins anyway (workers/commands.ts), across batches
  // only the stored state can make it a no-op.
  await drained(s);
  t.equal((await post(ackUrl('twice', q.body.id), s.token, { result: 'failure', message: 'second' })).status, 200);
  // Every ack was answered 200, so JetStream has it: once the stream is drained, the worker has applied them all.
  await drained(s);
  const c = (await commandsOf(id)).find((x) => x.id === q.body.id);
  t.equal(c.state, 'succeeded');
  t.equal(c.result_message, 'first');
  t.same(c.history.map((e: any) => e.state), ['queued', 'delivered', 'succeeded']);
});

t.test('acks: another instance 404, unknown id 404, ill-formed id 400, bad body 422, foreign token 403', async (t) => {
  const id = await instance('ack-a');
  await instance('ack-b');
  const q = await queue(id, { module: 'updater', command: 'check' });
  await heartbeatUntilOffered('ack-a');
  const wrong = await post(ackUrl('ack-b', q.body.id), s.token, { result: 'success' });
  t.equal(wrong.status, 404, "an ack for another instance's command");
  t.type(wrong.body.detail, 'string');
  t.equal((await post(ackUrl('ack-a', q.body.id, 'other'), s.token, { result: 'success' })).status, 404, 'same machine, other software');
  t.equal((await post(ackUrl('ack-a', '00000000-0000-4000-8000-000000000000'), s.token, { result: 'success' })).status, 404, 'unknown id');
  const bad = await post(ackUrl('ack-a', 'not-a-uuid'), s.token, { result: 'success' });
  t.equal(bad.status, 400);
  t.match(bad.body.detail, /command id/);
  const schema = await post(ackUrl('ack-a', q.body.id), s.token, { result: 'maybe' });
  t.equal(schema.status, 422);
  t.ok(schema.body.errors?.length);
  const other = await s.newCustomer('ack-other');
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${other.customer.slug}/ack-a/agent/commands/${q.body.id}/ack`, other.token, { result: 'success' })).status, 404, "another customer's token, its own path: 404");
  t.equal((await post(ackUrl('ack-a', q.body.id), other.token, { result: 'success' })).status, 403, "another customer's token on this customer's path: 403");
  t.equal((await get(ackUrl('ack-a', q.body.id), s.token)).status, 405);
  // Still delivered: none of the refused acks reached it. The marker: a heartbeat of ack-a sent
  // after them through the same gateway; once it is applied, so is anything the gateway queued before
  // (afterMarker). Then the right one, and after it is finished (gone from the gateway's open set)
  // another instance's ack is still 404.
  await commandState(id, q.body.id, 'delivered');
  await afterMarker(s, 'ack-a');
  t.equal((await commandsOf(id)).find((x) => x.id === q.body.id).state, 'delivered');
  t.equal((await post(ackUrl('ack-a', q.body.id), s.token, { result: 'success' })).status, 200);
  await commandState(id, q.body.id, 'succeeded');
  // The gateway has taken it out of its open set once it no longer offers it.
  await eventually(async () => (await post(ingest('ack-a', 'heartbeat'), s.token, {})).body.commands === undefined, 5000, 'no longer offered');
  t.equal((await post(ackUrl('ack-b', q.body.id), s.token, { result: 'success' })).status, 404, 'finished command, wrong instance: 404');
  t.equal((await post(ackUrl('ack-a', q.body.id), s.token, { result: 'success' })).status, 200, 'finished command, right instance: 200');
});

t.test('cancel: a queued command is never delivered; only queued ones can be cancelled', async (t) => {
  const id = await instance('cancel');
  const q = await queue(id, { module: 'updater', command: 'check' });
  t.equal((await post(`${s.apiUrl}/api/commands/${q.body.id}/cancel`, viewer.jwt, {})).status, 403, 'viewer may not cancel');
  const c = await post(`${s.apiUrl}/api/commands/${q.body.id}/cancel`, admin.jwt, {});
  t.equal(c.status, 200);
  t.equal(c.body.state, 'cancelled');
  t.same(c.body.history.map((e: any) => e.state), ['queued', 'cancelled']);
  const again = await post(`${s.apiUrl}/api/commands/${q.body.id}/cancel`, admin.jwt, {});
  t.equal(again.status, 200, 'cancelling again is a no-op');
  t.equal(again.body.state, 'cancelled');
  // The marker: a command queued after the cancel. Its hint reaches the gateway after the cancel's
  // (one api connection to NATS, in order) and makes it re-read the instance from Postgres, so the
  // answer that offers the marker is given by a copy that knows of the cancel: only the marker.
  const d = await queue(id, { module: 'updater', command: 'check' });
  t.same((await heartbeatUntilOffered('cancel')).map((c: any) => c.id), [d.body.id], 'the cancelled command is not offered, the one queued after it is');
  // Every heartbeat was answered (so queued) before the stream drained: the delivery of the marker
  // is recorded, and no delivery of the cancelled one.
  await commandState(id, d.body.id, 'delivered');
  await drained(s);
  const after = (await commandsOf(id)).find((x) => x.id === q.body.id);
  t.equal(after.state, 'cancelled');
  t.same(after.history.map((e: any) => e.state), ['queued', 'cancelled']);

  const late = await post(`${s.apiUrl}/api/commands/${d.body.id}/cancel`, admin.jwt, {});
  t.equal(late.status, 409, 'a delivered command cannot be cancelled');
  t.match(late.body.detail, /delivered/);
  const other = await s.newCustomer('cancel-other');
  const otherAdmin = await s.newUser('admin', { customer: other.customer });
  t.equal((await post(`${s.apiUrl}/api/commands/${d.body.id}/cancel`, otherAdmin.jwt, {})).status, 404, "another customer's command: 404");
  t.equal((await post(`${s.apiUrl}/api/commands/not-a-uuid/cancel`, admin.jwt, {})).status, 400);
  t.equal((await post(`${s.apiUrl}/api/commands/00000000-0000-4000-8000-000000000000/cancel`, admin.jwt, {})).status, 404);
});

t.test('open commands per instance are limited (COMMAND_MAX_OPEN)', async (t) => {
  const id = await instance('limit');
  for (let i = 0; i < 3; i++) t.equal((await queue(id, { module: 'updater', command: 'check' })).status, 201);
  const over = await queue(id, { module: 'updater', command: 'check' });
  t.equal(over.status, 409);
  t.match(over.body.detail, /open commands/);
  // All three offered together, oldest first (once the gateway's copy has all three hints: each
  // queued command is hinted on its own, and they may arrive between two heartbeats).
  const offered = await eventually(async () => {
    const r = await post(ingest('limit', 'heartbeat'), s.token, {});
    return r.status === 200 && r.body.commands?.length === 3 ? r.body.commands : null;
  }, 5000, 'all three commands offered to limit');
  t.equal(offered.length, 3);
  const listed = await commandsOf(id);
  t.same(offered.map((c: any) => c.id), listed.map((c) => c.id).reverse(), 'oldest first');
});

t.test('a command queued through the API is delivered by a different gateway process within 5 s', async (t) => {
  const g2 = await s.startGateway();
  const id = await instance('second');
  // The second gateway loaded the open commands at start; this one is queued after, so only the
  // NATS hint can bring it there in time (its periodic re-read is 10 minutes away).
  const q = await queue(id, { module: 'av', command: 'scan' });
  t.equal(q.status, 201);
  const t0 = Date.now();
  const offered = await heartbeatUntilOffered('second', s.ingestUrl('second', 'heartbeat', { gateway: g2.url }));
  const ms = Date.now() - t0;
  t.ok(ms < 5000, `offered by the second gateway after ${ms} ms`);
  t.same(offered.map((c: any) => c.id), [q.body.id]);
  // The ack through that gateway works too, and both gateways stop offering it.
  t.equal((await post(ackUrl('second', q.body.id, 'agent', g2.url), s.token, { result: 'success' })).status, 200);
  await commandState(id, q.body.id, 'succeeded');
  await eventually(async () => (await post(ingest('second', 'heartbeat'), s.token, {})).body.commands === undefined, 5000, 'gateway 1 stops offering');
  await eventually(async () => (await s.report('second', 'heartbeat', {}, { gateway: g2.url })).body.commands === undefined, 5000, 'gateway 2 stops offering');
});

t.test('list: newest first, filter by state; viewer may read; scoped to the customer', async (t) => {
  const id = await instance('list');
  const a = await queue(id, { module: 'updater', command: 'check' });
  const b = await queue(id, { module: 'av', command: 'scan' });
  await post(`${s.apiUrl}/api/commands/${a.body.id}/cancel`, admin.jwt, {});
  const all = await get(`${s.apiUrl}/api/instances/${id}/commands`, viewer.jwt);
  t.equal(all.status, 200);
  t.same(all.body.items.map((c: any) => c.id), [b.body.id, a.body.id]);
  const cancelled = await get(`${s.apiUrl}/api/instances/${id}/commands?state=cancelled`, viewer.jwt);
  t.same(cancelled.body.items.map((c: any) => c.id), [a.body.id]);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/commands?state=bogus`, viewer.jwt)).status, 400);
  const other = await s.newCustomer('list-other');
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/commands`, other.token)).status, 404);
  t.equal((await get(`${s.apiUrl}/api/instances/${id}/commands`, s.token)).status, 200, 'an API token with the read scope reads');
});
