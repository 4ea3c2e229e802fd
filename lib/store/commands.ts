// Agent commands, the parts every process shares: what a snapshot advertises, queueing and
// cancelling (api, bench), reading a command with its history, the NATS hint that tells every
// gateway to re-read the open commands of some instances, and what the gateways read: the open
// commands (all, or of some instances) and whose a command is (gateway/pending-commands.ts).
// The workers' writes (deliveries, acks, the expiry sweep) are at the end.
//
// Lifecycle (docs/decisions.md "Agent commands"):
//   queued     POST /api/instances/{id}/commands (api), expires_at = now + COMMAND_QUEUE_TTL_S
//   delivered  the gateway handed it out in the answer to a heartbeat or status report and put its
//              id into that report (Report.deliveredCommands); the worker that applies the report records it,
//              ack_deadline = first delivery + COMMAND_ACK_TIMEOUT_S. Offered again on each
//              contact until acked.
//   succeeded | failed   the agent's ack (through the gateway and JetStream, applied by a worker)
//   expired | timed_out  the sweep job (workers/command-expiry.ts)
//   cancelled            POST /api/commands/{id}/cancel while queued
import type { Pool, PoolClient } from '../infra/postgres.js';
import { withTx, isoTime as iso } from '../infra/postgres.js';
import { HintPublisher } from '../infra/hints.js';
import { HttpError, notFound, unprocessable } from '../contract/errors.js';
import { treeErrors } from '../domain/storable.js';
import type { AvailableCommand, Command, CommandState } from '../contract/schemas/commands.js';
import { CommandStates, OpenStates } from '../contract/schemas/commands.js';

/** An instance as the gateway knows it: no id lookup needed on the request path. */
export interface InstanceRef {
  customerId: string;
  machine: string;
  software: string;
}

export const instanceKeyOf = (customerId: string, machine: string, software: string): string => `${customerId}|${machine}|${software}`;

// ---- what a snapshot advertises -------------------------------------------------------------

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * `modules.<module>.commands` of a status snapshot: an array of `{name, label?, params?}`. Entries
 * that do not have this shape (no string name) are skipped; whatever else the snapshot holds is
 * ignored. Sorted by module name (Postgres jsonb does not keep the order of object keys), then in
 * the order the module lists them.
 */
export function advertisedCommands(snapshot: unknown): AvailableCommand[] {
  const out: AvailableCommand[] = [];
  if (!isObject(snapshot) || !isObject(snapshot.modules)) return out;
  const modules = Object.entries(snapshot.modules).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (const [module, m] of modules) {
    if (!isObject(m) || !Array.isArray(m.commands)) continue;
    for (const c of m.commands) {
      if (!isObject(c) || typeof c.name !== 'string' || c.name === '') continue;
      out.push({ module, name: c.name, label: typeof c.label === 'string' ? c.label : null, params: c.params ?? null });
    }
  }
  return out;
}

/**
 * Arguments against advertised params. The contract leaves the shape of `params` open; when it is
 * an array of `{name, required?}` objects, unknown argument names and missing required ones are
 * refused. Any other shape is the agent's business: the arguments go through unchecked.
 */
export function checkArgs(params: unknown, args: Record<string, unknown>): string | null {
  if (!Array.isArray(params) || !params.every((p) => isObject(p) && typeof p.name === 'string')) return null;
  const declared = params as { name: string; required?: unknown }[];
  const names = new Set(declared.map((p) => p.name));
  const unknown = Object.keys(args).filter((k) => !names.has(k));
  if (unknown.length) return `unknown argument(s) ${unknown.map((k) => JSON.stringify(k)).join(', ')}; advertised: ${[...names].join(', ') || 'none'}`;
  const missing = declared.filter((p) => p.required === true && !(p.name in args)).map((p) => p.name);
  if (missing.length) return `missing required argument(s) ${missing.join(', ')}`;
  return null;
}

// ---- queue, cancel, read ---------------------------------------------------------------------

export interface QueueInput {
  customerId: string;
  instanceId: string;
  module: string;
  command: string;
  args: Record<string, unknown>;
  userId: string | null;
  queueTtlS: number;
  maxOpen: number;
  argsMaxBytes: number;
}

