// What the onboarding checklist of a customer is made of, read from Postgres: its first API token,
// the report milestones the workers record (`onboarding_milestones`), a teammate (an invitation or a
// second membership) and help texts uploaded; and the workers' writes of those milestones.
import type { Pool, PoolClient } from '../infra/postgres.js';

export interface OnboardingFacts {
  /** When the customer's first API token was created; null: none yet. */
  firstTokenAt: Date | null;
  /** Report milestones (heartbeat, diagnostics, status, help) and when each was first reached. */
  milestones: Map<string, Date>;
  /** When a teammate came: the first invitation sent (whatever became of it) or the second membership; null: none yet. */
  teammateAt: Date | null;
  teammate: boolean;
}

export async function onboardingFacts(pool: Pool, customerId: string): Promise<OnboardingFacts> {
  const [tok, ms, mates] = await Promise.all([
    pool.query<{ at: Date | null }>('SELECT min(created_at) AS at FROM api_tokens WHERE customer_id = $1', [customerId]),
    pool.query<{ step: string; done_at: Date }>('SELECT step, done_at FROM onboarding_milestones WHERE customer_id = $1', [customerId]),
    // A teammate: an invitation sent (whatever became of it), or any membership after the customer's first one.
    pool.query<{ at: Date }>(
      `SELECT min(at) AS at FROM (
             SELECT min(created_at) AS at FROM invitations WHERE customer_id = $1
             UNION ALL
             (SELECT created_at FROM memberships WHERE customer_id = $1 ORDER BY created_at, user_id OFFSET 1 LIMIT 1)
           ) x HAVING min(at) IS NOT NULL`,
      [customerId],
    ),
  ]);
  return {
    firstTokenAt: tok.rows[0]!.at,
    milestones: new Map(ms.rows.map((r) => [r.step, r.done_at])),
    teammate: mates.rows.length > 0,
    teammateAt: mates.rows[0]?.at ?? null,
  };
}

/**
 * When help texts were first uploaded: the `help` report milestone, or the help-text table when it
 * exists (it belongs to the diagnostics suite; this works with and without it, and whatever its
 * time column is called).
 */
export async function helpTextsUploaded(pool: Pool, customerId: string, milestone: Date | null): Promise<{ done: boolean; at: Date | null }> {
  const cols = await pool.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'help_texts'`,
  );
  const names = new Set(cols.rows.map((c) => c.column_name));
  if (!names.has('customer_id')) return { done: milestone !== null, at: milestone };
  const timeCol = ['created_at', 'updated_at', 'stored_at', 'received_at'].find((c) => names.has(c));
  try {
    const r = await pool.query<{ n: number; at: Date | null }>(
      `SELECT count(*)::int AS n, ${timeCol ? `min(${timeCol})` : 'NULL::timestamptz'} AS at FROM (SELECT * FROM help_texts WHERE customer_id = $1 LIMIT 100000) h`,
      [customerId],
    );
    const row = r.rows[0]!;
    if (row.n === 0) return { done: milestone !== null, at: milestone };
    const at = [row.at, milestone].filter((x): x is Date => x instanceof Date).sort((a, b) => a.getTime() - b.getTime())[0] ?? null;
    return { done: true, at };
  } catch {
    return { done: milestone !== null, at: milestone };
  }
}

/** The first report of a kind (`step`) of a customer, as one worker saw it. */
export interface MilestoneRow {
  customerId: string;
  step: string;
  /** Receive time of the report (ms since the epoch). */
  atMs: number;
}

/**
 * Records report milestones: a step not reached yet gets its time, one reached later than this
 * report moves back to it (a batch applied late or twice changes nothing wrong). Give the rows in
 * (customer, step) order, the lock order across workers.
 */
export async function recordReportMilestones(db: Pool | PoolClient, rows: MilestoneRow[]): Promise<void> {
  await db.query(
    `INSERT INTO onboarding_milestones (customer_id, step, done_at)
     SELECT c, k, to_timestamp(at / 1000.0) FROM unnest($1::uuid[], $2::text[], $3::float8[]) AS t(c, k, at)
     ON CONFLICT (customer_id, step) DO UPDATE SET done_at = EXCLUDED.done_at
      WHERE EXCLUDED.done_at < onboarding_milestones.done_at`,
    [rows.map((r) => r.customerId), rows.map((r) => r.step), rows.map((r) => r.atMs)],
  );
}
