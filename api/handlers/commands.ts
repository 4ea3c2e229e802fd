// Agent commands on the read API: what an instance advertises, queueing (admin), the list with
// each command's history, cancelling (admin). Every query is scoped by the caller's customer; the
// gateways learn about a queued or cancelled command from a NATS hint sent after the commit.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { advertisedCommands, cancelCommand, queueCommand, readCommands } from '../../lib/store/commands.js';
import { ownedInstance, ownedInstanceSnapshot } from '../../lib/store/instances.js';

export function commandHandlers(d: ApiDeps): HandlersOf<'cancel_command' | 'list_available_commands' | 'list_instance_commands' | 'queue_command'> {
  const cfg = d.cfg.commands;

  const instanceSnapshot = async (customerId: string, id: string) => (await ownedInstanceSnapshot(d.pool, customerId, id)).snapshot;

  return {
    async list_available_commands(req) {
      const p = principal(req);
      const snapshot = await instanceSnapshot(p.customerId, req.params.id);
      return { items: advertisedCommands(snapshot) };
    },

    async queue_command(req, reply) {
      const p = principal(req);
      const body = req.body;
      const { command, ref } = await queueCommand(d.pool, {
        customerId: p.customerId,
        instanceId: req.params.id,
        module: body.module,
        command: body.command,
        args: body.args ?? {},
        userId: p.userId ?? null,
        queueTtlS: cfg.queueTtlS,
        maxOpen: cfg.maxOpenPerInstance,
        argsMaxBytes: cfg.argsMaxBytes,
      });
      d.hints.publish([ref]);
      return reply.code(201).send(command);
    },

    async list_instance_commands(req) {
      const p = principal(req);
      const { id } = req.params;
      await ownedInstance(d.pool, p.customerId, id);
      const q = req.query;
      return { items: await readCommands(d.pool, p.customerId, { instanceId: id, state: q.state, limit: q.limit ?? 100 }) };
    },

    async cancel_command(req) {
      const p = principal(req);
      const { command, ref } = await cancelCommand(d.pool, p.customerId, req.params.id, p.userId ?? null);
      if (ref) d.hints.publish([ref]);
      return command;
    },
  };
}