/** Stores an advertised command as queued (with its `queued` event). 404, 413, 422 or 409 otherwise. */
export async function queueCommand(pool: Pool, q: QueueInput): Promise<{ command: Command; ref: InstanceRef }> {
  // What Postgres cannot store is refused, as at the gateway (lib/domain/storable.ts): 422 with the path.
  const bad = treeErrors(q.args, '/args');
  if (bad.length) throw unprocessable(`args cannot be stored: ${bad.map((e) => `${e.path} ${e.message}`).join('; ')}`, bad);
  const argsJson = JSON.stringify(q.args ?? {});
  if (Buffer.byteLength(argsJson) > q.argsMaxBytes) throw new HttpError(413, `args of ${Buffer.byteLength(argsJson)} bytes are over the limit of ${q.argsMaxBytes} bytes`);
  return withTx(pool, async (c) => {
    // The row lock serialises queueing for one instance, so the open-command limit holds.
    const r = await c.query<{ machine: string; software: string; snapshot: unknown; retired: boolean }>(
      `SELECT m.slug AS machine, i.software, i.snapshot, i.retired_at IS NOT NULL AS retired
         FROM instances i JOIN machines m ON m.id = i.machine_id
        WHERE i.customer_id = $1 AND i.id = $2
          FOR NO KEY UPDATE OF i`,
      [q.customerId, q.instanceId],
    );
    const inst = r.rows[0];
    if (!inst) throw notFound('no such instance');
    // Retirement cancels the open commands (lib/store/decommission.ts) under this same row lock.
    if (inst.retired) throw new HttpError(409, 'the instance is retired: it takes no commands');
    const advertised = advertisedCommands(inst.snapshot);
    const hit = advertised.find((a) => a.module === q.module && a.name === q.command);
    if (!hit) {
      const list = advertised.map((a) => `${a.module}/${a.name}`).join(', ');
      throw unprocessable(
        `command ${JSON.stringify(q.command)} of module ${JSON.stringify(q.module)} is not advertised by this instance's latest status snapshot (${list ? `advertised: ${list}` : 'it advertises none'})`,
        [{ path: '/command', message: 'not advertised' }],
      );
    }
    const argsErr = checkArgs(hit.params, q.args);
    if (argsErr) throw unprocessable(argsErr, [{ path: '/args', message: argsErr }]);
    const open = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM commands WHERE instance_id = $1 AND state = ANY($2::text[])', [q.instanceId, OpenStates]);
    if (open.rows[0]!.n >= q.maxOpen) throw new HttpError(409, `this instance already has ${open.rows[0]!.n} open commands (the limit is ${q.maxOpen}); wait for them or cancel some`);
    const ins = await c.query<{ id: string; created_at: Date }>(
      `INSERT INTO commands (customer_id, instance_id, module, command, args, created_by, expires_at)
       VALUES ($1, $2, $3, $4, $5::jsonb, $6, clock_timestamp() + make_interval(secs => $7))
       RETURNING id, created_at`,
      [q.customerId, q.instanceId, q.module, q.command, argsJson, q.userId, q.queueTtlS],
    );
    const { id, created_at } = ins.rows[0]!;
    await c.query(`INSERT INTO command_events (command_id, state, at, actor) VALUES ($1, 'queued', $2, $3)`, [id, created_at, actorOf(q.userId)]);
    const command = (await readCommands(c, q.customerId, { id }))[0]!;
    return { command, ref: { customerId: q.customerId, machine: inst.machine, software: inst.software } };
  });
}

/**
 * Cancels a queued command. Cancelling a cancelled one again is a no-op; any other state is 409
 * (a delivered command may already be running on the agent).
 */
export async function cancelCommand(pool: Pool, customerId: string, id: string, userId: string | null): Promise<{ command: Command; ref: InstanceRef | null }> {
  return withTx(pool, async (c) => {
    const u = await c.query<{ machine: string; software: string }>(
      `WITH u AS (
         UPDATE commands SET state = 'cancelled', finished_at = clock_timestamp()
          WHERE id = $1 AND customer_id = $2 AND state = 'queued'
          RETURNING id, instance_id, finished_at
       ), e AS (
         INSERT INTO command_events (command_id, state, at, actor) SELECT id, 'cancelled', finished_at, $3 FROM u
       )
       SELECT m.slug AS machine, i.software FROM u JOIN instances i ON i.id = u.instance_id JOIN machines m ON m.id = i.machine_id`,
      [id, customerId, actorOf(userId)],
    );
    const command = (await readCommands(c, customerId, { id }))[0];
    if (!command) throw notFound('no such command');
    if (u.rows[0]) return { command, ref: { customerId, machine: u.rows[0].machine, software: u.rows[0].software } };
    if (command.state === 'cancelled') return { command, ref: null };
    throw new HttpError(409, `the command is ${command.state}; only a queued command can be cancelled`);
  });
}

const STATE_ORDER = `ARRAY[${CommandStates.map((s) => `'${s}'`).join(', ')}]`;

