// Help texts per customer, software and diagnostic code (Postgres `help_texts`), as the api reads them.
import type { Pool } from '../infra/postgres.js';

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
