// The bench's CPU account of Postgres (bench/cpu.ts cpuSeconds with children): the postmaster's own
// time, that of its live backends, and that of the exited ones the kernel added to its cutime. A
// backend that exits while its siblings are being read must count once: read before the parent
// and gone after it, it counted nowhere for that reading, and the next reading got its whole
// lifetime back at once (a traffic-light run recorded Postgres at 774 µs of CPU per change, 13.2
// cores busy on a machine of two: bench/README.md "The light's own statements"). And Redis is Redis,
// not the snapshot child it forks (taken for it, a light run recorded Redis at -37 µs per change).
import t from 'tap';
import { readFileSync, readlinkSync, readdirSync } from 'node:fs';
import pg from 'pg';
import { testStack } from '../helpers/stack.js';
import { availableParallelism } from 'node:os';
import { cpuSeconds, hostCpu, serverPids } from '../../bench/cpu.js';

const s = await testStack(t, 'benchcpu', { gateway: false, worker: false, api: false });

t.test("a backend that burned CPU and exits while the readings go on: they never fall (its CPU stays in them, moved to the parent's account)", async (t) => {
  const backend = (await s.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const st = readFileSync(`/proc/${backend}/stat`, 'utf8');
  const postmaster = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
  t.ok(readFileSync(`/proc/${postmaster}/cmdline`, 'utf8').includes('postgres'), `the backends' parent is the postmaster (${postmaster})`);

  for (let round = 0; round < 3; round++) {
    const c = new pg.Client({ connectionString: s.env.DATABASE_URL });
    await c.connect();
    await c.query('SELECT count(*) FROM generate_series(1, 6000000)');
    const before = cpuSeconds(postmaster, true);
    const t0 = Date.now();
    // The backend exits some milliseconds after end() resolves; read as fast as possible meanwhile.
    const ended = c.end();
    const readings: number[] = [];
    while (Date.now() - t0 < 400) readings.push(cpuSeconds(postmaster, true));
    await ended;
    const falls = readings.flatMap((r, i) => (i > 0 && r < readings[i - 1]! - 0.02 ? [Math.round((readings[i - 1]! - r) * 100) / 100] : []));
    t.same(falls, [], `round ${round}: ${readings.length} readings, none lower than the one before (by more than two clock ticks)`);
    const after = readings[readings.length - 1]!;
    t.ok(after - before <= ((Date.now() - t0) / 1000) * 4 + 0.05, `round ${round}: no more CPU than the machine could give meanwhile (${Math.round((after - before) * 100) / 100} s)`);
  }
});

t.test("Redis's snapshot child is not taken for Redis, and its CPU counts as Redis's", async (t) => {
  const info = String(await s.redis.info('server'));
  const redisPid = Number(/process_id:(\d+)/.exec(info)![1]);
  const dir = readlinkSync(`/proc/${redisPid}/cwd`);
  const childOf = (pid: number) =>
    readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map(Number)
      .filter((p) => {
        try {
          const st = readFileSync(`/proc/${p}/stat`, 'utf8');
          return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]) === pid;
        } catch {
          return false;
        }
      });
  // A snapshot that takes its time: 50 ms per key, and a few keys of our own.
  const prefix = `benchcpu:${process.pid}:`;
  for (let i = 0; i < 20; i++) await s.redis.set(`${prefix}${i}`, 'x'.repeat(100));
  await s.redis.config('SET', 'rdb-key-save-delay', '50000');
  let child: number | undefined;
  try {
    await s.redis.bgsave().catch(() => {}); // one already under way does as well
    const t0 = Date.now();
    while (!(child = childOf(redisPid)[0]) && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 20));
    t.ok(child, `Redis forked its snapshot child (${child})`);
    t.equal(serverPids(dir)['redis-server'], redisPid, 'serverPids names Redis itself, with its child running');
    const before = cpuSeconds(redisPid, true);
    t.ok(before >= cpuSeconds(redisPid), "with its children Redis's account is at least its own");
  } finally {
    await s.redis.config('SET', 'rdb-key-save-delay', '0');
    if (child) {
      try {
        process.kill(child, 'SIGKILL');
      } catch {
        /* gone already */
      }
    }
    await s.redis.del(...Array.from({ length: 20 }, (_, i) => `${prefix}${i}`));
  }
});

t.test("the machine's account: at least this process's burn, at most what its cores could give, steal within it", async (t) => {
  const h0 = hostCpu();
  const own0 = cpuSeconds(process.pid);
  const t0 = Date.now();
  let x = 0;
  while (Date.now() - t0 < 500) x += Math.sqrt(x + 1);
  t.ok(x > 0);
  const own = cpuSeconds(process.pid) - own0;
  const wall = (Date.now() - t0) / 1000;
  const h1 = hostCpu();
  const busy = h1.busy - h0.busy;
  t.ok(own >= 0.3, `this process burned ${own} s`);
  t.ok(busy >= own - 0.03, `the machine was busy ${busy} s, at least this process's ${own} s`);
  t.ok(busy <= wall * availableParallelism() + 0.05, `and no more than its ${availableParallelism()} cores give in ${wall} s (idle is not busy)`);
  t.ok(h1.steal >= h0.steal && h1.steal - h0.steal <= busy + 0.01, 'steal only grows, within busy');
});