interface CommandRow {
  id: string;
  instance_id: string;
  module: string;
  command: string;
  args: Record<string, unknown>;
  state: CommandState;
  created_by: string | null;
  created_at: Date;
  expires_at: Date;
  delivered_at: Date | null;
  last_delivered_at: Date | null;
  ack_deadline: Date | null;
  finished_at: Date | null;
  result_message: string | null;
  result_output: unknown;
  history: { state: CommandState; at: string; actor: string; detail: string | null }[];
}

/** Commands of one customer, newest first, each with its history (oldest first). */
export async function readCommands(
  db: Pool | PoolClient,
  customerId: string,
  where: { id?: string; instanceId?: string; state?: CommandState; limit?: number },
): Promise<Command[]> {
  const cond = ['c.customer_id = $1'];
  const params: unknown[] = [customerId];
  if (where.id) cond.push(`c.id = $${params.push(where.id)}`);
  if (where.instanceId) cond.push(`c.instance_id = $${params.push(where.instanceId)}`);
  if (where.state) cond.push(`c.state = $${params.push(where.state)}`);
  const r = await db.query<CommandRow>(
    `SELECT c.id, c.instance_id, c.module, c.command, c.args, c.state, c.created_by, c.created_at, c.expires_at,
            c.delivered_at, c.last_delivered_at, c.ack_deadline, c.finished_at, c.result_message, c.result_output,
            COALESCE((SELECT json_agg(json_build_object('state', e.state, 'at', e.at, 'actor', e.actor, 'detail', e.detail)
                                      ORDER BY e.at, array_position(${STATE_ORDER}, e.state))
                        FROM command_events e WHERE e.command_id = c.id), '[]'::json) AS history
       FROM commands c
      WHERE ${cond.join(' AND ')}
      ORDER BY c.created_at DESC, c.id
      LIMIT $${params.push(where.limit ?? 100)}`,
    params,
  );
  return r.rows.map(toCommand);
}


function toCommand(r: CommandRow): Command {
  return {
    id: r.id,
    instance_id: r.instance_id,
    module: r.module,
    command: r.command,
    args: r.args,
    state: r.state,
    created_by: r.created_by,
    created_at: r.created_at.toISOString(),
    expires_at: r.expires_at.toISOString(),
    delivered_at: iso(r.delivered_at),
    last_delivered_at: iso(r.last_delivered_at),
    ack_deadline: iso(r.ack_deadline),
    finished_at: iso(r.finished_at),
    result_message: r.result_message,
    result_output: r.result_output ?? null,
    history: r.history.map((e) => ({ state: e.state, at: new Date(e.at).toISOString(), actor: e.actor, detail: e.detail })),
  };
}

const actorOf = (userId: string | null) => (userId ? `user:${userId}` : 'system');

// ---- hints over core NATS ----------------------------------------------------------------------

export function encodeHint(refs: InstanceRef[]): Uint8Array {
  return Buffer.from(JSON.stringify({ i: refs.map((r) => [r.customerId, r.machine, r.software]) }));
}

/** Tolerant: anything unreadable is no hint at all (the periodic resync still covers it). */
export function decodeHint(data: Uint8Array): InstanceRef[] {
  try {
    const v = JSON.parse(Buffer.from(data).toString('utf8')) as { i?: unknown };
    if (!Array.isArray(v.i)) return [];
    return v.i
      .filter((x): x is [string, string, string] => Array.isArray(x) && x.length === 3 && x.every((y) => typeof y === 'string'))
      .map(([customerId, machine, software]) => ({ customerId, machine, software }));
  } catch {
    return [];
  }
}

/**
 * Publishes "the open commands of these instances changed" on `${SUBJECT_PREFIX}.control.commands`
 * after a commit (lib/infra/hints.ts: best effort); every gateway also re-reads all open commands
 * every COMMAND_RESYNC_MS. Each instance once, at most 1000 per message (≈ 100 KB, well under
 * NATS's max_payload).
 */
export class CommandHints extends HintPublisher<InstanceRef[]> {
  constructor(subject: string, onError?: (e: unknown) => void) {
    super(
      subject,
      (refs) => {
        const all = [...new Map(refs.map((r) => [instanceKeyOf(r.customerId, r.machine, r.software), r])).values()];
        const out: Uint8Array[] = [];
        for (let i = 0; i < all.length; i += 1000) out.push(encodeHint(all.slice(i, i + 1000)));
        return out;
      },
      onError,
    );
  }
}

// ---- what the gateways read (gateway/pending-commands.ts) -------------------------------------

