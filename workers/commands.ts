// The agent-command side of a report batch: deliveries (ids the gateway put into a heartbeat or
// status report it answered with those commands) and acks (reports of kind `command_ack`). One
// transaction, every write idempotent, so a redelivered batch changes nothing:
//   delivered   queued -> delivered (first delivery time, ack deadline); later deliveries only move
//               last_delivered_at forward; the `delivered` event keeps the earliest time;
//   ack         any state but succeeded/failed -> succeeded | failed (the first ack wins: a second
//               one is a no-op). A late ack (after timed_out, or a command that was cancelled or
//               expired while the gateway handed it out) still records what the agent did.
// Instances whose open commands changed are hinted to the gateways after the commit.
import type { Report } from '../lib/contract/messages.js';
import type { Pool } from '../lib/infra/postgres.js';
import { withTx, pgText, pgJson } from '../lib/infra/postgres.js';
import { isUuid } from '../lib/contract/ids.js';
import type { InstanceRef } from '../lib/store/commands.js';
import type { CommandAck } from '../lib/contract/schemas/commands.js';

export interface CommandDeps {
  pool: Pool;
  ackTimeoutS: number;
  /** Called after the commit with the instances whose open commands changed. */
  commandsChanged?(refs: InstanceRef[]): void;
}

interface Delivery {
  id: string;
  at: number;
  ref: InstanceRef;
}

interface Ack {
  id: string;
  at: number;
  ref: InstanceRef;
  body: CommandAck;
}

export async function applyCommandReports(d: CommandDeps, reports: Report[]): Promise<void> {
  const deliveries = new Map<string, Delivery>();
  const acks = new Map<string, Ack>();
  for (const r of reports) {
    const ref = { customerId: r.customerId, machine: r.machine, software: r.software };
    if (r.deliveredCommands) {
      for (const id of r.deliveredCommands) {
        if (!isUuid(id)) continue;
        const prev = deliveries.get(id);
        // The earliest delivery is the one that counts (and the latest moves last_delivered_at).
        if (!prev) deliveries.set(id, { id, at: r.receivedAt, ref });
        else if (r.receivedAt < prev.at) prev.at = r.receivedAt;
      }
    }
    if (r.kind === 'command_ack' && r.commandId && isUuid(r.commandId)) {
      const prev = acks.get(r.commandId);
      if (!prev || r.receivedAt < prev.at) acks.set(r.commandId, { id: r.commandId, at: r.receivedAt, ref, body: r.body as CommandAck });
    }
  }
  if (deliveries.size === 0 && acks.size === 0) return;
  const latest = new Map<string, number>();
  for (const r of reports) for (const id of r.deliveredCommands ?? []) latest.set(id, Math.max(latest.get(id) ?? 0, r.receivedAt));

  const changed = await withTx(d.pool, async (c) => {
    const changed: InstanceRef[] = [];
    if (deliveries.size > 0) {
      // Sorted: concurrent workers lock the same rows in the same order.
      const ds = [...deliveries.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
      const params = [ds.map((x) => x.id), ds.map((x) => x.ref.customerId), ds.map((x) => x.at), ds.map((x) => latest.get(x.id) ?? x.at)];
      const unnest = `unnest($1::uuid[], $2::uuid[], $3::float8[], $4::float8[]) AS d(id, customer_id, at_ms, last_ms)`;
      const first = await c.query<{ id: string }>(
        `UPDATE commands c
            SET state = 'delivered', delivered_at = to_timestamp(d.at_ms / 1000.0), last_delivered_at = to_timestamp(d.last_ms / 1000.0),
                ack_deadline = to_timestamp(d.at_ms / 1000.0) + make_interval(secs => $5)
           FROM ${unnest}
          WHERE c.id = d.id AND c.customer_id = d.customer_id AND c.state = 'queued'
          RETURNING c.id`,
        [...params, d.ackTimeoutS],
      );
      const firstIds = new Set(first.rows.map((r) => r.id));
      for (const x of ds) if (firstIds.has(x.id)) changed.push(x.ref);
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
    }
    if (acks.size > 0) {
      const as = [...acks.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
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
          as.map((x) => (x.body.result === 'success' ? 'succeeded' : 'failed')),
          as.map((x) => pgText(x.body.message) ?? null),
          as.map((x) => (x.body.output === undefined ? null : pgJson(x.body.output))),
          as.map((x) => x.at),
        ],
      );
      const done = new Set(r.rows.map((x) => x.id));
      for (const x of as) if (done.has(x.id)) changed.push(x.ref);
    }
    return changed;
  });
  if (changed.length > 0) d.commandsChanged?.(changed);
}
