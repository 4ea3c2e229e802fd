// "Does this id belong to this customer?" asked in one place: every read and write of an instance
// or machine by id goes through it, so an id of another customer is a 404 everywhere alike (never a
// 403, which would tell that the id exists).
import type { Pool, PoolClient } from '../lib/infra/postgres.js';
import { notFound } from '../lib/contract/errors.js';
import { chStr } from '../lib/infra/clickhouse-sql.js';

type Db = Pool | PoolClient;

/** The instance's columns (`*` of instances) when it is the customer's; 404 otherwise. */
export async function ownedInstance<T extends object = { id: string }>(db: Db, customerId: string, id: string, columns = 'id'): Promise<T> {
  const r = await db.query<T>(`SELECT ${columns} FROM instances WHERE customer_id = $1 AND id = $2`, [customerId, id]);
  if (!r.rows[0]) throw notFound('no such instance');
  return r.rows[0];
}

/** 404 unless the machine is the customer's. */
export async function ownedMachine(db: Db, customerId: string, id: string): Promise<void> {
  const r = await db.query('SELECT 1 FROM machines WHERE customer_id = $1 AND id = $2', [customerId, id]);
  if (!r.rowCount) throw notFound('no such machine');
}

/** The ClickHouse conditions that select one instance's rows, once it is the customer's (404 otherwise). */
export async function ownedInstanceRows(db: Db, customerId: string, id: string): Promise<string[]> {
  await ownedInstance(db, customerId, id);
  return [`customer_id = ${chStr(customerId)}`, `instance_id = ${chStr(id)}`];
}
