// Ingest partitions (lib/contract/messages.ts): which partition a machine's reports go to, and the
// names of each partition's streams and subjects. Gateways, workers, dead-letter replay and the
// bench of different versions must agree on both, so the hash is pinned to known values.
import t from 'tap';
import { ingestRole, ingestRoleStream } from '../../lib/store/backup.js';
import { ingestPartition, ingestPartitions, ingestStreamOf, ingestStreams, partitionOf, partitionOfStream } from '../../lib/contract/messages.js';

const CUSTOMER = '00000000-0000-4000-8000-000000000001';

t.test('partitionOf is FNV-1a (32 bits) of "<customer id>/<machine>" modulo the partitions: pinned values', async (t) => {
  // Computed independently (Python: FNV-1a over the UTF-8 bytes; slugs and ids are ASCII).
  t.equal(partitionOf(CUSTOMER, 'web-01', 3), 2692478433 % 3);
  t.equal(partitionOf(CUSTOMER, 'web-02', 3), 2642145576 % 3);
  t.equal(partitionOf(CUSTOMER, 'web-03', 7), 2658923195 % 7);
  t.equal(partitionOf('a', 'b', 64), 982414785 % 64);
  t.equal(partitionOf(CUSTOMER, 'web-01', 1), 0, 'one partition: always 0');
  t.equal(partitionOf(CUSTOMER, 'web-01', 0), 0, 'no partition count: 0');
});

t.test("every machine's reports in one partition; machines spread evenly", async (t) => {
  const counts = [0, 0, 0];
  for (let i = 0; i < 30_000; i++) {
    const p = partitionOf(`${CUSTOMER.slice(0, -4)}${String(i % 7).padStart(4, '0')}`, `host-${i}`, 3);
    counts[p]!++;
    if (i % 1000 === 0) t.equal(partitionOf(`${CUSTOMER.slice(0, -4)}${String(i % 7).padStart(4, '0')}`, `host-${i}`, 3), p, 'the same machine, the same partition');
  }
  for (const [p, n] of counts.entries()) t.ok(n > 9_000 && n < 11_000, `partition ${p}: ${n} of 30,000 machines (10,000 ± 10 %)`);
  // Two customers' machines of one name are two keys.
  const spread = new Set(Array.from({ length: 50 }, (_, i) => partitionOf(`00000000-0000-4000-8000-0000000000${String(i).padStart(2, '0')}`, 'web-01', 3)));
  t.equal(spread.size, 3, 'one machine name of 50 customers lands in every partition');
});

t.test('names: one partition keeps the unpartitioned names; N > 1 numbers them', async (t) => {
  t.same(ingestPartition('INGEST', 'ingest', 0, 1), {
    partition: 0,
    streams: { reports: 'INGEST', heartbeats: 'INGEST_HB' },
    subjects: { reports: 'ingest.reports', heartbeats: 'ingest.heartbeats', rejections: 'ingest.rejections' },
  });
  t.same(ingestPartition('INGEST', 'ingest', 2, 3), {
    partition: 2,
    streams: { reports: 'INGEST_2', heartbeats: 'INGEST_2_HB' },
    subjects: { reports: 'ingest.p2.reports', heartbeats: 'ingest.p2.heartbeats', rejections: 'ingest.p2.rejections' },
  });
  t.same(ingestStreams('INGEST'), ['INGEST', 'INGEST_HB']);
  t.same(ingestStreams('INGEST', 3), ['INGEST_0', 'INGEST_0_HB', 'INGEST_1', 'INGEST_1_HB', 'INGEST_2', 'INGEST_2_HB']);
  t.equal(ingestPartitions('INGEST', 'ingest', 3).length, 3);
  // No subject of one partition is another's, nor the unpartitioned ones (a stream's subjects may not overlap).
  const all = [...ingestPartitions('INGEST', 'ingest', 1), ...ingestPartitions('INGEST', 'ingest', 12)].flatMap((p) => Object.values(p.subjects));
  t.equal(new Set(all).size, all.length, 'every subject distinct');
});

t.test('which streams are ingest streams a worker consumes (any partition count), and which are not', async (t) => {
  t.same(ingestStreamOf('INGEST', 'INGEST'), { lane: 'reports', partition: null });
  t.same(ingestStreamOf('INGEST', 'INGEST_HB'), { lane: 'heartbeats', partition: null });
  t.same(ingestStreamOf('INGEST', 'INGEST_7'), { lane: 'reports', partition: 7 });
  t.same(ingestStreamOf('INGEST', 'INGEST_63_HB'), { lane: 'heartbeats', partition: 63 });
  for (const other of ['INGEST_DLQ', 'INGEST_ARTIFACTS', 'KV_INGEST_UPLOADS', 'OBJ_INGEST_ARTIFACTS', 'INGEST2', 'INGEST_HB_1', 'XINGEST', 'INGEST_1_2', 'INGEST_', 'INGEST_1234']) {
    t.equal(ingestStreamOf('INGEST', other), null, `${other}: not an ingest stream`);
  }
  // A discovered stream maps back to the subjects its gateway publishes on.
  t.same(partitionOfStream('INGEST', 'ingest', 'INGEST_5_HB'), { ...ingestPartition('INGEST', 'ingest', 5, 9), lane: 'heartbeats', label: '5' });
  t.same(partitionOfStream('INGEST', 'ingest', 'INGEST'), { ...ingestPartition('INGEST', 'ingest', 0, 1), lane: 'reports', label: 'unpartitioned' });
});

t.test("a backup's role of each ingest stream, and the stream it names in another stack", async (t) => {
  const cases: [string, string, string][] = [
    ['INGEST', 'ingest', 'DST'],
    ['INGEST_HB', 'heartbeats', 'DST_HB'],
    ['INGEST_0', 'ingest_0', 'DST_0'],
    ['INGEST_2_HB', 'heartbeats_2', 'DST_2_HB'],
    ['INGEST_63', 'ingest_63', 'DST_63'],
  ];
  for (const [name, role, target] of cases) {
    t.equal(ingestRole('INGEST', name), role, `${name}: ${role}`);
    const r = ingestRoleStream('DST', 'dst', role)!;
    t.equal(r.stream, target, `${role}: ${target} in the target`);
    t.same(r.partition.streams, ingestPartition('DST', 'dst', r.partition.partition, role.includes('_') ? 64 : 1).streams, 'its partition');
  }
  t.equal(ingestRoleStream('DST', 'dst', 'ingest_2')!.partition.subjects.heartbeats, 'dst.p2.heartbeats', "the target's subjects");
  t.equal(ingestRoleStream('DST', 'dst', 'heartbeats')!.partition.subjects.heartbeats, 'dst.heartbeats');
  for (const other of ['INGEST_DLQ', 'KV_INGEST_UPLOADS', 'OBJ_INGEST_ARTIFACTS', 'INGEST2']) t.equal(ingestRole('INGEST', other), null, `${other}: no ingest role`);
  for (const role of ['dead_letters', 'uploads', 'artifacts', 'ingest_', 'ingest_1234', 'heartbeats_x']) t.equal(ingestRoleStream('DST', 'dst', role), null, `${role}: no ingest stream`);
});
