// `npm start`'s check of its own ports (deploy/local-servers.ts ensurePortFree) against the two
// ways a port can be taken: a server listening on it, and a client socket whose own (ephemeral)
// port it is. The second answers no probe, yet a listener there fails with EADDRINUSE: a worker
// started on it ran without its /readyz (test/stack/stack-start.test.ts once waited 30 s for it).
import t from 'tap';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { ensurePortFree, bindable, PortInUseError } from '../../deploy/local-servers.js';

function listen(port = 0): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer((c) => c.on('error', () => {}));
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}
const portOf = (s: Server) => (s.address() as { port: number }).port;
const close = (s: Server) => new Promise<void>((r) => s.close(() => r()));

t.test('a port a server listens on is refused, and named with its variable', async (t) => {
  const s = await listen();
  const err = await ensurePortFree(portOf(s), 'GATEWAY_PORT').catch((e: unknown) => e);
  t.ok(err instanceof PortInUseError);
  t.match((err as Error).message, new RegExp(`port ${portOf(s)} is in use by another process; set GATEWAY_PORT to a free port`));
  await close(s);
});

t.test("a port that is a connection's own port is refused too, though nothing answers on it", async (t) => {
  const s = await listen();
  const client: Socket = await new Promise((resolve) => {
    const c = connect(portOf(s), '127.0.0.1', () => resolve(c));
  });
  t.teardown(async () => (client.destroy(), await close(s)));
  const own = client.localPort!;
  t.equal(await bindable(own), false, 'a listener could not bind it');
  const err = await ensurePortFree(own, 'WORKER_HTTP_PORT').catch((e: unknown) => e);
  t.ok(err instanceof PortInUseError, 'refused');
  t.match((err as Error)?.message, new RegExp(`port ${own} is held by another process's socket .*; set WORKER_HTTP_PORT to a free port`));
});

t.test('a free port passes, and stays free for the server started next', async (t) => {
  const s = await listen();
  const port = portOf(s);
  await close(s);
  await ensurePortFree(port, 'API_PORT');
  t.equal(await bindable(port), true);
  const again = await listen(port);
  t.equal(portOf(again), port, 'the check left nothing bound');
  await close(again);
});
