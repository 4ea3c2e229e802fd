// Spec 4.1 rule 1 and 5.7.1: concurrent first reports for one instance all succeed and create
// exactly one machine and one instance, even across gateways and competing workers.
import t from 'tap';
import { testStack, post, eventually, chRows } from '../helpers/stack.js';

// One report per message and one message per batch: several workers really race on the upsert.
const s = await testStack(t, 'race', { env: { PUBLISH_MAX_REPORTS: '1', WORKER_BATCH_MESSAGES: '1' } });
const g2 = await s.startGateway();
await Promise.all([s.startWorker(), s.startWorker()]);

t.test('50 concurrent first reports for one new instance: all 200, one row', async (t) => {
  const urls = [s.gatewayUrl, g2.url];
  const kinds = ['heartbeat', 'status', 'diagnostics'] as const;
  const bodies = { heartbeat: {}, status: { status: 'running' }, diagnostics: { items: [{ code: 7, severity: 0 }] } };
  const rs = await Promise.all(
    Array.from({ length: 50 }, (_, i) => {
      const kind = kinds[i % 3]!;
      return post(`${urls[i % 2]}/api/ingest/${s.customer.slug}/new-machine/new-agent/${kind}`, s.token, bodies[kind]);
    }),
  );
  // Diagnostics answer 202 while their codes lack help texts: accepted all the same.
  t.same([...new Set(rs.map((r) => (r.status === 202 ? 200 : r.status)))], [200], 'every request accepted');
  await eventually(async () => {
    const r = await chRows<{ n: string }>(s.ch, `SELECT (SELECT count() FROM heartbeats FINAL) + (SELECT count() FROM status_history FINAL) + (SELECT count() FROM diagnostics FINAL) AS n`);
    return Number(r[0]!.n) === 50;
  }, 15_000, 'all 50 reports in ClickHouse').catch((e: unknown) => {
    const logs = s.procs.flatMap((p) => p.lines.filter((l) => Number(l.level) >= 40).slice(-4).map((l) => JSON.stringify(l).slice(0, 900)));
    throw new Error(`${String(e)}; warnings: ${logs.join(' | ')}`);
  });
  const m = await s.pool.query(`SELECT count(*)::int AS n FROM machines WHERE slug = 'new-machine'`);
  const i = await s.pool.query(`SELECT count(*)::int AS n FROM instances WHERE software = 'new-agent'`);
  t.equal(m.rows[0].n, 1, 'one machine');
  t.equal(i.rows[0].n, 1, 'one instance');
  const ids = await chRows<{ n: string }>(s.ch, `SELECT uniqExact(instance_id) AS n FROM heartbeats FINAL`);
  t.equal(Number(ids[0]!.n), 1, 'every row points at that one instance');
});

t.test('many new instances at once from many requests: each exactly once', async (t) => {
  const n = 200;
  const rs = await Promise.all(
    Array.from({ length: n }, (_, i) => post(`${i % 2 ? g2.url : s.gatewayUrl}/api/ingest/${s.customer.slug}/m-${i % 40}/sw-${i % 5}/heartbeat`, s.token, {})),
  );
  t.same([...new Set(rs.map((r) => r.status))], [200]);
  await eventually(async () => {
    const r = await s.pool.query(`SELECT count(*)::int AS n FROM instances WHERE software LIKE 'sw-%'`);
    return r.rows[0].n === 40;
  }, 15_000, '40 instances (40 machines x their software)');
  const m = await s.pool.query(`SELECT count(*)::int AS n FROM machines WHERE slug LIKE 'm-%'`);
  t.equal(m.rows[0].n, 40);
});
