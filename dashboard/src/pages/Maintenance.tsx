// Maintenance windows of the active customer (GET/POST /api/maintenance-windows, DELETE …/{id}):
// the list with each window's scope, times and current or next occurrence; admins add one-off or
// recurring windows (for the whole customer, a machine, a software pattern or an instance) and
// delete them. The rules (daylight-saving time, bounds) are the server's: its 400 detail is shown.
import { useMemo, useState } from 'preact/hooks';
import { del, post, qs } from '../api.js';
import { useApp } from '../ctx.js';
import { dateTime } from '../format.js';
import type { InstanceList, MaintenanceWindow } from '../types.js';
import { DataTable, ErrorNote, PageTitle, Section, useAction, useFetch } from '../components/common.js';
import { ActionForm, Check, Field, Select } from '../components/forms.js';
import { useTitle } from '../components/title.js';

const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
type Day = (typeof DAYS)[number];
type Scope = MaintenanceWindow['scope'];
const SCOPES: readonly Scope[] = ['customer', 'machine', 'software', 'instance'];

/** `2026-12-24T22:00` (an <input type="datetime-local">, the browser's zone) as an ISO instant; '' when empty or invalid. */
const localToIso = (v: string) => {
  const d = new Date(v);
  return v && !Number.isNaN(d.getTime()) ? d.toISOString() : '';
};
const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

export function MaintenancePage() {
  const { t, lang, canAdmin } = useApp();
  useTitle(t('maint.title'));
  const list = useFetch<{ items: MaintenanceWindow[]; now: string }>('/api/maintenance-windows');
  const remove = useAction(async (w: MaintenanceWindow) => {
    if (!confirm(t('maint.confirmDelete', { what: scopeText(w) }))) return;
    await del(`/api/maintenance-windows/${w.id}`);
    await list.reload();
  });

  const scopeText = (w: MaintenanceWindow) =>
    w.scope === 'customer'
      ? t('maint.scope.customer')
      : w.scope === 'machine'
        ? t('maint.scopeMachine', { machine: w.machine ?? '?' })
        : w.scope === 'software'
          ? t('maint.scopeSoftware', { pattern: w.software_pattern ?? '' })
          : t('maint.scopeInstance', { machine: w.machine ?? '?', software: w.software ?? '?' });
  const whenText = (w: MaintenanceWindow) => {
    if (!w.recurrence) return `${dateTime(w.starts_at, lang)} – ${dateTime(w.ends_at, lang)}`;
    const r = w.recurrence;
    const days = r.days.length === 7 ? t('maint.daily') : r.days.map((d) => t(`maint.day.${d as Day}`)).join(', ');
    return t('maint.recurs', { days, time: r.start_time, zone: r.time_zone, minutes: r.duration_minutes });
  };
  const nextText = (w: MaintenanceWindow) =>
    !w.next
      ? t('maint.noneLeft')
      : w.next.in_progress
        ? t('maint.inProgress', { until: dateTime(w.next.ends_at, lang) })
        : t('maint.nextAt', { from: dateTime(w.next.starts_at, lang), until: dateTime(w.next.ends_at, lang) });

  return (
    <>
      <div class="page-head">
        <PageTitle>{t('maint.title')}</PageTitle>
      </div>
      <p class="muted">{t('maint.intro')}</p>
      {canAdmin && <AddWindow onAdded={list.reload} />}
      <Section id="windows" title={t('maint.list')}>
        {list.error ? <ErrorNote error={list.error} onRetry={list.reload} /> : null}
        {remove.error ? <ErrorNote error={remove.error} /> : null}
        <DataTable
          items={list.data?.items}
          none={t('maint.none')}
          label={t('maint.list')}
          class="maint-table cards"
          cols={[t('maint.scope'), t('maint.when'), t('maint.next'), t('maint.description'), canAdmin ? t('common.actions') : null].filter((c) => c !== null)}
          row={(w) => (
            <tr key={w.id} data-window={w.id}>
              <td data-label={t('maint.scope')}>{scopeText(w)}</td>
              <td data-label={t('maint.when')}>{whenText(w)}</td>
              <td data-label={t('maint.next')}>
                <span class={w.next?.in_progress ? 'state state-queued' : undefined}>{nextText(w)}</span>
              </td>
              <td data-label={t('maint.description')}>{w.description || <span class="muted">—</span>}</td>
              {canAdmin && (
                <td data-label={t('common.actions')}>
                  <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(w)}>
                    {t('common.delete')}
                    <span class="sr-only"> {scopeText(w)}</span>
                  </button>
                </td>
              )}
            </tr>
          )}
        />
      </Section>
    </>
  );
}

