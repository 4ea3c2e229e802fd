// Help texts per customer, software and diagnostic code (Postgres `help_texts`): the api reads them,
// a worker stores the uploads (workers/help-texts.ts picks the newest text per key), and the
// gateway's in-memory copy reads which languages each code has (`helpCoverageCopy`, for
// gateway/help-coverage.ts).
import type { Pool, PoolClient } from '../infra/postgres.js';
import type { SyncedSource } from '../infra/synced-map.js';
import { databaseNow } from './clock.js';

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

// ---- the gateway's copy of which code has which languages (gateway/help-coverage.ts) ----------

/** One (customer, software, code) with a bit per language it has a text in (1 = de, 2 = en). */
export interface HelpCoverageRow {
  customer_id: string;
  software: string;
  code: number;
  mask: number;
  /** The newest of its texts' updated_at. */
  updated_at: Date;
}

const GROUPED = `SELECT customer_id, software, code,
                        bit_or(CASE lang WHEN 'de' THEN 1 ELSE 2 END)::int AS mask, max(updated_at) AS updated_at
                   FROM help_texts`;

/** Every code that has a help text. */
export async function allHelpCoverageRows(pool: Pool): Promise<HelpCoverageRow[]> {
  return (await pool.query<HelpCoverageRow>(`${GROUPED} GROUP BY customer_id, software, code`)).rows;
}

/** The codes with a text changed after `since`, each with every language it has (so the mask is whole again). */
export async function helpCoverageRowsChangedSince(pool: Pool, since: Date): Promise<HelpCoverageRow[]> {
  const r = await pool.query<HelpCoverageRow>(
    `${GROUPED} WHERE (customer_id, software, code) IN
                     (SELECT customer_id, software, code FROM help_texts WHERE updated_at > $1)
                   GROUP BY customer_id, software, code`,
    [since],
  );
  return r.rows;
}

/** What the gateway's SyncedMap of help-text coverage reads. */
export const helpCoverageCopy: SyncedSource<HelpCoverageRow> = { now: databaseNow, all: allHelpCoverageRows, changedSince: helpCoverageRowsChangedSince };
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
