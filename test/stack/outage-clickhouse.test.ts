// ClickHouse refusing inserts into a table of the worker's, found from outside: a table detached
// (code 60) and too many parts (code 252), both on ClickHouse 18.16, whose error texts carry no
// `(ERROR_NAME)` (so @clickhouse/client builds no ClickHouseError and the code is read from the
// text). Reports acknowledged during the fault wait, the worker says so, none is dead-lettered,
// and afterwards each is stored exactly once (test/helpers/outage.ts).
import t from 'tap';
import { Readable } from 'node:stream';
import { testStack } from '../helpers/stack.js';
import { freePort } from '../helpers/nats-server.js';
import { outageTest } from '../helpers/outage.js';

const s = await testStack(t, 'outch', { worker: false, api: false, env: { WORKER_RETRY_MAX_MS: '1000' } });
const port = await freePort();
const worker = { proc: await s.startWorker({ WORKER_HTTP_PORT: String(port) }), url: `http://127.0.0.1:${port}` };
const db = `t_${s.id}`;
const ch = async (query: string) => {
  await s.ch.command({ query });
};

t.test('a detached table: the reports wait until it is attached again, then are stored once', async (t) => {
  await outageTest(t, s, worker, 'detached', 6, {
    dependency: 'clickhouse',
    reason: /ClickHouse error 60 UNKNOWN_TABLE/,
    start: () => ch(`DETACH TABLE ${db}.heartbeats`),
    end: async () => {
      await ch(`ATTACH TABLE ${db}.heartbeats`);
      // An attached table is a new table object: its merges run again.
      await ch(`SYSTEM STOP MERGES ${db}.heartbeats`);
    },
  });
});

t.test('too many parts: the reports wait until the parts are gone, then are stored once', async (t) => {
  // 18.16 refuses inserts into a table whose partition with the most active parts has
  // parts_to_throw_insert (300) of them. Filler rows of 2001-01-01 (a partition of their own,
  // so ending the fault drops them without merging the reports' parts), one part per row.
  await ch(`SYSTEM STOP MERGES ${db}.heartbeats`);
  const filler = async (rows: number) => {
    const tsv = Array.from({ length: rows }, (_, i) => `2001-01-01 00:00:00\t${i}\tfiller-${i}\n`).join('');
    await s.ch.insert({
      table: 'heartbeats',
      values: Readable.from([Buffer.from(tsv)], { objectMode: false }),
      format: 'TabSeparated',
      columns: ['received_at', 'received_ms', 'report_id'],
      clickhouse_settings: { max_insert_block_size: '1', min_insert_block_size_rows: '1', min_insert_block_size_bytes: '1' },
    });
  };
  const parts = async () =>
    Number(((await (await s.ch.query({ query: `SELECT count() AS n FROM system.parts WHERE database = '${db}' AND table = 'heartbeats' AND active AND partition = '20010101'`, format: 'JSONEachRow' })).json()) as { n: string }[])[0]!.n);
  await outageTest(t, s, worker, 'parts', 6, {
    dependency: 'clickhouse',
    reason: /ClickHouse error 252 TOO_MANY_PARTS/,
    start: async () => {
      // 149 parts in one insert (below parts_to_delay_insert, 150, no insert is slowed down), then
      // the rest in parallel: each insert past 150 parts is delayed up to a second, not in sequence.
      await filler(149);
      const left = 300 - (await parts());
      await Promise.all(Array.from({ length: Math.max(0, left) }, () => filler(1).catch(() => {})));
      t.ok((await parts()) >= 300, 'the partition has 300 parts');
    },
    end: () => ch(`ALTER TABLE ${db}.heartbeats DROP PARTITION 20010101`),
  });
});
