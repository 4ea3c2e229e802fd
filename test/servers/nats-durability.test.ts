// Every process (gateway, worker, api) logs one warning at start when the NATS server it finds is
// older than the production requirement (2.10.23) or the ingest stream has fewer than 3 replicas.
// The test servers are Debian's nats-server 2.9.10 with streams at R1: both fall short here; the
// cluster tests (test/cluster/) see the same warning name only the version at R3.
import t from 'tap';
import { testStack } from '../helpers/stack.js';

const s = await testStack(t, 'natsdur', { gateway: false, worker: false, api: false });
const serverVersion = s.nc.info!.version;

t.test('gateway, worker and api each warn once, naming what falls short', async (t) => {
  const [g, w, a] = await Promise.all([s.startGateway(), s.startWorker(), s.startApi()]);
  for (const [name, proc] of [['gateway', g.proc], ['worker', w], ['api', a.proc]] as const) {
    const line = await proc.waitFor((l) => String(l.msg).startsWith('NATS durability below the production requirement'), 20_000);
    t.equal(line.level, 40, `${name}: a warning`);
    t.equal(line.nats_version, serverVersion, `${name}: names the server's version`);
    t.equal(line.stream_replicas, 1, `${name}: names the stream's replicas`);
    t.match(String(line.msg), new RegExp(`nats-server ${serverVersion.replace(/\./g, '\\.')} is older than 2\\.10\\.23; the stream has 1 replica, fewer than 3`));
    t.equal(proc.lines.filter((l) => String(l.msg).startsWith('NATS durability')).length, 1, `${name}: one warning, not one per check`);
  }
});
