// The capacity model's storage rows (bench/report.ts `renderCapacity`, docs/operations.md "Capacity
// model"): bytes a day follow from the bench's compressed bytes per row and the report mix, what
// the tables hold follows from each table's default retention (and up to a partition more: a
// partition goes whole), and the size of the largest partition is what decides whether
// ClickHouse's max_partition_size_to_drop lets the retention job drop it.
import t from 'tap';
import { renderCapacity, MIX } from '../../bench/report.js';
import { parseSettings } from '../../lib/infra/config.js';

const perProcess = { gateway: 1, worker: 1, total: 2 };
const run = {
  mode: 'full',
  run_id: 'x',
  started_at: '2026-11-27T00:00:00Z',
  machine: { cores: 2, cpu: 'test' },
  peak_rss_mb: {},
  cost: {
    heartbeat: { cpu_s_per_100k: perProcess },
    diagnostics: { cpu_s_per_100k: perProcess },
    status: { cpu_s_per_100k: perProcess },
  },
  footprint: {
    redis_bytes_per_instance: 1000,
    postgres_bytes_per_instance: 1000,
    clickhouse: { heartbeats: { compressed_bytes_per_row: 40 }, diagnostics: { compressed_bytes_per_row: 10 }, status_history: { compressed_bytes_per_row: 100 } },
  },
};

const cells = (text: string, name: string): string[] => {
  const line = text.split('\n').find((l) => l.startsWith(`| ${name}`));
  if (!line) throw new Error(`no row ${name}`);
  return line.split('|').slice(2, -1).map((c) => c.trim());
};

t.test('storage per day, held at the default retention, and the largest partition', async (t) => {
  const text = renderCapacity(run)!;
  t.ok(text, 'rendered');
  const d = parseSettings({});
  const n = 1_000_000;
  const day = { hb: 86_400 * n * MIX.heartbeat * 40, diag: 86_400 * n * MIX.diagnostics * 10 * 10, st: 86_400 * n * MIX.status * 100 };
  t.equal(cells(text, 'ClickHouse compressed per day')[1], `${(day.hb + day.diag + day.st) / 1024 ** 3 >= 100 ? Math.round((day.hb + day.diag + day.st) / 1024 ** 3) : ((day.hb + day.diag + day.st) / 1024 ** 3).toFixed(1)} GiB`);
  // Heartbeats are partitioned by day (a day more at most), diagnostics and status by month.
  const held = (extra: boolean) =>
    (day.hb * (d.RETENTION_HEARTBEATS_DAYS + (extra ? 1 : 0)) + day.diag * (d.RETENTION_DIAGNOSTICS_DAYS + (extra ? 31 : 0)) + day.st * (d.RETENTION_STATUS_HISTORY_DAYS + (extra ? 31 : 0))) / 1024 ** 4;
  const heldCell = cells(text, 'ClickHouse held at the default retention')[1]!;
  const [lo, hi] = heldCell.replace(' TiB', '').split('–').map(Number);
  t.ok(Math.abs(lo! - held(false)) < 0.06, `at least the retention: ${heldCell} vs ${held(false).toFixed(2)}`);
  t.ok(Math.abs(hi! - held(true)) < 0.06, `at most a partition more: ${heldCell} vs ${held(true).toFixed(2)}`);
  t.ok(hi! > lo!, 'a range');
  const largest = cells(text, 'largest partition')[0]!;
  const diagMonth = ((day.diag / 10) * 31) / 1024 ** 3;
  t.equal(largest, `${diagMonth.toFixed(1)} GiB, ${(day.hb / 10 / 1024 ** 3).toFixed(1)} GiB`, '100,000 devices: a month of diagnostics, a day of heartbeats');
});
