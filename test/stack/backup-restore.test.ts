// `fleet backup` / `fleet restore` (lib/store/backup.ts): a running stack is backed up under ingest
// with a backlog in its stream, restored into a fresh stack (other database, stream and key names),
// and the restored one holds the same instances, lights, history and artifact bytes; every report
// acknowledged before the backup's cut-off is there once the target's workers ran, and the
// manifest promises nothing acknowledged after it.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testStack, post, get, drained, eventually, chRows, type TestStack } from '../helpers/stack.js';
import { upload } from '../helpers/http.js';
import { OwnNats } from '../helpers/nats-server.js';
import { OwnPostgres } from '../helpers/postgres-server.js';
import { OwnRedis } from '../helpers/redis-server.js';
import { headers as natsHeaders } from 'nats';
import { deadLetterStream, subjects } from '../../lib/contract/messages.js';
import { ROOT } from '../../deploy/service-process.js';
import { loadConfig } from '../../lib/infra/config.js';
import { redisKeys } from '../../lib/infra/redis.js';
import { backup, ingestRoleStream, readManifest, streamNames, type Manifest } from '../../lib/store/backup.js';
import { readStreamFile } from '../../lib/store/backup-streams.js';

const src = await testStack(t, 'bksrc');
// The target: a NATS, a Postgres and a Redis of its own (fresh servers; ports of this file's second
// stack, TARGET_*_PORT to move them), ClickHouse another database of the shared server; other stream,
// subject and key names than the source's. Nothing runs on it until it is restored.
const port = (name: string, dflt: number) => Number(process.env[name] ?? dflt);
const nats = new OwnNats(port('TARGET_NATS_PORT', 24662));
const pgServer = new OwnPostgres(port('TARGET_PG_PORT', 25872));
const redisServer = new OwnRedis(port('TARGET_REDIS_PORT', 26819));
const destroyServers = async () => {
  await nats.destroy();
  await pgServer.destroy();
  await redisServer.destroy();
};
let dst: TestStack;
try {
  await Promise.all([nats.start(), pgServer.start(), redisServer.start()]);
  dst = await testStack(t, 'bkdst', { natsUrl: nats.url, pgUrl: pgServer.url(), redisUrl: redisServer.url, gateway: false, worker: false, api: false });
} catch (e) {
  await destroyServers();
  throw e;
}
// After the stack's own teardown (tap runs teardowns in the order they were added).
t.teardown(destroyServers);
const dir = mkdtempSync(join(tmpdir(), 'fleet-backup-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const TABLES = ['heartbeats', 'diagnostics', 'status_history', 'light_events', 'host_metrics', 'ingest_rejections'];

function fleet(s: TestStack, ...args: string[]) {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8', timeout: 300_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

async function uploadArtifact(machine: string, data: Buffer): Promise<string> {
  const ing = (rest: string) => `${src.gatewayUrl}/api/ingest/${src.customer.slug}/${machine}/agent/${rest}`;
  const i = await post(ing('artifact-init'), src.token, { filename: `${machine}.bin`, size: data.length, sha256: sha256(data) });
  if (i.status !== 201) throw new Error(`init ${i.status} ${JSON.stringify(i.body)}`);
  for (let n = 0; n < i.body.chunks; n++) {
    const c = await upload('PUT', ing(`artifact-chunk/${i.body.upload_id}/${n}`), src.token, data.subarray(n * i.body.chunk_size, (n + 1) * i.body.chunk_size), {
      'Content-Type': 'application/octet-stream',
    });
    if (c.status !== 200 && c.status !== 201) throw new Error(`chunk ${n}: ${c.status} ${JSON.stringify(c.body)}`);
  }
  const c = await post(ing(`artifact-complete/${i.body.upload_id}`), src.token, '');
  if (c.status !== 200) throw new Error(`complete ${c.status} ${JSON.stringify(c.body)}`);
  return c.body.artifact_id as string;
}

async function download(apiUrl: string, path: string): Promise<Buffer> {
  const r = await fetch(`${apiUrl}${path}`, { headers: { Authorization: `Bearer ${src.token}` } });
  if (r.status !== 200) throw new Error(`download ${path}: ${r.status}`);
  return Buffer.from(await r.arrayBuffer());
}

const pgInstances = (s: TestStack) =>
  s.pool
    .query(
      `SELECT i.id, m.slug AS machine, i.software, il.light, il.light_seq, il.light_reason, i.status, i.version, i.last_heartbeat_at, i.last_warning_at
         FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id ORDER BY m.slug, i.software`,
    )
    .then((r) => r.rows);

const chCount = async (s: TestStack, table: string, where = '1') => Number((await chRows<{ n: string }>(s.ch, `SELECT count() AS n FROM ${table} FINAL WHERE ${where}`))[0]!.n);

// ---- the source: a fleet with every colour, history of every kind, artifacts
const seeds = ['seed-green', 'seed-red', 'seed-yellow', 'seed-grey', 'seed-warn', 'seed-metrics'];
const artifacts = new Map<string, Buffer>([
  ['seed-green', randomBytes(3 * 1024 * 1024 + 12_345)],
  ['seed-metrics', randomBytes(100_000)],
]);
const deadLetter = randomBytes(300);
let manifest: Manifest;
const acked: { n: number; at: number }[] = [];
let cutoffAt = 0;
let lanesCopiedAt = 0;
let backupCalledAt = 0;

t.test('back up a running stack under ingest, with a backlog in its stream', async (t) => {
  for (const m of seeds) t.equal((await src.report(m, 'heartbeat', { version: `v-${m}`, uptime_seconds: 10 })).status, 200);
  t.equal((await src.report('seed-red', 'status', { status: 'error', message: 'broken' })).status, 200);
  t.equal((await src.report('seed-yellow', 'status', { status: 'degraded', message: 'slow' })).status, 200);
  t.equal((await src.report('seed-grey', 'status', { status: 'stopped', message: 'off' })).status, 200);
  const accepted = (r: { status: number }) => r.status === 200 || r.status === 202;
  t.ok(accepted(await src.report('seed-warn', 'diagnostics', { items: [{ code: 7, severity: 1, message: 'disk 91 %' }, { code: 8, severity: 0, message: 'ok' }] })));
  const metrics = await src.report('seed-metrics', 'metrics', { items: [1, 2, 3].map((i) => ({ client_metric_id: `cm-${i}`, values: { cpu: i, mem: i * 10 } })) }, { software: 'logcollector' });
  t.ok(accepted(metrics), JSON.stringify(metrics.body));
  for (const [m, data] of artifacts) await uploadArtifact(m, data);
  // A dead letter (its bytes and headers as the worker writes them do not matter here: kept as they are).
  const h = natsHeaders();
  h.set('Fleet-Reason', 'a test dead letter');
  await src.nc.jetstream().publish(`${subjects(src.env.SUBJECT_PREFIX!).deadLetter}.${src.customer.slug}`, deadLetter, { headers: h });
  await drained(src);
  // Heartbeats that change nothing: kept in Redis, Postgres gets them up to PG_HEARTBEAT_INTERVAL_S later.
  for (let i = 0; i < 3; i++) {
    await new Promise((r) => setTimeout(r, 50));
    t.equal((await src.report('seed-green', 'heartbeat', { version: 'v-seed-green', uptime_seconds: 11 + i })).status, 200);
  }
  await drained(src);
  await eventually(async () => (await chCount(src, 'light_events')) >= seeds.length, 10_000, 'the light events in ClickHouse');

  // The workers stop; reports keep coming: a backlog waits in the stream.
  await Promise.all(src.procs.filter((p) => p.name === 'worker').map((p) => p.stop('SIGTERM')));
  let stop = false;
  let n = 0;
  const load = Promise.all(
    Array.from({ length: 4 }, async () => {
      while (!stop) {
        const i = n++;
        // Every fifth a status report: both lanes hold a backlog.
        const [kind, body] = i % 5 === 0 ? ['status', { status: 'running', message: `load-${i}` }] : ['heartbeat', { version: `load-${i}` }];
        const r = await src.report(`load-${i % 12}`, kind, body).catch(() => ({ status: 0 }));
        if (r.status === 200) acked.push({ n: i, at: Date.now() });
      }
    }),
  );
  await eventually(async () => acked.length >= 300, 30_000, '300 reports acknowledged');

  backupCalledAt = Date.now();
  t.teardown(() => void (stop = true));
  manifest = await backup(loadConfig({ ...process.env, ...src.env }), dir, {
    progress: async (step, detail) => {
      if (step === 'cutoff') cutoffAt = Date.now();
      // The lanes are copied: a worker starts and applies the backlog while the rest is taken.
      if (step === 'postgres') {
        lanesCopiedAt = Date.now();
        await src.startWorker();
      }
      t.comment(`${step}${detail ? `: ${detail}` : ''}`);
    },
  });
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await load;
  await drained(src);

  t.same(readManifest(dir), manifest, 'manifest.json says what backup() returned');
  const c = new Date(manifest.cutoff.at).getTime();
  t.ok(c >= backupCalledAt && c <= cutoffAt, 'the cut-off is the time the backup started at, before the lanes were read');
  t.ok(manifest.streams.ingest.messages > 0 && manifest.streams.heartbeats.messages > 0, `the backlog is in the backup (${manifest.streams.ingest.messages} + ${manifest.streams.heartbeats.messages} messages)`);
  for (const lane of ['ingest', 'heartbeats'] as const) {
    let max = 0;
    for await (const f of readStreamFile(join(dir, manifest.streams[lane].file))) max = Math.max(max, f.seq);
    t.ok(max <= manifest.cutoff.streams[lane], `${lane}: no message after the cut-off's sequence ${manifest.cutoff.streams[lane]} (last ${max})`);
  }
  t.ok(lanesCopiedAt > 0, 'the lanes were copied before Postgres was dumped');
  t.ok(acked.some((a) => a.at > Date.parse(manifest.finished_at)), 'reports were acknowledged after the backup too');
  t.same(Object.keys(manifest.clickhouse).sort(), [...TABLES].sort(), 'every history table');
  t.ok(manifest.postgres.rows.instances >= seeds.length, `${manifest.postgres.rows.instances} instances in the dump`);
  t.ok(manifest.streams.artifacts.messages >= 6, 'artifact chunks and their metadata');
  t.match(manifest.versions, { postgres: /^15/, clickhouse: /^18\.16/, nats: /^2\./ });
  t.ok(manifest.versions.postgres_migrations.length > 5 && manifest.versions.clickhouse_migrations.length > 3, 'the schema versions');
});

t.test('restore into a fresh stack: refused over data without --force; then the same state', async (t) => {
  const refused = fleet(dst, 'restore', dir);
  t.equal(refused.code, 1, 'the target holds its own customer: refused');
  t.match(refused.err, /not empty.*Postgres holds 1 customer.*--force/);

  // A damaged file is found before anything is written.
  const victim = join(dir, manifest.clickhouse.status_history!.file);
  const good = readFileSync(victim);
  writeFileSync(victim, Buffer.concat([good.subarray(0, good.length - 1), Buffer.from([good[good.length - 1]! ^ 1])]));
  const damaged = fleet(dst, 'restore', '--force', dir);
  writeFileSync(victim, good);
  t.equal(damaged.code, 1, 'a damaged backup is refused');
  t.match(damaged.err, /damaged: clickhouse\/status_history\.tsv\.gz/);
  t.equal(Number((await dst.pool.query('SELECT count(*) AS n FROM customers')).rows[0].n), 1, 'and the target left as it was');

  const started = Date.now();
  const r = fleet(dst, 'restore', '--force', dir);
  t.equal(r.code, 0, `restore --force: ${r.err}`);
  t.match(r.out, new RegExp(`restored backup ${manifest.backup_id}`));
  t.comment(`restore took ${Date.now() - started} ms; backup took ${manifest.duration_ms} ms (${JSON.stringify(manifest.timings)})`);

  // Before any worker ran: exactly what the manifest says.
  const rows: Record<string, number> = {};
  for (const table of Object.keys(manifest.postgres.rows)) rows[table] = Number((await dst.pool.query(`SELECT count(*) AS n FROM "${table}"`)).rows[0].n);
  t.same(rows, manifest.postgres.rows, 'Postgres: every table, the rows of the snapshot');
  for (const table of TABLES) t.equal(await chCount(dst, table), manifest.clickhouse[table]!.rows, `ClickHouse ${table}: ${manifest.clickhouse[table]!.rows} rows`);
  const jsm = await dst.nc.jetstreamManager();
  const names = {
    ...streamNames(dst.env.STREAM_NAME!),
    ingest: ingestRoleStream(dst.env.STREAM_NAME!, dst.env.SUBJECT_PREFIX!, 'ingest')!.stream,
    heartbeats: ingestRoleStream(dst.env.STREAM_NAME!, dst.env.SUBJECT_PREFIX!, 'heartbeats')!.stream,
  };
  t.same(Object.keys(manifest.streams).sort(), ['artifacts', 'dead_letters', 'heartbeats', 'ingest', 'uploads'], 'one partition: the streams of format 1');
  for (const role of ['ingest', 'heartbeats', 'dead_letters', 'uploads', 'artifacts'] as const) {
    t.equal((await jsm.streams.info(names[role])).state.messages, manifest.streams[role].messages, `stream ${role}: ${manifest.streams[role].messages} messages`);
  }

  const dl = await jsm.streams.getMessage(deadLetterStream(dst.env.STREAM_NAME!), { seq: (await jsm.streams.info(names.dead_letters)).state.first_seq });
  t.equal(dl.subject, `${subjects(dst.env.SUBJECT_PREFIX!).deadLetter}.${src.customer.slug}`, "the dead letter, on the target's subject");
  t.equal(dl.header.get('Fleet-Reason'), 'a test dead letter', 'with its headers');
  t.equal(sha256(Buffer.from(dl.data)), sha256(deadLetter), 'and its bytes');

  // A restore run again does nothing; one stopped half-way is finished by running it again.
  const again = fleet(dst, 'restore', dir);
  t.equal(again.code, 0, `restore again: ${again.err}`);
  t.match(again.out, /done by an earlier run/);
  await dst.redis.hdel(redisKeys(dst.env.REDIS_PREFIX!, dst.redis).restoreProgress(manifest.backup_id), 'clickhouse heartbeats', 'stream artifacts', 'stream ingest', 'finished');
  const finish = fleet(dst, 'restore', dir);
  t.equal(finish.code, 0, `restore after a half-done run: ${finish.err}`);
  t.match(finish.out, /3 steps/);
  t.equal(await chCount(dst, 'heartbeats'), manifest.clickhouse.heartbeats!.rows, 'heartbeats replaced, not doubled');
  t.equal((await jsm.streams.info(names.artifacts)).state.messages, manifest.streams.artifacts.messages, 'artifact chunks replaced, not doubled');
  t.equal((await jsm.streams.info(names.ingest)).state.messages, manifest.streams.ingest.messages, 'ingest messages replaced, not doubled');
});

t.test('the restored stack: same instances, lights, history and artifact bytes; every report acknowledged before the cut-off', async (t) => {
  await dst.startWorker();
  dst.apiUrl = (await dst.startApi()).url;
  await drained(dst);

  // Instances untouched since the backup: the same in every field the api shows, and as stored.
  const view = async (s: TestStack) => {
    const r = await get(`${s.apiUrl}/api/instances?limit=500`, src.token);
    t.equal(r.status, 200, `the source's token works on ${s === dst ? 'the restored' : 'the source'} stack`);
    return (r.body.items as any[]).filter((i) => i.machine.startsWith('seed-')).sort((a, b) => a.machine.localeCompare(b.machine));
  };
  const before = await view(src);
  const after = await view(dst);
  t.ok(after.length >= seeds.length, `${after.length} seed instances`);
  t.same(after, before, 'the seed instances, field by field');
  t.same(
    after.filter((i) => i.software === 'agent').map((i) => [i.machine, i.light]),
    [
      ['seed-green', 'green'],
      ['seed-grey', 'grey'],
      ['seed-metrics', 'green'],
      ['seed-red', 'red'],
      ['seed-warn', 'yellow'],
      ['seed-yellow', 'yellow'],
    ],
    'every colour came across',
  );
  const stored = async (s: TestStack) => (await pgInstances(s)).filter((i) => i.machine.startsWith('seed-'));
  const srcRows = await stored(src);
  const dstRows = await stored(dst);
  // The newest heartbeat of seed-green was in the source's Redis only; the restore wrote it to Postgres.
  const green = (rows: any[]) => rows.find((i) => i.machine === 'seed-green');
  const apiGreen = before.find((i) => i.machine === 'seed-green');
  t.ok(green(srcRows).last_heartbeat_at.getTime() < Date.parse(apiGreen.last_heartbeat_at), "seed-green's newest heartbeat was not yet in the source's Postgres");
  t.equal(green(dstRows).last_heartbeat_at.toISOString(), apiGreen.last_heartbeat_at, 'the restored Postgres has it');
  t.equal(after.find((i) => i.machine === 'seed-green').uptime_seconds, 13, 'with its uptime');
  const strip = (rows: any[]) => rows.map(({ last_heartbeat_at: _t, ...r }) => r);
  t.same(strip(dstRows), strip(srcRows), 'the stored lights (colour, sequence, reason), status, version');

  // History of the seed instances: the same rows, table by table.
  const seedIds = before.map((i) => `'${i.id}'`).join(',');
  const seedMachines = [...new Set(before.map((i) => `'${i.machine_id}'`))].join(',');
  for (const [table, where] of [
    ['heartbeats', `instance_id IN (${seedIds})`],
    ['diagnostics', `instance_id IN (${seedIds})`],
    ['status_history', `instance_id IN (${seedIds})`],
    ['light_events', `instance_id IN (${seedIds})`],
    ['host_metrics', `machine_id IN (${seedMachines})`],
  ] as const) {
    const a = await chCount(src, table, where);
    t.ok(a > 0, `${table}: the source has seed rows`);
    t.equal(await chCount(dst, table, where), a, `${table}: ${a} seed rows`);
  }

  // Every load report acknowledged before the cut-off was applied on the restored stack.
  const c = Date.parse(manifest.cutoff.at);
  const versions = new Set(
    (
      await chRows<{ v: string }>(
        dst.ch,
        `SELECT DISTINCT version AS v FROM heartbeats WHERE version LIKE 'load-%' UNION ALL SELECT DISTINCT message AS v FROM status_history WHERE message LIKE 'load-%'`,
      )
    ).map((r) => r.v),
  );
  const promised = acked.filter((a) => a.at < c);
  t.ok(promised.length >= 300, `${promised.length} reports acknowledged before the cut-off`);
  const missing = promised.filter((a) => !versions.has(`load-${a.n}`));
  t.same(missing, [], 'each of them is in the restored history');
  const later = acked.filter((a) => a.at > Date.parse(manifest.finished_at));
  t.ok(later.every((a) => !versions.has(`load-${a.n}`)), `none of the ${later.length} acknowledged after the backup finished`);
  t.comment(`${acked.filter((a) => a.at >= c && versions.has(`load-${a.n}`)).length} reports acknowledged after the cut-off happen to be in the dumps (not promised)`);

  // Load instances: the newest heartbeat each had at the cut-off is no older on the restored stack.
  const loadAfter = new Map((await pgInstances(dst)).filter((i) => i.machine.startsWith('load-')).map((i) => [i.machine, i]));
  for (const m of new Set(promised.map((a) => `load-${a.n % 12}`))) t.ok(loadAfter.get(m), `${m} restored`);

  // Artifacts: byte for byte.
  for (const [m, data] of artifacts) {
    const mid = before.find((i) => i.machine === m)!.machine_id;
    const list = await get(`${dst.apiUrl}/api/machines/${mid}/artifacts`, src.token);
    t.equal(list.status, 200);
    t.equal(list.body.items.length, 1, `${m}: its artifact listed`);
    const bytes = await download(dst.apiUrl, list.body.items[0].download);
    t.equal(sha256(bytes), sha256(data), `${m}: ${data.length} bytes, the same SHA-256`);
    t.equal(sha256(await download(src.apiUrl, list.body.items[0].download)), sha256(data), `${m}: the source's copy too`);
  }

  // Ingest works on the restored stack, with the source's token.
  const gw = await dst.startGateway();
  const r = await post(`${gw.url}/api/ingest/${src.customer.slug}/seed-red/agent/heartbeat`, src.token, {});
  t.equal(r.status, 200, 'the restored stack takes reports');
});

t.test('fleet backup from the command line: of the restored stack; a folder that holds a backup is refused', async (t) => {
  const dir2 = join(dir, 'again');
  const b = fleet(dst, 'backup', dir2);
  t.equal(b.code, 0, `fleet backup: ${b.err}`);
  const m = readManifest(dir2);
  t.match(b.out, new RegExp(`backup ${m.backup_id} in ${dir2}: cut-off ${m.cutoff.at}`));
  t.equal(m.source.stream_name, dst.env.STREAM_NAME, "the target's names");
  t.ok(m.postgres.rows.instances >= manifest.postgres.rows.instances, `${m.postgres.rows.instances} instances`);
  t.equal(m.streams.artifacts.messages, manifest.streams.artifacts.messages, 'the same artifact chunks and metadata');
  t.equal(m.streams.dead_letters.messages, 1, 'the dead letter');
  const again = fleet(dst, 'backup', dir2);
  t.equal(again.code, 1);
  t.match(again.err, /holds a backup already/);
});
