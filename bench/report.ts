// Renders a bench result into the table of bench/README.md (between the results markers).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { parseSettings } from '../lib/infra/config.js';

const START = '<!-- results:start -->';
const END = '<!-- results:end -->';

type R = Record<string, any>;

/** Which run `r` is, and the file that keeps it (`source`, relative to the repository). */
export function runLine(r: R, source?: string): string {
  const id = r.run_id ? `${r.mode} run ${r.run_id}` : `${r.mode} run without an id (written before runs had one)`;
  const commit = r.git_commit ? `, commit ${String(r.git_commit).slice(0, 12)}${r.git_dirty ? ' with uncommitted changes' : ''}` : '';
  return `${id}, started ${r.started_at}${commit}${source ? `; every figure below: \`${source}\`` : ''}`;
}

export function renderTable(r: R, source?: string): string {
  const t = r.throughput ?? {};
  const row = (name: string, key: string) =>
    t[key] ? `| ${name} | ${t[key].requests_per_s.toLocaleString('en')} | ${t[key].p50_ms} | ${t[key].p99_ms} | ${t[key].non_2xx + t[key].socket_errors} |` : null;
  const lines = [
    `Run: ${runLine(r, source)}.`,
    `Machine: ${r.machine.cores} cores (${r.machine.cpu}), ${r.machine.memory_gib} GiB, Node ${r.machine.node}.`,
    `Load: ${r.load.customers} customers with one token each, ${r.load.machines.toLocaleString('en')} machines; wrk ${r.load.wrk.threads} thread, ${r.load.wrk.connections} connections, ${r.load.wrk.seconds} s after a warm-up.`,
    '',
    '| Throughput | requests/s | p50 ms | p99 ms | errors |',
    '|---|---:|---:|---:|---:|',
    row('Ceiling: bare uWS, answers {"ok":true}', 'ceiling_bare_uws'),
    row('Usual alternative: Fastify + token SELECT + INSERT per request', 'alternative_fastify_pg'),
    row('Gateway: heartbeat (durable JetStream ack)', 'gateway_heartbeat'),
    row('Gateway: diagnostics, 10 items', 'gateway_diagnostics'),
    row('Gateway: status, 4 KiB snapshot', 'gateway_status'),
    row('Gateway: host metrics, 100 records (new ids)', 'gateway_metrics'),
    row('Gateway: batch ingest, 100 heartbeats per request (requests/s)', 'gateway_batch'),
  ].filter((x) => x !== null) as string[];
  if (r.ratios) {
    lines.push('', '| Ratio (heartbeat) | value | target |', '|---|---:|---:|');
    lines.push(`| gateway / ceiling | ${r.ratios.gateway_vs_ceiling ?? 'n/a'} | ≥ 0.5 |`);
    lines.push(`| gateway / usual alternative | ${r.ratios.gateway_vs_alternative ?? 'n/a'} | ≥ 5 |`);
    if (r.ratios.batch_vs_single_reports != null) lines.push(`| reports/s: batches of 100 / single requests | ${r.ratios.batch_vs_single_reports} | ≥ 5 |`);
  }
  if (r.e2e) {
    const runs: R[] = Array.isArray(r.e2e) ? r.e2e : [r.e2e];
    lines.push(
      '',
      '| End to end (200 → row queryable in ClickHouse), one gateway, one worker | ' + runs.map((e) => `${e.offered_rate.toLocaleString('en')}/s offered`).join(' | ') + ' | target |',
      '|---|' + runs.map(() => '---:|').join('') + '---:|',
      '| generator processes | ' + runs.map((e) => e.generators ?? 1).join(' | ') + ' | |',
      '| achieved rate (share of offered) | ' + runs.map((e) => `${e.achieved_rate.toLocaleString('en')} (${Math.round((e.achieved_rate / e.offered_rate) * 100)} %)`).join(' | ') + ' | ≥ 95 % |',
      '| lag p50 | ' + runs.map((e) => `${e.lag_ms.p50} ms`).join(' | ') + ' | |',
      '| lag p99 | ' + runs.map((e) => `${e.lag_ms.p99} ms`).join(' | ') + ' | ≤ 1000 ms |',
      '| lag max | ' + runs.map((e) => `${e.lag_ms.max} ms`).join(' | ') + ' | |',
      '| failed requests | ' + runs.map((e) => e.failed).join(' | ') + ' | 0 |',
      // Runs before `late` was counted (2026-11-27) had only `missing`, which then also held the late ones.
      '| acknowledged, stored after the window (late) | ' + runs.map((e) => e.late ?? 'not counted').join(' | ') + ' | 0 |',
      '| acknowledged, never stored (lost) | ' + runs.map((e) => (e.late === undefined ? `${e.missing} (late or lost)` : e.missing)).join(' | ') + ' | 0 |',
    );
  }
  if (r.drain) {
    const d = r.drain;
    lines.push(
      '',
      `| Worker drain (${d.one_worker.reports.toLocaleString('en')} steady-state heartbeats queued, ${d.instances.toLocaleString('en')} instances) | reports/s | Postgres rows per 100k | target |`,
      '|---|---:|---:|---:|',
      `| one worker | ${d.one_worker.reports_per_s.toLocaleString('en')} | ${d.one_worker.pg_rows_per_100k ?? 'n/a'} | ≥ 150,000 reports/s |`,
      `| two workers | ${d.two_workers.reports_per_s.toLocaleString('en')} | ${d.two_workers.pg_rows_per_100k ?? 'n/a'} | ≥ 1.4 × one worker (${d.two_vs_one ?? 'n/a'} ×) |`,
    );
  }
  if (r.cost) {
    // The scenarios (objects); `pg_heartbeat_interval_s` beside them is a setting, not a column.
    const names = Object.keys(r.cost).filter((n) => typeof r.cost[n] === 'object' && r.cost[n] !== null);
    const procs = [...new Set(names.flatMap((n) => Object.keys(r.cost[n].cpu_s_per_100k ?? {})))].filter((p) => p !== 'total');
    lines.push(
      '',
      '| CPU-seconds per 100,000 reports (steady state; paced, but heartbeat_saturation: wrk 1 thread × 64 connections) | ' + names.join(' | ') + ' |',
      '|---|' + names.map(() => '---:|').join(''),
      '| offered / achieved reports/s | ' + names.map((n) => `${r.cost[n].offered_rate} / ${r.cost[n].achieved_rate}`).join(' | ') + ' |',
      ...procs.map((p) => `| ${p} | ` + names.map((n) => r.cost[n].cpu_s_per_100k?.[p] ?? '').join(' | ') + ' |'),
      '| **all processes** | ' + names.map((n) => `**${r.cost[n].cpu_s_per_100k?.total}**`).join(' | ') + ' |',
      '| Postgres rows written per 100,000 | ' + names.map((n) => r.cost[n].pg_rows_per_100k.toLocaleString('en')).join(' | ') + ' |',
    );
    const sat = r.cost.heartbeat_saturation;
    if (sat?.cpu_us_per_heartbeat !== undefined) {
      lines.push('', `CPU of the whole pipeline per heartbeat at saturation: ${sat.cpu_us_per_heartbeat} µs (${sat.achieved_rate.toLocaleString('en')} heartbeats/s, p99 ${sat.latency_p99_ms} ms); target ≤ 34 µs. Paced (${r.cost.heartbeat?.offered_rate}/s): ${Math.round((r.cost.heartbeat?.cpu_s_per_100k?.total ?? 0) * 100) / 10} µs.`);
    }
    const hb = r.cost.heartbeat?.pg_rows_per_100k;
    const before = r.cost.heartbeat_pg_every_report?.pg_rows_per_100k;
    if (hb !== undefined && before) lines.push('', `Postgres rows per 100,000 steady heartbeats: ${hb.toLocaleString('en')}, ${((hb / before) * 100).toFixed(2)} % of writing every heartbeat (${before.toLocaleString('en')}); target ≤ 1 %.`);
    const interval = Number(r.cost.pg_heartbeat_interval_s);
    if (interval > 0)
      lines.push(
        '',
        `At one heartbeat a minute an instance that changes nothing is written once per PG_HEARTBEAT_INTERVAL_S (${interval.toLocaleString('en')} s), whatever its timeout: ${(6000 / interval).toFixed(2)} % of its heartbeats; target ≤ 1 %.`,
      );
  }
  if (r.peak_rss_mb && Object.keys(r.peak_rss_mb).length) {
    lines.push('', '| Peak RSS | MB |', '|---|---:|');
    for (const [k, v] of Object.entries(r.peak_rss_mb)) lines.push(`| ${k.replace(/_mb$/, '').replace(/_/g, ' ')} | ${v} |`);
  }
  if (r.soak && !r.soak.error) {
    const k = r.soak;
    lines.push(
      '',
      `| Soak: ${k.seconds} s, ${k.customers} customers, valid + boundary + invalid reports (seed ${k.seed}) | value | target |`,
      '|---|---:|---:|',
      `| requests (offered / achieved rate) | ${k.requests.toLocaleString('en')} (${k.offered_rate} / ${k.achieved_rate} per s) | |`,
      `| answers | ${Object.entries(k.answers).map(([s, n]) => `${s}×${n}`).join(', ')} | no 5xx |`,
      `| acknowledged, stored exactly once (rows inserted, counted by a view that never merges) | ${k.acknowledged.toLocaleString('en')}, ${k.stored_exactly_once.toLocaleString('en')} | all |`,
      `| missing / doubled / dead letters | ${k.missing} / ${k.doubled} / ${k.dead_letters} | 0 / 0 / 0 |`,
    );
  }
  if (r.read_path?.endpoints) {
    const rp = r.read_path;
    lines.push(
      '',
      `| Read path: one customer, ${Number(rp.instances).toLocaleString('en')} instances, ${rp.readers} readers per endpoint, ingest ${rp.ingest_rate ?? 'n/a'}/s | p50 ms | p99 ms | errors | target p99 |`,
      '|---|---:|---:|---:|---:|',
      ...Object.entries(rp.endpoints).map(([name, e]: [string, any]) => `| ${name} | ${e.p50_ms} | ${e.p99_ms} | ${e.errors} | ≤ 100 |`),
    );
  }
  if (r.footprint) {
    const f = r.footprint;
    lines.push(
      '',
      `Storage after the run (${f.instances.toLocaleString('en')} instances): Redis ${f.redis_bytes_per_instance} B per instance (all of this Redis), Postgres ${f.postgres_bytes_per_instance} B per instance (machines + instances with indexes), ClickHouse compressed bytes per row: ` +
        Object.entries(f.clickhouse ?? {}).map(([t, v]: [string, any]) => `${t} ${v.compressed_bytes_per_row}`).join(', ') + '.',
    );
  }
  if (r.whitelist?.scenarios) {
    const w = r.whitelist;
    const rows = Object.entries(w.scenarios).filter(([, v]: [string, any]) => v.rules !== undefined);
    lines.push(
      '',
      `| Whitelist matching per diagnostic item (bench/whitelist.ts, in process, ${w.cores} cores, load average ${w.load_avg_1m}; ${w.repeat} timed calls per message after ${w.warmup}) | rules | message chars | wall min µs | wall p50 µs | wall max µs | CPU µs | work units (per n + rules) | compile ms (CPU) | target |`,
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...rows.map(
        ([name, v]: [string, any]) =>
          `| ${name}: ${v.what} | ${v.rules.toLocaleString('en')} | ${v.message_chars.toLocaleString('en')} | ${v.us_per_item_min} | ${v.us_per_item_p50} | ${v.us_per_item_max} | ${v.cpu_us_per_item} | ${v.work_per_item_max.toLocaleString('en')} (${v.work_per_unit_max}) | ${v.compile_ms} (${v.compile_cpu_ms}) | ${name === 'legacy_fallback' || name === 'suffix_chain_16' ? '' : `≤ ${w.target_us_per_item} µs`} |`,
      ),
    );
    const ir = w.scenarios.issue_report;
    if (ir) lines.push('', `${ir.what}: ${ir.ms_p50} ms wall (p50), ${ir.ms_max} ms (max), ${ir.cpu_ms} ms CPU per report.`);
  }
  for (const extra of ['traffic_light', 'traffic_light_waiting', 'commands']) {
    if (r[extra]) lines.push('', `${extra.replace(/_/g, ' ')}:`, '', '```json', JSON.stringify(r[extra], null, 2), '```');
  }
  return lines.join('\n');
}

export function writeReport(readme: string, r: R, source?: string): void {
  const table = `${START}\n${renderTable(r, source)}\n${END}`;
  let text = existsSync(readme) ? readFileSync(readme, 'utf8') : `# Benchmarks\n\n${START}\n${END}\n`;
  if (text.includes(START) && text.includes(END)) {
    text = text.slice(0, text.indexOf(START)) + table + text.slice(text.indexOf(END) + END.length);
  } else text += `\n${table}\n`;
  writeFileSync(readme, text);
}

