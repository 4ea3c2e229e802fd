// Maintenance windows of the caller's customer: list (viewer), create and delete (admin). A window
// is stored with its occurrences in one transaction (lib/store/maintenance.ts); what a window does
// to the traffic light is the light's business (docs/api.md "Maintenance windows").
import type { ApiDeps, HandlersOf } from '../types.js';
import { principal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import type { MaintenanceWindowBody } from '../../lib/contract/schemas/maintenance.js';
import { WEEKDAYS, canonicalTimeZone, windowTimesProblem, type Weekday, type WindowTimes } from '../../lib/domain/maintenance.js';
import { describeQuota } from '../../lib/store/quotas.js';
import { createWindow, deleteWindow, listWindows, windowView, type WindowScopeInput } from '../../lib/store/maintenance.js';

/** The scope of a body: its one id or pattern, and none of the others (400 otherwise). */
function scopeOf(b: MaintenanceWindowBody): WindowScopeInput {
  const given = (['machine_id', 'instance_id', 'software_pattern'] as const).filter((k) => b[k] !== undefined);
  const wants = ({ customer: null, machine: 'machine_id', instance: 'instance_id', software: 'software_pattern' } as const)[b.scope];
  const extra = given.filter((k) => k !== wants);
  if (extra.length) throw badRequest(`scope ${b.scope} takes ${wants ?? 'no id or pattern'}, not ${extra.join(', ')}`);
  if (wants && b[wants] === undefined) throw badRequest(`scope ${b.scope} needs ${wants}`);
  if (b.scope === 'machine') return { scope: 'machine', machineId: b.machine_id! };
  if (b.scope === 'instance') return { scope: 'instance', instanceId: b.instance_id! };
  if (b.scope === 'software') return { scope: 'software', softwarePattern: b.software_pattern! };
  return { scope: 'customer' };
}

/** The times of a body: a one-off window or a recurring one, checked (400 with what is wrong). */
function timesOf(b: MaintenanceWindowBody, now: Date): WindowTimes {
  const once = b.starts_at !== undefined || b.ends_at !== undefined;
  if (once && b.recurrence) throw badRequest('a window is one-off (starts_at, ends_at) or recurring (recurrence), not both');
  let t: WindowTimes;
  if (b.recurrence) {
    const r = b.recurrence;
    const zone = canonicalTimeZone(r.time_zone);
    if (!zone) throw badRequest(`time_zone: unknown time zone ${JSON.stringify(r.time_zone)} (an IANA name such as Europe/Berlin)`);
    t = {
      kind: 'recurring',
      timeZone: zone,
      startTime: r.start_time,
      durationMinutes: r.duration_minutes,
      days: ([...r.days] as Weekday[]).sort((x, y) => WEEKDAYS.indexOf(x) - WEEKDAYS.indexOf(y)),
      validFrom: r.valid_from ? new Date(r.valid_from) : null,
      validUntil: r.valid_until ? new Date(r.valid_until) : null,
    };
  } else {
    if (b.starts_at === undefined || b.ends_at === undefined) throw badRequest('a one-off window needs starts_at and ends_at; a recurring one, recurrence');
    t = { kind: 'once', startsAt: new Date(b.starts_at), endsAt: new Date(b.ends_at) };
  }
  const problem = windowTimesProblem(t);
  if (problem) throw badRequest(problem);
  if (t.kind === 'once' && t.endsAt <= now) throw badRequest('ends_at is in the past: the window would never apply');
  if (t.kind === 'recurring' && t.validUntil && t.validUntil <= now) throw badRequest('valid_until is in the past: the window would never apply');
  return t;
}

export function maintenanceHandlers(d: ApiDeps): HandlersOf<'create_maintenance_window' | 'delete_maintenance_window' | 'list_maintenance_windows'> {
  const quotaRefusals = d.metrics.counter('fleet_quota_refusals_total');
  return {
    async list_maintenance_windows(req) {
      const p = principal(req);
      const { now, items } = await listWindows(d.pool, p.customerId);
      return { items: items.map((w) => windowView(w, now)), now: now.toISOString() };
    },

    async create_maintenance_window(req, reply) {
      const p = principal(req);
      const b = req.body;
      const scope = scopeOf(b);
      const times = timesOf(b, new Date());
      const made = await createWindow(d.pool, d.cfg, p.customerId, { scope, times, description: b.description ?? '', createdBy: p.userId ?? null });
      if ('missing' in made) throw notFound(`no such ${made.missing}`);
      if ('full' in made) {
        const { count: n, max } = made.full;
        quotaRefusals.labels('maintenance_windows').inc();
        throw new HttpError(409, `${p.customer} has ${n} maintenance windows, its quota (${describeQuota('maintenance_windows', max)}); delete one first, or ask the operator to raise the quota`);
      }
      return reply.code(201).send(windowView(made.created, new Date()));
    },

    async delete_maintenance_window(req, reply) {
      const p = principal(req);
      if (!(await deleteWindow(d.pool, p.customerId, req.params.id))) throw notFound('no such maintenance window');
      return reply.code(204).send();
    },
  };
}
