// Help-text uploads (ingest kind `help`) into Postgres: one row per customer, software, code and
// language. Idempotent: the newest upload wins by (receive time, report id), so a redelivered batch
// changes nothing and an older upload applied late never overwrites a newer text. A help upload
// does not create a machine or an instance: it describes a software, not a running copy of it.
import type { Pool } from '../lib/infra/postgres.js';
import type { Report } from '../lib/contract/messages.js';
import type { HelpUpload } from '../lib/contract/schemas/ingest.js';
import { pgText } from '../lib/infra/postgres.js';

interface Row {
  customerId: string;
  software: string;
  code: number;
  lang: string;
  title: string;
  text: string;
  machine: string;
  at: number;
  reportId: string;
}

/** The newest text per key, in key order (a consistent lock order across workers). */
export function helpRows(reports: Report[]): Row[] {
  const rows = new Map<string, Row>();
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
  const col = <T>(f: (r: Row) => T) => rows.map(f);
  await pool.query(
    `INSERT INTO help_texts (customer_id, software, code, lang, title, text, machine, received_at, report_id)
     SELECT c, s, code, lang, title, text, machine, to_timestamp(at / 1000.0), rid
       FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::float8[], $9::uuid[])
            AS t(c, s, code, lang, title, text, machine, at, rid)
     ON CONFLICT (customer_id, software, code, lang) DO UPDATE
        SET title = EXCLUDED.title, text = EXCLUDED.text, machine = EXCLUDED.machine,
            received_at = EXCLUDED.received_at, report_id = EXCLUDED.report_id
      WHERE (EXCLUDED.received_at, EXCLUDED.report_id) > (help_texts.received_at, help_texts.report_id)`,
    [
      col((r) => r.customerId),
      col((r) => r.software),
      col((r) => r.code),
      col((r) => r.lang),
      col((r) => r.title),
      col((r) => r.text),
      col((r) => r.machine),
      col((r) => r.at),
      col((r) => r.reportId),
    ],
  );
  return rows.length;
}
