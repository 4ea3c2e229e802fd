// Help-text uploads (ingest kind `help`) into Postgres: one row per customer, software, code and
// language. Idempotent: the newest upload wins by (receive time, report id), so a redelivered batch
// changes nothing and an older upload applied late never overwrites a newer text. A help upload
// does not create a machine or an instance: it describes a software, not a running copy of it.
// The statement is lib/store/help-texts.ts's (`upsertHelpTexts`).
import type { Pool } from '../lib/infra/postgres.js';
import type { Report } from '../lib/contract/messages.js';
import type { HelpUpload } from '../lib/contract/schemas/ingest.js';
import { pgText } from '../lib/infra/postgres.js';
import { upsertHelpTexts, type HelpTextUpload } from '../lib/store/help-texts.js';

/** The newest text per key, in key order (a consistent lock order across workers). */
export function helpRows(reports: Report[]): HelpTextUpload[] {
  const rows = new Map<string, HelpTextUpload>();
  for (const r of reports) {
    if (r.kind !== 'help') continue;
    for (const it of (r.body as HelpUpload).items) {
      const k = `${r.customerId}|${r.software}|${it.code}|${it.lang}`;
      const prev = rows.get(k);
      // Within one report the later item wins; across reports the newer report.
      if (prev && (prev.at > r.receivedAt || (prev.at === r.receivedAt && prev.reportId > r.id))) continue;
      rows.set(k, { customerId: r.customerId, software: r.software, code: it.code, lang: it.lang, title: pgText(it.title ?? '')!, text: pgText(it.text)!, machine: r.machine, at: r.receivedAt, reportId: r.id });
    }
  }
  return [...rows.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v);
}

export async function applyHelpTexts(pool: Pool, reports: Report[]): Promise<number> {
  const rows = helpRows(reports);
  if (rows.length === 0) return 0;
  await upsertHelpTexts(pool, rows);
  return rows.length;
}
