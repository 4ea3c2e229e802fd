// Decommissioning (admin): retiring a machine or an instance of the active customer (another
// customer's id is a 404). Postgres first (lib/store/decommission.ts: rows marked retired, open
// commands cancelled), then the instances' Redis state, then the gateways' command hint. A
// failure after the commit answers an error; repeating the request finishes the job.
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { clearInstanceState, retireInstance, retireMachine, type Retirement } from '../../lib/store/decommission.js';

export function decommissionHandlers(d: ApiDeps): HandlersOf<'retire_instance' | 'retire_machine'> {
  const finish = async (r: Retirement) => {
    await clearInstanceState(d.redis, d.cfg.redisPrefix, r.instances.map((i) => i.id));
    d.hints.publish(r.hints);
    return {
      kind: r.kind,
      id: r.id,
      machine_id: r.machine_id,
      machine: r.machine,
      retired_at: r.retired_at.toISOString(),
      already_retired: r.already_retired,
      instances: r.instances,
      cancelled_commands: r.cancelled_commands,
    };
  };
  return {
    async retire_machine(req) {
      const p = principal(req);
      return finish(await retireMachine(d.pool, p.customerId, req.params.id, p.userId ?? null));
    },
    async retire_instance(req) {
      const p = principal(req);
      return finish(await retireInstance(d.pool, p.customerId, req.params.id, p.userId ?? null));
    },
  };
}
