// Backup and restore of a partitioned stack (lib/store/backup.ts, docs/operations.md "Backup and
// restore"): a source with STREAM_PARTITIONS=3, a backlog in both streams of every partition and in
// the unpartitioned streams left from before a change of STREAM_PARTITIONS, is backed up with a role
// per ingest stream; restored into a target with STREAM_PARTITIONS=2 (other stream, subject and key
// names), each stream goes to the target's stream of the same partition and lane (partition 2 made
// there), and the target's workers apply every report acknowledged before the cut-off, once.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testStack, drained, eventually, post } from '../helpers/stack.js';
import { storedOnce } from '../helpers/stored-once.js';
import { encodeBatch, encodeReport, ingestPartitions, partitionOf, subjects } from '../../lib/contract/messages.js';
import { ensureStreams, existingIngestStreams } from '../../lib/infra/nats.js';
import { loadConfig } from '../../lib/infra/config.js';
import { backup, ingestRoleStream, restore } from '../../lib/store/backup.js';

const src = await testStack(t, 'bkpsrc', { worker: false, api: false, env: { STREAM_PARTITIONS: '3' } });
const dst = await testStack(t, 'bkpdst', { gateway: false, worker: false, api: false, env: { STREAM_PARTITIONS: '2' } });
const dir = mkdtempSync(join(tmpdir(), 'fleet-backup-partitions-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const srcJsm = await src.nc.jetstreamManager();
const dstJsm = await dst.nc.jetstreamManager();
const SRC = src.env.STREAM_NAME!;
const DST = dst.env.STREAM_NAME!;
const INGEST_ROLES = ['heartbeats', 'heartbeats_0', 'heartbeats_1', 'heartbeats_2', 'ingest', 'ingest_0', 'ingest_1', 'ingest_2'];

/** The markers (heartbeat version, status message) of every report the source acknowledged. */
const heartbeats: string[] = [];
const statuses: string[] = [];

t.test('a backlog in every partition of the source, and in its unpartitioned streams of before', async (t) => {
  for (let p = 0; p < 3; p++) {
    const machines: string[] = [];
    for (let j = 0; machines.length < 4; j++) if (partitionOf(src.customer.id, `bp${p}-${j}`, 3) === p) machines.push(`bp${p}-${j}`);
    for (const m of machines) {
      t.equal((await src.report(m, 'heartbeat', { version: `bkp-${m}` })).status, 200);
      t.equal((await src.report(m, 'status', { status: 'running', message: `bkp-${m}` })).status, 200);
      heartbeats.push(`bkp-${m}`);
      statuses.push(`bkp-${m}`);
    }
  }
  // The streams of a STREAM_PARTITIONS=1 past, one report still queued in each.
  await ensureStreams(srcJsm, { streamName: SRC, subjectPrefix: src.env.SUBJECT_PREFIX!, streamMaxBytes: 64 * 1024 * 1024, streamReplicas: 1, streamPartitions: 1 });
  const old = subjects(src.env.SUBJECT_PREFIX!);
  const wire = (kind: 'heartbeat' | 'status', body: unknown) =>
    encodeBatch([
      encodeReport(
        { id: randomUUID(), kind, customerId: src.customer.id, customer: src.customer.slug, machine: 'bkp-old', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now() },
        Buffer.from(JSON.stringify(body)),
      ),
    ]);
  await src.nc.jetstream().publish(old.heartbeats, wire('heartbeat', { version: 'bkp-old' }));
  await src.nc.jetstream().publish(old.reports, wire('status', { status: 'running', message: 'bkp-old' }));
  heartbeats.push('bkp-old');
  statuses.push('bkp-old');
  const streams = await existingIngestStreams(srcJsm, SRC);
  t.equal(streams.length, 8, 'three partitions and the old pair: eight ingest streams');
  for (const name of streams) t.ok((await srcJsm.streams.info(name)).state.messages > 0, `${name} holds a backlog`);
});

t.test('the backup has a role per ingest stream, each with its backlog up to the cut-off', async (t) => {
  const m = await backup(loadConfig({ ...process.env, ...src.env }), dir);
  t.equal(m.format, 2);
  t.same(Object.keys(m.cutoff.streams).sort(), INGEST_ROLES, 'a cut-off sequence per ingest stream');
  t.same(Object.keys(m.streams).sort(), [...INGEST_ROLES, 'artifacts', 'dead_letters', 'uploads'].sort(), 'and a file each');
  for (const role of INGEST_ROLES) {
    const e = m.streams[role]!;
    const info = await srcJsm.streams.info(e.source_name);
    t.equal(e.source_name, ingestRoleStream(SRC, src.env.SUBJECT_PREFIX!, role)!.stream, `${role}: from ${e.source_name}`);
    t.equal(e.messages, info.state.messages, `${role}: its ${info.state.messages} messages`);
    t.equal(e.last_seq, m.cutoff.streams[role], `${role}: up to its cut-off`);
  }
  const r = await restore(loadConfig({ ...process.env, ...dst.env }), dir, { force: true });
  t.same(Object.keys(r.messages).sort(), [...INGEST_ROLES, 'artifacts', 'dead_letters', 'uploads'].sort(), 'every stream restored');

  // Each into the target's stream of the same partition and lane; partition 2, which the target's
  // STREAM_PARTITIONS=2 does not have, and the unpartitioned pair made there.
  t.same(await existingIngestStreams(dstJsm, DST), [DST, `${DST}_0`, `${DST}_0_HB`, `${DST}_1`, `${DST}_1_HB`, `${DST}_2`, `${DST}_2_HB`, `${DST}_HB`].sort());
  for (const role of INGEST_ROLES) {
    const target = ingestRoleStream(DST, dst.env.SUBJECT_PREFIX!, role)!;
    const info = await dstJsm.streams.info(target.stream);
    t.equal(info.state.messages, m.streams[role]!.messages, `${target.stream}: the ${m.streams[role]!.messages} messages of ${role}`);
    const first = await dstJsm.streams.getMessage(target.stream, { seq: info.state.first_seq });
    t.ok(Object.values(target.partition.subjects).includes(first.subject), `${target.stream}: on its own subject (${first.subject})`);
  }
  // Partition 2's streams take their share of the target's limits.
  const p2 = ingestPartitions(DST, dst.env.SUBJECT_PREFIX!, 3)[2]!;
  t.equal((await dstJsm.streams.info(p2.streams.reports)).config.max_bytes, Math.floor(Number(dst.env.STREAM_MAX_BYTES) / 2), "partition 2: half the target's STREAM_MAX_BYTES, as each of its own");
});

t.test("the target's workers apply every report the source acknowledged before the backup, once; its gateway takes new ones", async (t) => {
  await dst.startWorker();
  // Every ingest stream that exists, beyond the target's own partitions (drained() knows those).
  await eventually(async () => (await Promise.all((await existingIngestStreams(dstJsm, DST)).map(async (n) => (await dstJsm.streams.info(n)).state.messages))).every((n) => n === 0), 60_000, 'every ingest stream of the target drained');
  await drained(dst, 60_000);
  const hb = await storedOnce(dst.ch, 'heartbeats', 'version', heartbeats);
  t.same(hb.missing, [], `all ${heartbeats.length} heartbeats stored`);
  t.same(hb.split, [], 'none as two reports');
  const st = await storedOnce(dst.ch, 'status_history', 'message', statuses);
  t.same(st.missing, [], `all ${statuses.length} status reports stored`);
  t.same(st.split, [], 'none as two reports');
  const rows = await dst.pool.query<{ version: string }>(`SELECT i.version FROM instances i JOIN machines m ON m.id = i.machine_id WHERE m.slug LIKE 'bkp%' OR m.slug LIKE 'bp%'`);
  t.same(rows.rows.map((r) => r.version).sort(), [...heartbeats].sort(), 'an instance each, with its heartbeat');

  const gw = await dst.startGateway();
  const r = await post(`${gw.url}/api/ingest/${src.customer.slug}/bkp-after/agent/heartbeat`, src.token, { version: 'bkp-after' });
  t.equal(r.status, 200, "the restored stack takes reports with the source's token");
  await eventually(async () => (await storedOnce(dst.ch, 'heartbeats', 'version', ['bkp-after'])).missing.length === 0, 30_000, 'and applies them');
});
