// Help texts per customer, software and diagnostic code (Postgres `help_texts`): the api reads them,
// a worker stores the uploads (workers/help-texts.ts picks the newest text per key).
import type { Pool, PoolClient } from '../infra/postgres.js';

export interface HelpText {
  lang: 'de' | 'en';
  title: string;
  text: string;
  updated_at: Date;
}

/** The help texts of one code of one software, in every language there is (de before en). */
export async function listHelpTexts(pool: Pool, customerId: string, software: string, code: number): Promise<HelpText[]> {
  const r = await pool.query<HelpText>(`SELECT lang, title, text, updated_at FROM help_texts WHERE customer_id = $1 AND software = $2 AND code = $3 ORDER BY lang`, [
    customerId,
    software,
    code,
  ]);
  return r.rows;
}

/** One uploaded text (report kind `help`), its title and text through pgText. */
export interface HelpTextUpload {
  customerId: string;
  software: string;
  code: number;
  lang: string;
  title: string;
  text: string;
  /** The machine that uploaded it. */
  machine: string;
  /** Receive time of its report (ms since the epoch). */
  at: number;
  reportId: string;
}

/**
 * Stores uploaded texts, one row per customer, software, code and language: the newest by (receive
 * time, report id) wins, so a redelivered upload changes nothing and an older one applied late never
 * overwrites a newer text. Give at most one row per key, in key order (the lock order across workers).
 */
export async function upsertHelpTexts(db: Pool | PoolClient, rows: HelpTextUpload[]): Promise<void> {
  const col = <T>(f: (r: HelpTextUpload) => T) => rows.map(f);
  await db.query(
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
}