function AddWindow({ onAdded }: { onAdded: () => Promise<void> }) {
  const { t } = useApp();
  const [kind, setKind] = useState<'once' | 'recurring'>('once');
  const [scope, setScope] = useState<Scope>('customer');
  const [machineId, setMachineId] = useState('');
  const [instanceId, setInstanceId] = useState('');
  const [pattern, setPattern] = useState('');
  const [start, setStart] = useState('');
  const [end, setEnd] = useState('');
  const [zone, setZone] = useState(browserZone);
  const [time, setTime] = useState('02:00');
  const [minutes, setMinutes] = useState('60');
  const [days, setDays] = useState<Day[]>([...DAYS]);
  const [description, setDescription] = useState('');
  // The machines and instances to choose from (scope machine or instance).
  const fleet = useFetch<InstanceList>(scope === 'machine' || scope === 'instance' ? `/api/instances${qs({ limit: 1000 })}` : null);
  const machines = useMemo(() => {
    const m = new Map<string, string>();
    for (const i of fleet.data?.items ?? []) m.set(i.machine_id, i.machine);
    return [...m].sort((a, b) => a[1].localeCompare(b[1]));
  }, [fleet.data]);
  const instances = fleet.data?.items ?? [];

  const add = useAction(async () => {
    const body: Record<string, unknown> = { scope, description: description.trim() || undefined };
    if (scope === 'machine') body.machine_id = machineId || machines[0]?.[0];
    if (scope === 'instance') body.instance_id = instanceId || instances[0]?.id;
    if (scope === 'software') body.software_pattern = pattern.trim();
    if (kind === 'once') {
      body.starts_at = localToIso(start);
      body.ends_at = localToIso(end);
    } else {
      body.recurrence = { time_zone: zone.trim(), start_time: time, duration_minutes: Number(minutes), days: DAYS.filter((d) => days.includes(d)) };
    }
    await post<MaintenanceWindow>('/api/maintenance-windows', body);
    setDescription('');
    await onAdded();
  });

  return (
    <Section id="add-window" title={t('maint.add')}>
      <ActionForm class="maint-form" onSubmit={add.run}>
        <div class="row">
          <Field id="maint-kind" label={t('maint.kind')}>
            <Select id="maint-kind" value={kind} values={['once', 'recurring'] as const} label={(k) => t(`maint.kind.${k}`)} onChange={setKind} />
          </Field>
          <Field id="maint-scope" label={t('maint.scope')}>
            <Select id="maint-scope" value={scope} values={SCOPES} label={(s) => t(`maint.scope.${s}`)} onChange={setScope} />
          </Field>
          {scope === 'machine' && (
            <Field id="maint-machine" label={t('maint.machine')}>
              <select id="maint-machine" required value={machineId || machines[0]?.[0] || ''} onChange={(e) => setMachineId(e.currentTarget.value)}>
                {machines.map(([id, name]) => (
                  <option key={id} value={id}>
                    {name}
                  </option>
                ))}
              </select>
            </Field>
          )}
          {scope === 'instance' && (
            <Field id="maint-instance" label={t('maint.instance')}>
              <select id="maint-instance" required value={instanceId || instances[0]?.id || ''} onChange={(e) => setInstanceId(e.currentTarget.value)}>
                {instances.map((i) => (
                  <option key={i.id} value={i.id}>
                    {i.machine} / {i.software}
                  </option>
                ))}
              </select>
            </Field>
          )}
          {scope === 'software' && (
            <Field id="maint-pattern" label={t('maint.pattern')}>
              <input id="maint-pattern" required value={pattern} maxLength={128} pattern="[a-z0-9*\-]+" placeholder="db-*" onInput={(e) => setPattern(e.currentTarget.value)} />
            </Field>
          )}
        </div>
        {kind === 'once' ? (
          <div class="row">
            <Field id="maint-start" label={t('maint.start')}>
              <input id="maint-start" type="datetime-local" required value={start} onInput={(e) => setStart(e.currentTarget.value)} />
            </Field>
            <Field id="maint-end" label={t('maint.end')}>
              <input id="maint-end" type="datetime-local" required value={end} onInput={(e) => setEnd(e.currentTarget.value)} />
            </Field>
          </div>
        ) : (
          <>
            <div class="row">
              <Field id="maint-zone" label={t('maint.zone')}>
                <input id="maint-zone" required value={zone} maxLength={64} placeholder="Europe/Berlin" onInput={(e) => setZone(e.currentTarget.value)} />
              </Field>
              <Field id="maint-time" label={t('maint.time')}>
                <input id="maint-time" type="time" required value={time} onInput={(e) => setTime(e.currentTarget.value)} />
              </Field>
              <Field id="maint-minutes" label={t('maint.minutes')}>
                <input id="maint-minutes" type="number" required min={1} max={10080} value={minutes} onInput={(e) => setMinutes(e.currentTarget.value)} />
              </Field>
            </div>
            <fieldset class="field">
              <legend>{t('maint.days')}</legend>
              <div class="row">
                {DAYS.map((d) => (
                  <Check key={d} checked={days.includes(d)} onChange={(on) => setDays(on ? [...days, d] : days.filter((x) => x !== d))}>
                    {t(`maint.day.${d}`)}
                  </Check>
                ))}
              </div>
            </fieldset>
          </>
        )}
        <div class="row">
          <Field id="maint-desc" label={t('maint.description')} class="grow">
            <input id="maint-desc" value={description} maxLength={256} onInput={(e) => setDescription(e.currentTarget.value)} />
          </Field>
          <button type="submit" class="primary" disabled={add.busy}>
            {t('maint.addButton')}
          </button>
        </div>
        <p class="muted small">{kind === 'once' ? t('maint.onceHint') : t('maint.recurringHint')}</p>
      </ActionForm>
      {add.error ? <ErrorNote error={add.error} /> : null}
    </Section>
  );
}
