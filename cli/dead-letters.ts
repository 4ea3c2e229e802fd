// `fleet dead-letters list|show|replay`: the dead-letter stream for an operator, without the nats
// CLI. The work is lib/store/dead-letters.ts's (the api's admin routes use the same); this file connects
// to NATS from the usual environment and writes what it found, as text or (--json) as the api does.
import { connect, type NatsConnection } from 'nats';
import { DeadLetters, DeadLetterInputError, checkCustomer, parseSince, type DeadLetterFilter } from '../lib/store/dead-letters.js';
import type { DeadLetterDetailT, DeadLetterListT, ReplayAnswerT } from '../lib/contract/schemas/dead-letters.js';

export class CliError extends Error {}

export interface FilterOptions {
  customer?: string;
  since?: string;
  reason?: string;
}

/** The filters of the command line, checked (a bad one: CliError with what is wrong). */
export function filterOf(o: FilterOptions, now = Date.now()): DeadLetterFilter {
  try {
    return {
      customer: o.customer === undefined ? undefined : checkCustomer(o.customer),
      since: o.since === undefined ? undefined : parseSince(o.since, now),
      reason: o.reason === undefined || o.reason === '' ? undefined : o.reason,
    };
  } catch (e) {
    if (e instanceof DeadLetterInputError) throw new CliError(`--${e.message}`);
    throw e;
  }
}

/** A whole number option (`what` names it in the error). */
export function intOption(v: string | undefined, what: string, min: number, max: number): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) throw new CliError(`${what} must be a whole number from ${min} to ${max}`);
  return Number(v);
}

/** Runs `fn` with the deployment's dead letters (NATS from the environment), then closes the connection. */
export async function withDeadLetters<T>(cfg: { natsUrl: string; streamName: string; subjectPrefix: string }, fn: (d: DeadLetters) => Promise<T>): Promise<T> {
  let nc: NatsConnection;
  try {
    nc = await connect({ servers: cfg.natsUrl.split(','), name: 'fleet-cli', timeout: 10_000 });
  } catch (e) {
    throw new CliError(`NATS at ${cfg.natsUrl} is not reachable (${(e as Error).message}); set NATS_URL`);
  }
  try {
    return await fn(new DeadLetters(nc, cfg));
  } finally {
    await nc.close();
  }
}

const dash = (v: string | number | null | undefined) => (v === null || v === undefined || v === '' ? '-' : String(v));
/** One line of text: no tabs or line breaks inside a column. */
const cell = (v: string | number | null | undefined) => dash(v).replace(/[\t\r\n]+/g, ' ');

export function formatList(l: DeadLetterListT): { out: string; err: string } {
  const lines = l.items.map((d) =>
    [
      d.seq,
      d.dead_lettered_at,
      cell(d.customer),
      cell(d.kind),
      d.machine || d.software ? `${dash(d.machine)}/${dash(d.software)}` : '-',
      cell(d.failure),
      d.content === 'reports' ? cell(d.report_ids[0]) + (d.reports > 1 ? ` (+${d.reports - 1})` : '') : d.content,
      cell(d.error),
    ]
      .map(String)
      .join('\t'),
  );
  const more = l.next_seq === null ? '' : `; more may follow: --after ${l.next_seq}`;
  return { out: lines.map((x) => `${x}\n`).join(''), err: `${l.items.length} dead letter${l.items.length === 1 ? '' : 's'} (${l.scanned} examined)${more}\n` };
}

export function formatShow(d: DeadLetterDetailT): string {
  const x = d.dead_letter;
  const out: string[] = [
    `dead letter ${x.seq}, dead-lettered ${x.dead_lettered_at}, ${x.size} bytes, ${x.content}`,
    `customer     ${dash(x.customer)}${x.customer_id ? ` (${x.customer_id})` : ''}`,
    `report       ${dash(x.kind)} ${dash(x.machine)}/${dash(x.software)}`,
    `failure      ${dash(x.failure)} (${dash(x.error_kind)}) after ${dash(x.deliveries)} deliveries: ${dash(x.error)}`,
    `queued as    ${dash(x.subject)} #${dash(x.stream_seq)}`,
    'headers:',
    ...Object.entries(d.headers).map(([k, v]) => `  ${k}: ${v}`),
  ];
  d.reports.forEach((r, i) => {
    out.push('', `report ${i + 1} of ${x.reports}: ${dash(r.id)} ${dash(r.kind)} ${dash(r.customer)}/${dash(r.machine)}/${dash(r.software)}, received ${dash(r.received_at)}${r.idempotency_key ? `, Idempotency-Key ${r.idempotency_key}` : ''}`);
    out.push(`body (${r.body.bytes} bytes${r.body.truncated ? ', shortened' : ''}):`, r.body.text);
  });
  if (x.reports > d.reports.length) out.push('', `(${x.reports - d.reports.length} more reports not shown)`);
  if (d.raw) out.push('', `content (${d.raw.format}, ${d.raw.bytes} bytes${d.raw.truncated ? ', shortened' : ''}):`, d.raw.text);
  return `${out.join('\n')}\n`;
}

export function formatReplay(r: ReplayAnswerT): { out: string; err: string } {
  const lines = r.items.map((i) => [i.seq, i.result, cell(i.customer), cell(i.kind), i.report_ids.length ? i.report_ids.join(',') : '-', cell(i.detail)].join('\t'));
  const s = r.summary;
  const summary = r.dry_run
    ? `dry run: ${s.selected} selected, ${s.would_replay} would be replayed, ${s.skipped} would be skipped (undecodable), ${s.gone} gone; nothing changed`
    : `${s.selected} selected: ${s.replayed} replayed, ${s.skipped} skipped (undecodable), ${s.failed} failed, ${s.gone} gone`;
  const more = r.next_seq === null ? '' : `; the selection stopped early: run again (with --after ${r.next_seq} to go past what was skipped)`;
  return { out: lines.map((x) => `${x}\n`).join(''), err: `${summary}${more}\n` };
}
