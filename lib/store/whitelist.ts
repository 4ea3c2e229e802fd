// Diagnostics whitelist rules of a customer (Postgres `whitelist_rules`) as the api manages them
// (docs/decisions.md "Diagnostics whitelist"). A deletion is soft (deleted_at) so that the workers'
// polled copies (workers/whitelist-cache.ts, reading through `whitelistCopy`) learn of it in their
// next delta.
import type { Pool } from '../infra/postgres.js';
import type { SyncedSource } from '../infra/synced-map.js';
import type { RuleRow } from '../domain/whitelist.js';
import { databaseNow } from './clock.js';

/** A rule as the api answers it. */
export interface WhitelistRuleRow {
  id: string;
  machine: string | null;
  software: string | null;
  code_from: number;
  code_to: number;
  message: string | null;
  note: string;
  enabled: boolean;
  created_at: Date;
  updated_at: Date;
}

/** What a request sets of a rule (checked by the api). */
export interface WhitelistRuleFields {
  machine: string | null;
  software: string | null;
  codeFrom: number;
  codeTo: number;
  message: string | null;
  note: string;
  enabled: boolean;
}

const COLS = `id, machine_pattern AS machine, software_pattern AS software, code_from, code_to, message_pattern AS message, note, enabled,
              created_at, updated_at`;

const values = (f: WhitelistRuleFields) => [f.machine, f.software, f.codeFrom, f.codeTo, f.message, f.note, f.enabled];

/** The customer's rules, oldest first (deleted ones left out). */
export async function listWhitelistRules(pool: Pool, customerId: string): Promise<WhitelistRuleRow[]> {
  return (await pool.query<WhitelistRuleRow>(`SELECT ${COLS} FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`, [customerId])).rows;
}

/** One of the customer's rules; null when it has none of that id (or it was deleted). */
export async function getWhitelistRule(pool: Pool, customerId: string, id: string): Promise<WhitelistRuleRow | null> {
  const r = await pool.query<WhitelistRuleRow>(`SELECT ${COLS} FROM whitelist_rules WHERE customer_id = $1 AND id = $2 AND deleted_at IS NULL`, [customerId, id]);
  return r.rows[0] ?? null;
}

/** The customer's enabled rules with a message pattern, as the workers compile them. */
export async function enabledMessageRules(pool: Pool, customerId: string): Promise<RuleRow[]> {
  const r = await pool.query<RuleRow>(
    `SELECT id, customer_id, machine_pattern, software_pattern, code_from, code_to, message_pattern, enabled, created_at
         FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL AND enabled AND message_pattern IS NOT NULL`,
    [customerId],
  );
  return r.rows;
}

/**
 * A new rule, unless the customer holds `max` rules already (null then). The count and the insert
 * are one statement: concurrent creates cannot pass the limit by much (the limit bounds matching
 * work, it is not a billing quota).
 */
export async function createWhitelistRule(pool: Pool, customerId: string, f: WhitelistRuleFields, createdBy: string | null, max: number): Promise<WhitelistRuleRow | null> {
  const r = await pool.query<WhitelistRuleRow>(
    `INSERT INTO whitelist_rules (customer_id, machine_pattern, software_pattern, code_from, code_to, message_pattern, note, enabled, created_by)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
          WHERE (SELECT count(*) FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL) < $10
         RETURNING ${COLS}`,
    [customerId, ...values(f), createdBy, max],
  );
  return r.rows[0] ?? null;
}

/** Replaces one of the customer's rules; null when it has none of that id. */
export async function updateWhitelistRule(pool: Pool, customerId: string, id: string, f: WhitelistRuleFields): Promise<WhitelistRuleRow | null> {
  const r = await pool.query<WhitelistRuleRow>(
    `UPDATE whitelist_rules
            SET machine_pattern = $3, software_pattern = $4, code_from = $5, code_to = $6, message_pattern = $7, note = $8, enabled = $9
          WHERE customer_id = $1 AND id = $2 AND deleted_at IS NULL
         RETURNING ${COLS}`,
    [customerId, id, ...values(f)],
  );
  return r.rows[0] ?? null;
}

/** Deletes (softly) one of the customer's rules; false when it has none of that id. */
export async function deleteWhitelistRule(pool: Pool, customerId: string, id: string): Promise<boolean> {
  const r = await pool.query(`UPDATE whitelist_rules SET deleted_at = now() WHERE customer_id = $1 AND id = $2 AND deleted_at IS NULL`, [customerId, id]);
  return !!r.rowCount;
}

// ---- the workers' copy of every rule (workers/whitelist-cache.ts) ----------------------------

/** A rule as the workers' copy holds it: as they compile it, with its deletion and version. */
export interface WhitelistCopyRow extends RuleRow {
  deleted_at: Date | null;
  updated_at: Date;
}

const COPY = `SELECT id, customer_id, machine_pattern, software_pattern, code_from, code_to, message_pattern,
                       enabled, created_at, updated_at, deleted_at FROM whitelist_rules`;

/** Every rule not deleted (disabled ones too). */
export async function allWhitelistCopyRows(pool: Pool): Promise<WhitelistCopyRow[]> {
  return (await pool.query<WhitelistCopyRow>(`${COPY} WHERE deleted_at IS NULL`)).rows;
}

/** The rules changed after `since`, deleted ones too: the copy must learn that a rule went away. */
export async function whitelistCopyRowsChangedSince(pool: Pool, since: Date): Promise<WhitelistCopyRow[]> {
  return (await pool.query<WhitelistCopyRow>(`${COPY} WHERE updated_at > $1`, [since])).rows;
}

/** What the workers' SyncedMap of whitelist rules reads. */
export const whitelistCopy: SyncedSource<WhitelistCopyRow> = { now: databaseNow, all: allWhitelistCopyRows, changedSince: whitelistCopyRowsChangedSince };
