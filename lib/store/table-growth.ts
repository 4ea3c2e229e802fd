// Planner statistics that keep up with a fast-growing fleet. Autovacuum analyses a table once
// 10 % of it changed, but looks only every `autovacuum_naptime` (a minute by default), and not at
// all on a table that has just been created. A fleet's first minutes (or any onboarding of many
// machines at once) are exactly when machines and instances grow from nothing to 100,000 rows;
// with the statistics of an almost empty table the planner hashed every live instance on its
// software name (one bucket: every instance runs the same agent) for each batch of 500 reports:
// 7-13 s per statement, and 100,000 new instances took a minute to apply. The workers count the
// rows their upserts insert and analyse the table themselves after MIN_ROWS new rows and a fifth
// of the table since the last time (docs/operations.md "Postgres settings").
import type { Pool } from '../infra/postgres.js';
import type { Logger } from '../infra/log.js';

export type GrowingTable = 'machines' | 'instances';

export class TableGrowth {
  private readonly since = new Map<GrowingTable, number>();
  /** Rows the table held at its last analysis here (Postgres' estimate). */
  private readonly size = new Map<GrowingTable, number>();
  /** One analysis at a time per table; the two tables' never wait for each other. */
  private readonly running = new Map<GrowingTable, Promise<void>>();
  private off = false;

  constructor(
    private readonly pool: Pool,
    private readonly log: Logger,
    private readonly opts: { minRows: number; share: number } = { minRows: 5000, share: 0.2 },
    /** Told of every analysis (the table, how long it took): metrics, tests. */
    private readonly onAnalysed: (table: GrowingTable, ms: number) => void = () => {},
  ) {}

  /**
   * `n` rows were inserted into `table` (committed or about to be). Analysed in the background, one
   * analysis per table at a time. (A single one for both starved instances: machines grow first
   * and came due at every batch, so instances waited until 60,000 rows in the bench.)
   */
  note(table: GrowingTable, n: number): void {
    if (n <= 0 || this.off) return;
    const since = (this.since.get(table) ?? 0) + n;
    this.since.set(table, since);
    if (this.running.has(table) || since < Math.max(this.opts.minRows, this.opts.share * (this.size.get(table) ?? 0))) return;
    this.since.set(table, 0);
    this.running.set(table, this.analyse(table).finally(() => this.running.delete(table)));
  }

  /** Waits for the analyses in progress (shutdown, tests). */
  async settled(): Promise<void> {
    await Promise.all(this.running.values());
  }

  private async analyse(table: GrowingTable): Promise<void> {
    const t0 = Date.now();
    try {
      // Only the table's owner (or a member of its role) may analyse it, and Postgres does not
      // refuse anyone else: it skips the table with a warning. So ask first, once.
      const own = await this.pool.query<{ ok: boolean }>("SELECT pg_has_role(relowner, 'USAGE') AS ok FROM pg_class WHERE oid = $1::regclass", [table]);
      if (!own.rows[0]?.ok) {
        this.off = true;
        this.log.warn({ table }, 'cannot analyse (not the owner of the tables): statistics are left to autovacuum');
        return;
      }
      // `table` is one of two fixed names, never input.
      await this.pool.query(`ANALYZE ${table === 'machines' ? 'machines' : 'instances'}`);
      const r = await this.pool.query<{ n: number }>('SELECT reltuples::float8 AS n FROM pg_class WHERE oid = $1::regclass', [table]);
      this.size.set(table, Math.max(0, r.rows[0]?.n ?? 0));
      this.onAnalysed(table, Date.now() - t0);
      this.log.info({ table, rows: this.size.get(table), ms: Date.now() - t0 }, 'table analysed after fast growth');
    } catch (e) {
      // Postgres away or refusing: the next growth tries again.
      this.log.warn({ err: e, table }, 'analysis after fast growth failed');
    }
  }
}
