// Renders a bench result into the table of bench/README.md (between the results markers).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

const START = '<!-- results:start -->';
const END = '<!-- results:end -->';

type R = Record<string, any>;

export function renderTable(r: R): string {
  const t = r.throughput ?? {};
  const row = (name: string, key: string) =>
    t[key] ? `| ${name} | ${t[key].requests_per_s.toLocaleString('en')} | ${t[key].p50_ms} | ${t[key].p99_ms} | ${t[key].non_2xx + t[key].socket_errors} |` : null;
  const lines = [
    `Run: ${r.mode} mode, ${r.started_at}, ${r.machine.cores} cores (${r.machine.cpu}), ${r.machine.memory_gib} GiB, Node ${r.machine.node}.`,
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
  ].filter((x) => x !== null) as string[];
  if (r.ratios) {
    lines.push('', '| Ratio (heartbeat) | value | target |', '|---|---:|---:|');
    lines.push(`| gateway / ceiling | ${r.ratios.gateway_vs_ceiling ?? 'n/a'} | ≥ 0.5 |`);
    lines.push(`| gateway / usual alternative | ${r.ratios.gateway_vs_alternative ?? 'n/a'} | ≥ 5 |`);
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
      '| acknowledged but not found | ' + runs.map((e) => e.missing).join(' | ') + ' | 0 |',
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
    const names = Object.keys(r.cost);
    const procs = [...new Set(names.flatMap((n) => Object.keys(r.cost[n].cpu_s_per_100k ?? {})))].filter((p) => p !== 'total');
    lines.push(
      '',
      '| CPU-seconds per 100,000 reports (paced, steady state) | ' + names.join(' | ') + ' |',
      '|---|' + names.map(() => '---:|').join(''),
      '| offered / achieved reports/s | ' + names.map((n) => `${r.cost[n].offered_rate} / ${r.cost[n].achieved_rate}`).join(' | ') + ' |',
      ...procs.map((p) => `| ${p} | ` + names.map((n) => r.cost[n].cpu_s_per_100k?.[p] ?? '').join(' | ') + ' |'),
      '| **all processes** | ' + names.map((n) => `**${r.cost[n].cpu_s_per_100k?.total}**`).join(' | ') + ' |',
      '| Postgres rows written per 100,000 | ' + names.map((n) => r.cost[n].pg_rows_per_100k.toLocaleString('en')).join(' | ') + ' |',
    );
    const hb = r.cost.heartbeat?.pg_rows_per_100k;
    const before = r.cost.heartbeat_pg_every_report?.pg_rows_per_100k;
    if (hb !== undefined && before) lines.push('', `Postgres rows per 100,000 steady heartbeats: ${hb.toLocaleString('en')}, ${((hb / before) * 100).toFixed(2)} % of writing every heartbeat (${before.toLocaleString('en')}); target ≤ 1 %.`);
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
      `| acknowledged, stored exactly once (FINAL) | ${k.acknowledged.toLocaleString('en')}, ${k.stored_exactly_once.toLocaleString('en')} | all |`,
      `| missing / doubled / dead letters | ${k.missing} / ${k.doubled} / ${k.dead_letters} | 0 / 0 / 0 |`,
    );
  }
  for (const extra of ['traffic_light', 'commands']) {
    if (r[extra]) lines.push('', `${extra.replace('_', ' ')}:`, '', '```json', JSON.stringify(r[extra], null, 2), '```');
  }
  return lines.join('\n');
}

export function writeReport(readme: string, r: R): void {
  const table = `${START}\n${renderTable(r)}\n${END}`;
  let text = existsSync(readme) ? readFileSync(readme, 'utf8') : `# Benchmarks\n\n${START}\n${END}\n`;
  if (text.includes(START) && text.includes(END)) {
    text = text.slice(0, text.indexOf(START)) + table + text.slice(text.indexOf(END) + END.length);
  } else text += `\n${table}\n`;
  writeFileSync(readme, text);
}
