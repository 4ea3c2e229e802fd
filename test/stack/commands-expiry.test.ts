// Agent commands with short settings: a queued command expires, a delivered one without an ack
// times out (the BullMQ sweep job in the workers); neither is offered afterwards, and every change
// of state is in the history with its time. And the safety nets of the gateways' copy: a command
// whose NATS hint was lost is picked up by the periodic re-read, and a gateway that starts loads
// every open command before it listens.
import t from 'tap';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { queueCommand } from '../../lib/store/commands.js';

const s = await testStack(t, 'cmdexpiry', {
  env: { COMMAND_QUEUE_TTL_S: '5', COMMAND_ACK_TIMEOUT_S: '3', COMMAND_SWEEP_MS: '300', COMMAND_RESYNC_MS: '1500' },
});
const admin = await s.newUser('admin');
const ingest = (m: string, kind: string) => s.ingestUrl(m, kind);
const snapshot = { modules: { updater: { commands: [{ name: 'check' }] } } };

async function instance(m: string): Promise<string> {
  await post(ingest(m, 'status'), s.token, { status: 'running', snapshot });
  return eventually(async () => {
    const i = (await get(`${s.apiUrl}/api/instances?machine=${m}`, s.token)).body.items?.[0];
    if (!i) return null;
    return (await get(`${s.apiUrl}/api/instances/${i.id}/commands/available`, admin.jwt)).body.items?.length ? (i.id as string) : null;
  });
}

async function command(instanceId: string, id: string) {
  return (await get(`${s.apiUrl}/api/instances/${instanceId}/commands`, admin.jwt)).body.items.find((c: any) => c.id === id);
}

t.test('queued too long -> expired, and not offered afterwards', async (t) => {
  const id = await instance('exp');
  const q = await post(`${s.apiUrl}/api/instances/${id}/commands`, admin.jwt, { module: 'updater', command: 'check' });
  t.equal(q.status, 201);
  t.ok(Math.abs(Date.parse(q.body.expires_at) - Date.parse(q.body.created_at) - 5000) < 50, 'expires 5 s after queueing');
  const c = await eventually(async () => {
    const c = await command(id, q.body.id);
    return c.state === 'expired' ? c : null;
  }, 15_000, 'expired');
  t.same(c.history.map((e: any) => e.state), ['queued', 'expired']);
  t.ok(Date.parse(c.history[1].at) >= Date.parse(q.body.expires_at), 'expired at or after its deadline');
  t.match(c.history[1], { actor: 'system' });
  t.ok(c.finished_at);
  const hb = await post(ingest('exp', 'heartbeat'), s.token, {});
  t.same(hb.body, { ok: true }, 'an expired command is not offered');
});

t.test('delivered without ack in time -> timed_out; a late ack still records the outcome', async (t) => {
  const id = await instance('tmo');
  const q = await post(`${s.apiUrl}/api/instances/${id}/commands`, admin.jwt, { module: 'updater', command: 'check' });
  t.equal(q.status, 201);
  const offered = await eventually(async () => (await post(ingest('tmo', 'heartbeat'), s.token, {})).body.commands, 3000, 'offered');
  t.equal(offered[0].id, q.body.id);
  const c = await eventually(async () => {
    const c = await command(id, q.body.id);
    return c.state === 'timed_out' ? c : null;
  }, 15_000, 'timed out');
  t.same(c.history.map((e: any) => e.state), ['queued', 'delivered', 'timed_out']);
  t.ok(Date.parse(c.history[2].at) >= Date.parse(c.ack_deadline), 'timed out at or after its ack deadline');
  t.ok(Math.abs(Date.parse(c.ack_deadline) - Date.parse(c.delivered_at) - 3000) < 50, 'ack deadline 3 s after the first delivery');
  await eventually(async () => (await post(ingest('tmo', 'heartbeat'), s.token, {})).body.commands === undefined, 5000, 'no longer offered');

  // The agent did run it after all: what it reports is kept.
  t.equal((await post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/tmo/agent/commands/${q.body.id}/ack`, s.token, { result: 'success', message: 'late' })).status, 200);
  const late = await eventually(async () => {
    const c = await command(id, q.body.id);
    return c.state === 'succeeded' ? c : null;
  }, 10_000, 'late ack recorded');
  t.same(late.history.map((e: any) => e.state), ['queued', 'delivered', 'timed_out', 'succeeded']);
  t.equal(late.result_message, 'late');
});

t.test('a command whose hint was lost is offered after the periodic re-read; a new gateway loads it at start', async (t) => {
  const queue = async (instanceId: string) =>
    (
      await queueCommand(s.pool, {
        customerId: s.customer.id,
        instanceId,
        module: 'updater',
        command: 'check',
        args: {},
        userId: null,
        queueTtlS: 60,
        maxOpen: 10,
        argsMaxBytes: 1024,
      })
    ).command;
  // Queued straight into Postgres: no hint is published.
  const command = await queue(await instance('nohint'));
  // Nothing hints any gateway until some gateway hands it out: the running one finds it at its
  // next full re-read (every 1.5 s here).
  const offered = await eventually(async () => (await post(ingest('nohint', 'heartbeat'), s.token, {})).body.commands, 5000, 'offered by the running gateway after its re-read');
  t.same(offered.map((c: any) => c.id), [command.id]);
  // A second one, unhinted and never offered, for a gateway that starts after it was queued. (Not the
  // first one: once offered, it is open only for the 3 s ack timeout, shorter than a loaded start.)
  const second = await queue(await instance('nohint2'));
  const g2 = await s.startGateway();
  const first = await s.report('nohint2', 'heartbeat', {}, { gateway: g2.url });
  t.same(first.body.commands?.map((c: any) => c.id), [second.id], 'a gateway that starts offers it on its first answer');
});