const CAP_START = '<!-- capacity:start -->';
const CAP_END = '<!-- capacity:end -->';

/** The report mix per device the capacity model assumes (reports per second per device). */
export const MIX = { heartbeat: 1 / 60, diagnostics: 1 / 600, status: 1 / 1800 };
const FLEETS = [100_000, 1_000_000, 10_000_000];
/** A Node process (gateway, worker, api) uses one core; plan replicas at 60 % of it. */
const NODE_CORE = 0.6;

/**
 * The capacity model of docs/operations.md, computed from a full bench run: CPU-seconds per
 * 100,000 reports of each kind and process (`cost`), storage per instance and row (`footprint`),
 * peak RSS, and PG_HEARTBEAT_INTERVAL_S.
 */
export function renderCapacity(r: R, pgIntervalS = 240, source = 'bench/results/latest-full.json'): string | null {
  const cost = r.cost;
  const fp = r.footprint;
  if (!cost?.heartbeat || !cost?.diagnostics || !cost?.status || !fp) return null;
  const procs = Object.keys(cost.heartbeat.cpu_s_per_100k).filter((p) => p !== 'total');
  const fmt = (n: number, d = 1) => (n >= 100 ? Math.round(n).toLocaleString('en') : n.toFixed(d));
  const kinds = ['heartbeat', 'diagnostics', 'status'] as const;
  const lines = [
    `Inputs: \`${source}\`, the ${runLine(r)} (${r.machine.cores} cores, ${r.machine.cpu}); mix per device: one heartbeat a minute, one diagnostics report (10 items) every 10 minutes, one status report (4 KiB snapshot) every 30 minutes; one instance per device; PG_HEARTBEAT_INTERVAL_S=${pgIntervalS}.`,
    '',
    '| per process | ' + kinds.map((k) => `CPU-s per 100k ${k}`).join(' | ') + ' | one core carries (mix, reports/s) |',
    '|---|' + kinds.map(() => '---:|').join('') + '---:|',
  ];
  const mixRate = MIX.heartbeat + MIX.diagnostics + MIX.status;
  for (const p of procs) {
    const perMixReport = kinds.reduce((a, k) => a + (MIX[k] / mixRate) * (cost[k].cpu_s_per_100k[p] ?? 0), 0) / 100_000;
    lines.push(`| ${p} | ` + kinds.map((k) => fmt(cost[k].cpu_s_per_100k[p] ?? 0, 2)).join(' | ') + ` | ${perMixReport > 0 ? fmt(1 / perMixReport) : '∞'} |`);
  }
  lines.push('', '| devices | ' + FLEETS.map((n) => n.toLocaleString('en')).join(' | ') + ' |', '|---|' + FLEETS.map(() => '---:|').join(''));
  const row = (name: string, f: (n: number) => string) => lines.push(`| ${name} | ` + FLEETS.map(f).join(' | ') + ' |');
  const rate = (n: number) => n * mixRate;
  row('reports/s (heartbeat + diagnostics + status)', (n) => fmt(rate(n)));
  const cores = (n: number, p: string) => kinds.reduce((a, k) => a + (n * MIX[k] * (cost[k].cpu_s_per_100k[p] ?? 0)) / 100_000, 0);
  for (const p of procs) {
    const node = p === 'gateway' || p === 'worker';
    row(`${p}: cores${node ? ' (replicas at 60 %)' : ''}`, (n) => (node ? `${fmt(cores(n, p))} (${Math.max(1, Math.ceil(cores(n, p) / NODE_CORE))})` : fmt(cores(n, p))));
  }
  row('**all processes: cores**', (n) => `**${fmt(procs.reduce((a, p) => a + cores(n, p), 0))}**`);
  const rss = r.peak_rss_mb ?? {};
  const gwRss = Math.max(...Object.entries(rss).filter(([k]) => k.startsWith('gateway')).map(([, v]) => Number(v)), 0);
  const wkRss = Math.max(...Object.entries(rss).filter(([k]) => k.startsWith('worker')).map(([, v]) => Number(v)), 0);
  const reps = (n: number, p: string) => Math.max(1, Math.ceil(cores(n, p) / NODE_CORE));
  row('gateway + worker memory (replicas × peak RSS)', (n) => `${fmt((reps(n, 'gateway') * gwRss + reps(n, 'worker') * wkRss) / 1024, 1)} GiB`);
  row('Redis memory (upper bound: all of the bench\'s Redis per instance)', (n) => `${fmt((n * fp.redis_bytes_per_instance) / 1024 ** 3, 1)} GiB`);
  row('Postgres: machines + instances on disk', (n) => `${fmt((n * fp.postgres_bytes_per_instance) / 1024 ** 3, 1)} GiB`);
  const statusRows = (cost.status.pg_rows_per_100k ?? 0) / 100_000;
  const diagRows = (cost.diagnostics.pg_rows_per_100k ?? 0) / 100_000;
  // A periodic write of an unchanged heartbeat writes what a written heartbeat does (instance and machine rows).
  const hbRows = (cost.heartbeat_pg_every_report?.pg_rows_per_100k ?? 100_000) / 100_000;
  row('Postgres rows written/s (heartbeat flush + status + diagnostics)', (n) => fmt((n / pgIntervalS) * hbRows + n * MIX.status * statusRows + n * MIX.diagnostics * diagRows));
  row('… if every heartbeat were written (before)', (n) => fmt(n * MIX.heartbeat * hbRows + n * MIX.status * statusRows + n * MIX.diagnostics * diagRows));
  const chb = (t: string) => fp.clickhouse?.[t]?.compressed_bytes_per_row ?? 0;
  const chRowsS = (n: number) => n * (MIX.heartbeat + MIX.diagnostics * 10 + MIX.status);
  row('ClickHouse rows/s', (n) => fmt(chRowsS(n)));
  // Bytes a day per table, and what the tables hold once retention runs (docs/operations.md "Data
  // retention"): the default retention of each, and up to a partition more (a partition goes whole:
  // a day of heartbeats, a month of diagnostics and status).
  const perDay = (n: number) => ({
    heartbeats: 86_400 * n * MIX.heartbeat * chb('heartbeats'),
    diagnostics: 86_400 * n * MIX.diagnostics * 10 * chb('diagnostics'),
    status_history: 86_400 * n * MIX.status * chb('status_history'),
  });
  const sum = (o: Record<string, number>) => Object.values(o).reduce((a, b) => a + b, 0);
  row('ClickHouse compressed per day', (n) => `${fmt(sum(perDay(n)) / 1024 ** 3, 1)} GiB`);
  const defaults = parseSettings({});
  const keep = { heartbeats: defaults.RETENTION_HEARTBEATS_DAYS, diagnostics: defaults.RETENTION_DIAGNOSTICS_DAYS, status_history: defaults.RETENTION_STATUS_HISTORY_DAYS };
  const partitionDays = { heartbeats: 1, diagnostics: 31, status_history: 31 };
  const held = (n: number, extra: boolean) =>
    Object.entries(perDay(n)).reduce((a, [t, b]) => a + b * (keep[t as keyof typeof keep] + (extra ? partitionDays[t as keyof typeof keep] : 0)), 0) / 1024 ** 4;
  row(
    `ClickHouse held at the default retention (heartbeats ${keep.heartbeats} d, diagnostics ${keep.diagnostics} d, status ${keep.status_history} d; up to a partition more)`,
    (n) => `${fmt(held(n, false), 1)}–${fmt(held(n, true), 1)} TiB`,
  );
  row('largest partition: a month of diagnostics, a day of heartbeats (ClickHouse drops at most `max_partition_size_to_drop`, 50 GB, unless raised)', (n) => {
    const d = perDay(n);
    return `${fmt((d.diagnostics * 31) / 1024 ** 3, 1)} GiB, ${fmt(d.heartbeats / 1024 ** 3, 1)} GiB`;
  });
  return lines.join('\n');
}

/** Rewrites the capacity tables of docs/operations.md from a full run. */
export function writeCapacity(doc: string, r: R, pgIntervalS?: number, source?: string): void {
  const table = renderCapacity(r, pgIntervalS, source);
  if (!table || !existsSync(doc)) return;
  const text = readFileSync(doc, 'utf8');
  if (!text.includes(CAP_START) || !text.includes(CAP_END)) return;
  writeFileSync(doc, text.slice(0, text.indexOf(CAP_START)) + `${CAP_START}\n${table}\n${CAP_END}` + text.slice(text.indexOf(CAP_END) + CAP_END.length));
}