/** An open command (queued or delivered) as the gateways hand it out. */
export interface OpenCommandRow {
  id: string;
  customer_id: string;
  machine: string;
  software: string;
  module: string;
  command: string;
  args: unknown;
  /** Queued: its expiry; delivered: its ack deadline. */
  deadline: Date | null;
}

const OPEN = `SELECT c.id, c.customer_id, m.slug AS machine, i.software, c.module, c.command, c.args,
                       CASE WHEN c.state = 'queued' THEN c.expires_at ELSE c.ack_deadline END AS deadline
                  FROM commands c JOIN instances i ON i.id = c.instance_id JOIN machines m ON m.id = i.machine_id
                 WHERE c.state IN (${OpenStates.map((x) => `'${x}'`).join(', ')})`;

/** Every open command, oldest first. */
export async function listOpenCommands(pool: Pool): Promise<OpenCommandRow[]> {
  return (await pool.query<OpenCommandRow>(`${OPEN} ORDER BY c.created_at, c.id`)).rows;
}

/** The open commands of these instances, oldest first. */
export async function listOpenCommandsOf(pool: Pool, refs: InstanceRef[]): Promise<OpenCommandRow[]> {
  const r = await pool.query<OpenCommandRow>(
    `${OPEN} AND (c.customer_id, m.slug, i.software) IN (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[]))
                ORDER BY c.created_at, c.id`,
    [refs.map((x) => x.customerId), refs.map((x) => x.machine), refs.map((x) => x.software)],
  );
  return r.rows;
}

/** The instance a command belongs to, whatever its state; null when there is no such command. */
export async function commandInstance(pool: Pool, id: string): Promise<InstanceRef | null> {
  const r = await pool.query<{ customer_id: string; machine: string; software: string }>(
    `SELECT c.customer_id, m.slug AS machine, i.software
           FROM commands c JOIN instances i ON i.id = c.instance_id JOIN machines m ON m.id = i.machine_id
          WHERE c.id = $1`,
    [id],
  );
  const row = r.rows[0];
  return row ? { customerId: row.customer_id, machine: row.machine, software: row.software } : null;
}

// ---- the worker's side: deliveries, acks, and the sweep ----------------------------------------

/** A delivery of a command the gateway handed out (Report.deliveredCommands). */
export interface CommandDelivery {
  id: string;
  customerId: string;
  /** The earliest delivery (ms since the epoch). */
  atMs: number;
  /** The latest delivery (ms since the epoch). */
  lastMs: number;
}

/**
 * Records deliveries, in the caller's transaction: a queued command becomes delivered (delivery
 * time, ack deadline = first delivery + `ackTimeoutS`); a later one only moves delivered_at back or
 * last_delivered_at forward; the `delivered` event keeps the earliest time. Give the deliveries
 * sorted by id (concurrent workers lock the same rows in the same order). Returns the ids that
 * were queued until now.
 */
export async function recordDeliveries(c: PoolClient, ds: CommandDelivery[], ackTimeoutS: number): Promise<Set<string>> {
  const params = [ds.map((x) => x.id), ds.map((x) => x.customerId), ds.map((x) => x.atMs), ds.map((x) => x.lastMs)];
  const unnest = `unnest($1::uuid[], $2::uuid[], $3::float8[], $4::float8[]) AS d(id, customer_id, at_ms, last_ms)`;
  const first = await c.query<{ id: string }>(
    `UPDATE commands c
        SET state = 'delivered', delivered_at = to_timestamp(d.at_ms / 1000.0), last_delivered_at = to_timestamp(d.last_ms / 1000.0),
            ack_deadline = to_timestamp(d.at_ms / 1000.0) + make_interval(secs => $5)
       FROM ${unnest}
      WHERE c.id = d.id AND c.customer_id = d.customer_id AND c.state = 'queued'
      RETURNING c.id`,
    [...params, ackTimeoutS],
  );
  await c.query(
    `UPDATE commands c
        SET delivered_at = LEAST(c.delivered_at, to_timestamp(d.at_ms / 1000.0)),
            last_delivered_at = GREATEST(c.last_delivered_at, to_timestamp(d.last_ms / 1000.0))
       FROM ${unnest}
      WHERE c.id = d.id AND c.customer_id = d.customer_id AND c.state <> 'queued'
        AND (c.delivered_at IS NULL OR c.delivered_at > to_timestamp(d.at_ms / 1000.0)
             OR c.last_delivered_at IS NULL OR c.last_delivered_at < to_timestamp(d.last_ms / 1000.0))`,
    params,
  );
  await c.query(
    `INSERT INTO command_events (command_id, state, at, actor)
     SELECT d.id, 'delivered', to_timestamp(d.at_ms / 1000.0), 'gateway'
       FROM ${unnest} JOIN commands c ON c.id = d.id AND c.customer_id = d.customer_id
     ON CONFLICT (command_id, state) DO UPDATE SET at = EXCLUDED.at WHERE EXCLUDED.at < command_events.at`,
    params,
  );
  return new Set(first.rows.map((r) => r.id));
}

