// The gateway refuses to run on uWS's slow pure-JS fallback unless explicitly allowed.
import t from 'tap';
import { Proc } from '../deploy/service-process.js';
import { testStack, post } from './helpers/stack.js';

const s = await testStack(t, 'uws', { gateway: false, worker: false, api: false });

t.test('native binary in use by default', async (t) => {
  const g = await s.startGateway();
  const l = await g.proc.waitFor((l) => l.msg === 'listening');
  t.equal(l.native, true);
  await g.proc.stop();
});

t.test('fallback forced (UWS_USE_FALLBACK=1): the gateway exits with an explanation', async (t) => {
  const p = new Proc('gateway', 'gateway/main.js', { ...s.env, UWS_USE_FALLBACK: '1' });
  const code = await p.exited;
  t.equal(code, 78, 'exit code EX_CONFIG');
  t.match(p.output, /pure-JS fallback/);
});

t.test('fallback allowed explicitly (UWS_ALLOW_FALLBACK=1): starts, says so, serves', async (t) => {
  const g = await s.startGateway({ UWS_USE_FALLBACK: '1', UWS_ALLOW_FALLBACK: '1' });
  const l = await g.proc.waitFor((l) => l.msg === 'listening');
  t.equal(l.native, false);
  t.ok(g.proc.lines.some((x) => /fallback/.test(String(x.msg))), 'warns');
  const r = await post(`${g.url}/api/ingest/${s.customer.slug}/m/agent/heartbeat`, s.token, {});
  t.equal(r.status, 200);
  await g.proc.stop();
});
