// The gateway refuses to run on uWS's slow pure-JS fallback unless explicitly allowed, and loads
// the uWebSockets.js build UWS_MODULE names (a package name or a path), refusing a fallback there too.
import t from 'tap';
import { join } from 'node:path';
import { Proc, ROOT } from '../../deploy/service-process.js';
import { testStack, post } from '../helpers/stack.js';

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

t.test('UWS_MODULE names the build: a path to a native build is loaded and serves', async (t) => {
  const g = await s.startGateway({ UWS_MODULE: join(ROOT, 'node_modules', 'uWebSockets.js') });
  const l = await g.proc.waitFor((l) => l.msg === 'listening');
  t.equal(l.native, true, 'native through the path');
  const r = await post(`${g.url}/api/ingest/${s.customer.slug}/m/agent/heartbeat`, s.token, {});
  t.equal(r.status, 200);
  await g.proc.stop();
});

t.test('UWS_MODULE naming a pure-JS build: refused like the fallback', async (t) => {
  // The registry package's own fallback, loaded directly: a working server, but not native.
  const fallback = join(ROOT, 'node_modules', 'uWebSockets.js', 'dist', 'index.js');
  const p = new Proc('gateway', 'gateway/main.js', { ...s.env, UWS_MODULE: fallback });
  t.equal(await p.exited, 78, 'exit code EX_CONFIG');
  t.match(p.output, /index\.js\) loaded a pure-JS fallback/);
});

t.test('UWS_MODULE naming nothing loadable: the gateway does not start', async (t) => {
  const p = new Proc('gateway', 'gateway/main.js', { ...s.env, UWS_MODULE: '/nonexistent/uws.js' });
  t.not(await p.exited, 0);
  t.match(p.output, /Cannot find module '\/nonexistent\/uws\.js'/);
  t.notOk(p.lines.some((l) => l.msg === 'listening'));
});