/** An agent's ack of a command, from the instance it was queued for. */
export interface CommandAckRow {
  id: string;
  ref: InstanceRef;
  state: 'succeeded' | 'failed';
  /** Through pgText (lib/infra/postgres.ts), as every text the workers store. */
  message: string | null;
  /** What the agent reported, as JSON through pgJson; null: nothing. */
  outputJson: string | null;
  atMs: number;
}

/**
 * Records acks, in the caller's transaction: a command of that instance in any state but
 * succeeded/failed takes the ack's result (the first ack wins; a late one after timed_out, cancelled
 * or expired still records what the agent did), with its event. Give the acks sorted by id.
 * Returns the ids whose ack was recorded now.
 */
export async function recordAcks(c: PoolClient, as: CommandAckRow[]): Promise<Set<string>> {
  const r = await c.query<{ id: string }>(
    `WITH a AS (
       SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::float8[])
                  AS a(id, customer_id, machine, software, state, message, output, at_ms)
     ), u AS (
       UPDATE commands c
          SET state = a.state, finished_at = to_timestamp(a.at_ms / 1000.0), result_message = a.message, result_output = a.output::jsonb
         FROM a JOIN machines m ON m.customer_id = a.customer_id AND m.slug = a.machine
                JOIN instances i ON i.machine_id = m.id AND i.software = a.software
        WHERE c.id = a.id AND c.instance_id = i.id AND c.state NOT IN ('succeeded', 'failed')
        RETURNING c.id, c.state, c.finished_at, c.result_message
     )
     INSERT INTO command_events (command_id, state, at, actor, detail)
     SELECT id, state, finished_at, 'agent', result_message FROM u
     ON CONFLICT (command_id, state) DO NOTHING
     RETURNING command_id AS id`,
    [
      as.map((x) => x.id),
      as.map((x) => x.ref.customerId),
      as.map((x) => x.ref.machine),
      as.map((x) => x.ref.software),
      as.map((x) => x.state),
      as.map((x) => x.message),
      as.map((x) => x.outputJson),
      as.map((x) => x.atMs),
    ],
  );
  return new Set(r.rows.map((x) => x.id));
}

/** How the sweep ends an overdue command: from which state, past which deadline, and the event's detail. */
const OVERDUE = {
  expired: { from: 'queued', deadline: 'expires_at', detail: 'not delivered before expires_at' },
  timed_out: { from: 'delivered', deadline: 'ack_deadline', detail: 'no ack before ack_deadline' },
} as const;

/**
 * Ends at most `limit` overdue commands (workers/command-expiry.ts): `expired` those queued past
 * expires_at, `timed_out` those delivered past ack_deadline, each with its event (one per state,
 * so a second sweep adds nothing). Rows another sweep holds are skipped. Returns the instances of
 * the commands ended, one entry per command.
 */
export async function endOverdueCommands(db: Pool | PoolClient, to: keyof typeof OVERDUE, limit: number): Promise<InstanceRef[]> {
  const { from, deadline, detail } = OVERDUE[to];
  const r = await db.query<{ customer_id: string; machine: string; software: string }>(
    `WITH u AS (
       UPDATE commands SET state = '${to}', finished_at = clock_timestamp()
        WHERE id IN (SELECT id FROM commands WHERE state = '${from}' AND ${deadline} <= clock_timestamp()
                      ORDER BY ${deadline} LIMIT ${Number(limit)} FOR UPDATE SKIP LOCKED)
          AND state = '${from}'
        RETURNING id, instance_id, customer_id, finished_at
     ), e AS (
       INSERT INTO command_events (command_id, state, at, actor, detail)
       SELECT id, '${to}', finished_at, 'system', '${detail}' FROM u
       ON CONFLICT (command_id, state) DO NOTHING
     )
     SELECT u.customer_id, m.slug AS machine, i.software
       FROM u JOIN instances i ON i.id = u.instance_id JOIN machines m ON m.id = i.machine_id`,
  );
  return r.rows.map((x) => ({ customerId: x.customer_id, machine: x.machine, software: x.software }));
}
