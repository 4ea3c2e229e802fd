// The bench's CPU account of Postgres (bench/cpu.ts cpuSeconds with children): the postmaster's own
// time, that of its live backends, and that of the exited ones the kernel added to its cutime. A
// backend that exits while its siblings are being read must count once: read before the parent
// and gone after it, it counted nowhere for that reading, and the next reading got its whole
// lifetime back at once (a traffic-light run recorded Postgres at 774 µs of CPU per change, 13.2
// cores busy on a machine of two: bench/README.md "The light's own statements").
import t from 'tap';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { testStack } from '../helpers/stack.js';
import { cpuSeconds } from '../../bench/cpu.js';

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
