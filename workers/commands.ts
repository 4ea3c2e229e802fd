// The agent-command side of a report batch: deliveries (ids the gateway put into a heartbeat or
// status report it answered with those commands) and acks (reports of kind `command_ack`). One
// transaction, every write idempotent, so a redelivered batch changes nothing:
//   delivered   queued -> delivered (first delivery time, ack deadline); later deliveries only move
//               last_delivered_at forward; the `delivered` event keeps the earliest time;
//   ack         any state but succeeded/failed -> succeeded | failed (the first ack wins: a second
//               one is a no-op). A late ack (after timed_out, or a command that was cancelled or
//               expired while the gateway handed it out) still records what the agent did.
// Instances whose open commands changed are hinted to the gateways after the commit. The statements
// are lib/store/commands.ts's (`recordDeliveries`, `recordAcks`), run in this transaction.
import type { Report } from '../lib/contract/messages.js';
import type { Pool } from '../lib/infra/postgres.js';
import { withTx, pgText, pgJson } from '../lib/infra/postgres.js';
import { isUuid } from '../lib/contract/ids.js';
import { recordAcks, recordDeliveries, type InstanceRef } from '../lib/store/commands.js';
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
      const firstIds = await recordDeliveries(
        c,
        ds.map((x) => ({ id: x.id, customerId: x.ref.customerId, atMs: x.at, lastMs: latest.get(x.id) ?? x.at })),
        d.ackTimeoutS,
      );
      for (const x of ds) if (firstIds.has(x.id)) changed.push(x.ref);
    }
    if (acks.size > 0) {
      const as = [...acks.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
      const done = await recordAcks(
        c,
        as.map((x) => ({
          id: x.id,
          ref: x.ref,
          state: x.body.result === 'success' ? 'succeeded' : 'failed',
          message: pgText(x.body.message) ?? null,
          outputJson: x.body.output === undefined ? null : pgJson(x.body.output),
          atMs: x.at,
        })),
      );
      for (const x of as) if (done.has(x.id)) changed.push(x.ref);
    }
    return changed;
  });
  if (changed.length > 0) d.commandsChanged?.(changed);
}
