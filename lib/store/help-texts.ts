// Help texts per customer, software and diagnostic code (Postgres `help_texts`), as the api reads
// them; and which languages each code has, as the gateway's in-memory copy reads it
// (`helpCoverageCopy`, for gateway/help-coverage.ts).
import type { Pool } from '../infra/postgres.js';
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
