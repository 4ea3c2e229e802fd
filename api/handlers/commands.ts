// Agent commands on the read API: what an instance advertises, queueing (admin), the list with
// each command's history, cancelling (admin). Every query is scoped by the caller's customer; the
// gateways learn about a queued or cancelled command from a NATS hint sent after the commit.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ApiDeps } from '../server.js';
import { principal } from '../auth.js';
import { notFound } from '../../lib/errors.js';
import { advertisedCommands, cancelCommand, queueCommand, readCommands } from '../../lib/commands.js';
import type { CommandState, QueueCommandBody } from '../../lib/schemas/commands.js';

export function commandHandlers(d: ApiDeps) {
  const cfg = d.cfg.commands;

  async function instanceSnapshot(customerId: string, id: string): Promise<unknown> {
    const r = await d.pool.query<{ snapshot: unknown }>('SELECT snapshot FROM instances WHERE customer_id = $1 AND id = $2', [customerId, id]);
    if (!r.rows[0]) throw notFound('no such instance');
    return r.rows[0].snapshot;
  }

  return {
    async list_available_commands(req: FastifyRequest) {
      const p = principal(req);
      const snapshot = await instanceSnapshot(p.customerId, (req.params as { id: string }).id);
      return { items: advertisedCommands(snapshot) };
    },

    async queue_command(req: FastifyRequest, reply: FastifyReply) {
      const p = principal(req);
      const body = req.body as QueueCommandBody;
      const { command, ref } = await queueCommand(d.pool, {
        customerId: p.customerId,
        instanceId: (req.params as { id: string }).id,
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

    async list_instance_commands(req: FastifyRequest) {
      const p = principal(req);
      const { id } = req.params as { id: string };
      const r = await d.pool.query('SELECT 1 FROM instances WHERE customer_id = $1 AND id = $2', [p.customerId, id]);
      if (r.rowCount === 0) throw notFound('no such instance');
      const q = req.query as { state?: CommandState; limit?: number };
      return { items: await readCommands(d.pool, p.customerId, { instanceId: id, state: q.state, limit: q.limit ?? 100 }) };
    },

    async cancel_command(req: FastifyRequest) {
      const p = principal(req);
      const { command, ref } = await cancelCommand(d.pool, p.customerId, (req.params as { id: string }).id, p.userId ?? null);
      if (ref) d.hints.publish([ref]);
      return command;
    },
  };
}
