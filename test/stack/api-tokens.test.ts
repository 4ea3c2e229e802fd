// API tokens that can be limited (docs/api.md "Accounts, customers, members and API tokens"):
// who created a token and when it was last used; an expiry, after which the gateway (from its
// in-memory copy) and the api refuse it with 403; and the binding of an ingest token to one machine
// or a machine-name pattern, so that a token taken from one machine cannot post as another, nor
// read or acknowledge another machine's agent commands. Against the real gateway, worker and api.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack, post, get, request, eventually } from '../helpers/stack.js';
import type { Answer } from '../helpers/http.js';

// The gateways write last_used_at from a flush every 200 ms here (TOKEN_USAGE_FLUSH_MS) instead of 10 s.
const s = await testStack(t, 'apitokens', { env: { TOKEN_USAGE_FLUSH_MS: '200' } });
const admin = await s.newUser('admin');
const createToken = (body: Record<string, unknown>) => post(`${s.apiUrl}/api/tokens`, admin.jwt, body);
const listed = async (id: string) => ((await get(`${s.apiUrl}/api/tokens`, admin.jwt)).body.items as any[]).find((x) => x.id === id);
const ingest = (m: string, kind: string, sw = 'agent') => s.ingestUrl(m, kind, { software: sw });
const batch = (token: string, entries: unknown[]) => post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/batch`, token, { entries });

async function metric(url: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.split(' ').pop()) : 0;
}

t.test('a new token: ingest only by default, its creator and creation time; bad expiries and bindings are 400', async (t) => {
  const r = await createToken({ name: 'agents' });
  t.equal(r.status, 201);
  t.same(r.body.scopes, ['ingest']);
  t.match(r.body, { name: 'agents', machine: null, expires_at: null, last_used_at: null, revoked_at: null, created_by: { id: admin.id, email: admin.email } });
  t.ok(Math.abs(Date.parse(r.body.created_at) - Date.now()) < 60_000, 'created now');
  t.match(await listed(r.body.id), { id: r.body.id, created_by: { id: admin.id, email: admin.email }, last_used_at: null, machine: null });

  const past = await createToken({ expires_at: new Date(Date.now() - 1000).toISOString() });
  t.equal(past.status, 400);
  t.match(past.body.detail, /expires_at.*future/);
  t.equal((await createToken({ expires_at: 'tomorrow' })).status, 400, 'not a date-time');
  const badPattern = await createToken({ machine: 'Rack 1' });
  t.equal(badPattern.status, 400);
  const readBound = await createToken({ machine: 'm1', scopes: ['ingest', 'read'] });
  t.equal(readBound.status, 400);
  t.match(readBound.body.detail, /machine-bound token.*ingest scope only/);
  const viewer = await s.newUser('viewer');
  t.equal((await post(`${s.apiUrl}/api/tokens`, viewer.jwt, {})).status, 403, 'viewers create no tokens');
});

t.test('an expired token is refused with 403 by the gateway (from its copy in memory) and by the api', async (t) => {
  const r = await createToken({ name: 'short-lived', scopes: ['ingest', 'read'], expires_at: new Date(Date.now() + 3600_000).toISOString() });
  t.equal(r.status, 201);
  const tok = r.body.token as string;
  t.ok(Math.abs(Date.parse(r.body.expires_at) - Date.now() - 3600_000) < 60_000, 'expires_at as given');
  await eventually(async () => (await post(ingest('exp-m', 'heartbeat'), tok, {})).status === 200, 10_000, 'accepted while valid');
  t.equal((await get(`${s.apiUrl}/api/instances`, tok)).status, 200, 'the api reads with it while valid');

  // Two seconds left: no change to the row after this, so the gateway refuses it by its clock.
  await s.pool.query(`UPDATE api_tokens SET expires_at = clock_timestamp() + interval '2 seconds' WHERE id = $1`, [r.body.id]);
  const refused = await eventually(async () => {
    const a = await post(ingest('exp-m', 'heartbeat'), tok, {});
    return a.status === 403 ? a : null;
  }, 20_000, 'refused by the gateway after expiry');
  t.match(refused.body.detail, /token expired at \d{4}-\d\d-\d\dT/);
  const api = await get(`${s.apiUrl}/api/instances`, tok);
  t.equal(api.status, 403, 'the api refuses it too');
  t.match(api.body.detail, /token expired/);
  const b = await batch(tok, [{ kind: 'heartbeat', machine: 'exp-m', software: 'agent' }]);
  t.equal(b.status, 403, 'and the batch route');
  t.ok((await listed(r.body.id)).expires_at, 'the list shows when it expired');
});

t.test('last_used_at: written by the gateway in the background, at most once a minute', async (t) => {
  const r = await createToken({ name: 'usage' });
  const tok = r.body.token as string;
  t.equal(r.body.last_used_at, null);
  await eventually(async () => (await post(ingest('use-m', 'heartbeat'), tok, {})).status === 200, 10_000, 'accepted');
  const first = await eventually(async () => (await listed(r.body.id)).last_used_at as string | null, 10_000, 'last_used_at written');
  t.ok(Math.abs(Date.parse(first) - Date.now()) < 60_000, 'about now');

  // Used again within the minute: the next flush that carries this use leaves the row alone.
  // (A gateway notes a token's use at most once a second: heartbeats go on until one is noted.)
  const skipped = await metric(s.gatewayUrl, 'fleet_token_last_used_updates_total', 'result="skipped"');
  await eventually(async () => {
    t.equal((await post(ingest('use-m', 'heartbeat'), tok, {})).status, 200);
    return (await metric(s.gatewayUrl, 'fleet_token_last_used_updates_total', 'result="skipped"')) > skipped;
  }, 10_000, 'a flush that skipped the write');
  t.equal((await listed(r.body.id)).last_used_at, first, 'not written again within the minute');

  // A minute later (moved back in the row), the next use is written.
  await s.pool.query(`UPDATE api_tokens SET last_used_at = clock_timestamp() - interval '61 seconds' WHERE id = $1`, [r.body.id]);
  const old = Date.parse((await listed(r.body.id)).last_used_at);
  await eventually(async () => {
    t.equal((await post(ingest('use-m', 'heartbeat'), tok, {})).status, 200);
    return Date.parse((await listed(r.body.id)).last_used_at) > old + 60_000;
  }, 10_000, 'written again');

  // The api records the tokens it authenticates (a read token) the same way.
  const reader = await createToken({ name: 'reader', scopes: ['read'] });
  t.equal((await get(`${s.apiUrl}/api/instances`, reader.body.token)).status, 200);
  await eventually(async () => (await listed(reader.body.id)).last_used_at, 10_000, 'the read token is marked used');
});

/** Status snapshot that advertises one command. */
const snapshot = { modules: { updater: { commands: [{ name: 'check' }] } } };

async function instanceWithCommand(m: string): Promise<{ instanceId: string; commandId: string }> {
  t.equal((await post(ingest(m, 'status'), s.token, { status: 'running', snapshot })).status, 200);
  const instanceId = await eventually(async () => {
    const l = await get(`${s.apiUrl}/api/instances?machine=${m}`, s.token);
    const i = l.body.items?.find((x: any) => x.machine === m);
    if (!i) return null;
    const a = await get(`${s.apiUrl}/api/instances/${i.id}/commands/available`, admin.jwt);
    return a.body.items?.length ? (i.id as string) : null;
  }, 10_000, `instance ${m}`);
  const q = await post(`${s.apiUrl}/api/instances/${instanceId}/commands`, admin.jwt, { module: 'updater', command: 'check' });
  if (q.status !== 201) throw new Error(`command not queued: ${q.status} ${JSON.stringify(q.body)}`);
  // The shared token sees it offered: the gateway knows the command.
  await eventually(async () => (await post(ingest(m, 'heartbeat'), s.token, {})).body.commands?.length, 10_000, `command offered to ${m}`);
  return { instanceId, commandId: q.body.id };
}

t.test('a machine-bound token posts only as its machine, on every ingest route', async (t) => {
  const r = await createToken({ name: 'rack1-a only', machine: 'rack1-a' });
  t.equal(r.status, 201);
  t.equal(r.body.machine, 'rack1-a');
  const tok = r.body.token as string;
  // At once (the gateway looks an unknown token up) and after it is in the gateway's copy.
  const early = await post(ingest('rack1-b', 'heartbeat'), tok, {});
  t.equal(early.status, 403, 'a token the gateway had to look up');
  t.equal((await post(ingest('rack1-a', 'heartbeat'), tok, {})).status, 200, 'its own machine');

  const refusals: [string, Promise<Answer>][] = [
    ['heartbeat', post(ingest('rack1-b', 'heartbeat'), tok, {})],
    ['diagnostics', post(ingest('rack1-b', 'diagnostics'), tok, { items: [{ code: 1, severity: 0 }] })],
    ['status', post(ingest('rack1-b', 'status'), tok, { status: 'running' })],
    ['help', post(ingest('rack1-b', 'help'), tok, { items: [] })],
    ['metrics', post(`${s.gatewayUrl}/api/ingest/${s.customer.slug}/rack1-b/logcollector/metrics`, tok, { name: 'cpu', value: 1, client_metric_id: 'x1' })],
    ['artifact-init', post(ingest('rack1-b', 'artifact-init'), tok, { filename: 'a.bin', size: 10 })],
    ['artifact-chunk', request('PUT', ingest('rack1-b', `artifact-chunk/${randomUUID()}/0`), tok, 'xxxxxxxxxx', { 'Content-Type': 'application/octet-stream' })],
    ['artifact-status', get(ingest('rack1-b', `artifact-status/${randomUUID()}`), tok)],
    ['artifact-complete', post(ingest('rack1-b', `artifact-complete/${randomUUID()}`), tok, '')],
    ['command ack', post(ingest('rack1-b', `commands/${randomUUID()}/ack`), tok, { result: 'success' })],
  ];
  for (const [what, p] of refusals) {
    const a = await p;
    t.equal(a.status, 403, `${what} as another machine: 403`);
    t.match(a.body.detail, /token bound to machine rack1-a: it cannot post as rack1-b/, `${what}: the detail names the binding`);
  }

  const b = await batch(tok, [
    { kind: 'heartbeat', machine: 'rack1-a', software: 'agent' },
    { kind: 'heartbeat', machine: 'rack1-b', software: 'agent' },
    { kind: 'status', machine: 'rack1-a', software: 'agent', body: { status: 'running' } },
  ]);
  t.equal(b.status, 200);
  t.same(b.body.results.map((x: any) => x.status), [200, 403, 200], 'in a batch, the entries for another machine alone are refused');
  t.match(b.body.results[1].detail, /bound to machine rack1-a/);
});

t.test('a pattern binding: `*` and `?` as in whitelist patterns', async (t) => {
  const r = await createToken({ name: 'rack 2', machine: 'rack2-?-*' });
  t.equal(r.status, 201);
  const tok = r.body.token as string;
  t.equal((await post(ingest('rack2-a-1', 'heartbeat'), tok, {})).status, 200);
  t.equal((await post(ingest('rack2-b-server', 'heartbeat'), tok, {})).status, 200);
  const no = await post(ingest('rack2-ab-1', 'heartbeat'), tok, {});
  t.equal(no.status, 403, '? is exactly one character');
  t.match(no.body.detail, /token bound to machines rack2-\?-\*: it cannot post as rack2-ab-1/);
  t.equal((await post(ingest('rack3-a-1', 'heartbeat'), tok, {})).status, 403);
});

t.test("a machine-bound token neither receives nor acknowledges another machine's commands", async (t) => {
  const theirs = await instanceWithCommand('cmd-other');
  const mine = await instanceWithCommand('cmd-mine');
  const tok = (await createToken({ name: 'cmd-mine only', machine: 'cmd-mine' })).body.token as string;

  const read = await post(ingest('cmd-other', 'heartbeat'), tok, {});
  t.equal(read.status, 403, "no heartbeat answer carrying the other machine's commands");
  t.notOk(read.body.commands);
  const readStatus = await post(ingest('cmd-other', 'status'), tok, { status: 'running' });
  t.equal(readStatus.status, 403, 'nor a status answer');
  const inBatch = await batch(tok, [{ kind: 'heartbeat', machine: 'cmd-other', software: 'agent' }]);
  t.equal(inBatch.body.results?.[0]?.status, 403, 'nor a batch entry');
  t.notOk(inBatch.body.results?.[0]?.commands);

  const own = await post(ingest('cmd-mine', 'heartbeat'), tok, {});
  t.equal(own.status, 200);
  t.same(own.body.commands.map((c: any) => c.id), [mine.commandId], 'its own machine gets only its own command');

  const forged = await post(ingest('cmd-other', `commands/${theirs.commandId}/ack`), tok, { result: 'success', message: 'forged' });
  t.equal(forged.status, 403, "acking the other machine's command on its path");
  const sideways = await post(ingest('cmd-mine', `commands/${theirs.commandId}/ack`), tok, { result: 'success', message: 'forged' });
  t.equal(sideways.status, 404, 'or naming it under its own machine');
  t.equal((await post(ingest('cmd-mine', `commands/${mine.commandId}/ack`), tok, { result: 'success', message: 'mine' })).status, 200, 'its own ack goes through');

  // The other machine's command is still open, and acknowledged by no one.
  const cmds = (await get(`${s.apiUrl}/api/instances/${theirs.instanceId}/commands`, admin.jwt)).body.items as any[];
  const c = cmds.find((x) => x.id === theirs.commandId);
  t.ok(['queued', 'delivered'].includes(c.state), `still open (${c.state})`);
  t.equal(c.result_message ?? null, null);
});
