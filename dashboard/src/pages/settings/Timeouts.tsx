// Timeout rules (docs/api.md "Timeout rules"): how long an instance may stay silent before red, and
// after which share of that it turns late, for the whole customer, a software pattern or one
// instance; the defaults where no rule applies. Everyone reads; admins add, change and delete. An
// instance is picked by machine name (the fleet list's search) or by pasting its id.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, del, get, missingFeature, post, put, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { duration } from '../../format.js';
import type { Instance, InstanceList, TimeoutRule, TimeoutRuleChanged, TimeoutRuleInput, TimeoutRuleList, TimeoutRuleUpdate } from '../../types.js';
import { DataTable, ErrorNote, Section, Unavailable, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Field, Select } from '../../components/forms.js';
import type { Translate } from '../../i18n.js';

type Scope = TimeoutRule['scope'];
const SCOPES: Scope[] = ['customer', 'software', 'instance'];
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const emptyForm = { scope: 'software' as Scope, pattern: '', instance: '', timeout: '', late: '', description: '' };

/** "late after 80 % (4 min 0 s)", or "never late". */
export function lateText(t: Translate, timeoutS: number, latePercent: number): string {
  return latePercent > 0 ? t('timeouts.lateAfter', { p: latePercent, after: duration((timeoutS * latePercent) / 100) }) : t('timeouts.neverLate');
}

/** A mistake the page finds before asking the api, shown like the api's `detail`. */
const refusal = (detail: string) => new ApiError(400, detail, null);

/** A whole number from a field ('' → null); NaN when it is not one. */
function intOf(v: string): number | null {
  const s = v.trim();
  if (s === '') return null;
  return /^\d+$/.test(s) ? Number(s) : NaN;
}

function InstanceTarget({ rule }: { rule: TimeoutRule }) {
  return (
    <a href={`/instances/${rule.instance_id}`} data-instance-target={rule.instance_id}>
      {rule.machine !== null && rule.software !== null ? `${rule.machine} / ${rule.software}` : <code>{rule.instance_id}</code>}
    </a>
  );
}

function targetText(r: TimeoutRule, t: Translate): string {
  if (r.scope === 'customer') return t('timeouts.wholeCustomer');
  if (r.scope === 'software') return r.software_pattern ?? '';
  return r.instance_id ?? '';
}

export function TimeoutsSection() {
  const { t, canAdmin } = useApp();
  const rules = useFetch<TimeoutRuleList>('/api/timeout-rules');
  const [f, setF] = useState(emptyForm);
  const [picked, setPicked] = useState<Instance[]>([]);
  const [saved, setSaved] = useState<string | null>(null);
  const [editing, setEditing] = useState<string | null>(null);
  const set = (k: keyof typeof emptyForm) => (e: Event) => setF({ ...f, [k]: (e.currentTarget as HTMLInputElement).value });

  // The instance picker: instances whose machine name contains what was typed (at most 20).
  const typed = f.scope === 'instance' ? f.instance.trim() : '';
  useEffect(() => {
    if (!typed || UUID_RE.test(typed) || picked.some((i) => optionText(i) === typed)) return;
    const ac = new AbortController();
    const id = setTimeout(() => {
      get<InstanceList>(`/api/instances${qs({ q: typed.split('/')[0]!.trim(), limit: 20, sort: 'machine,software' })}`, ac.signal).then(
        (l) => setPicked(l.items),
        () => {},
      );
    }, 250);
    return () => {
      clearTimeout(id);
      ac.abort();
    };
  }, [typed]);

  const create = useAction(async () => {
    setSaved(null);
    const timeout = intOf(f.timeout);
    const late = intOf(f.late);
    if (Number.isNaN(timeout) || Number.isNaN(late)) throw refusal(t('timeouts.wholeNumbers'));
    const body: TimeoutRuleInput = { scope: f.scope };
    if (f.scope === 'software') body.software_pattern = f.pattern.trim();
    if (f.scope === 'instance') {
      const id = UUID_RE.test(typed) ? typed : picked.find((i) => optionText(i) === typed)?.id;
      if (!id) throw refusal(t('timeouts.pickInstance'));
      body.instance_id = id;
    }
    if (timeout !== null) body.timeout_s = timeout;
    if (late !== null) body.late_percent = late;
    if (f.description.trim()) body.description = f.description.trim();
    const r = await post<TimeoutRuleChanged>('/api/timeout-rules', body);
    await rules.reload();
    setF({ ...emptyForm, scope: f.scope });
    setSaved(t('timeouts.changed', { n: r.instances_changed }));
  });
  const remove = useAction(async (r: TimeoutRule) => {
    if (!confirm(t('timeouts.confirmDelete', { target: targetText(r, t) }))) return;
    setSaved(null);
    await del(`/api/timeout-rules/${r.id}`);
    await rules.reload();
  });

  if (missingFeature(rules.error)) {
    return (
      <Section id="timeouts" title={t('timeouts.title')}>
        <Unavailable />
      </Section>
    );
  }
  const d = rules.data;
  const minS = d?.min_timeout_s ?? 30;
  return (
    <Section id="timeouts" title={t('timeouts.title')}>
      <p class="muted small">{t('timeouts.intro')}</p>
      {d && (
        <p data-testid="timeout-defaults">
          {t('timeouts.defaults', { timeout: duration(d.defaults.timeout_s), late: lateText(t, d.defaults.timeout_s, d.defaults.late_percent) })}
        </p>
      )}
      {canAdmin && (
        <ActionForm class="grid-form" onSubmit={create.run}>
          <Field id="tr-scope" label={t('timeouts.scope')}>
            <Select id="tr-scope" value={f.scope} values={SCOPES} label={(s) => t(`timeouts.scope.${s}`)} onChange={(s) => setF({ ...f, scope: s })} />
          </Field>
          {f.scope === 'software' && (
            <Field id="tr-pattern" label={t('timeouts.pattern')}>
              <input id="tr-pattern" required maxLength={128} value={f.pattern} onInput={set('pattern')} placeholder="batch-*" />
            </Field>
          )}
          {f.scope === 'instance' && (
            <Field id="tr-instance" label={t('timeouts.instance')}>
              <input id="tr-instance" required list="tr-instances" autoComplete="off" value={f.instance} onInput={set('instance')} placeholder={t('timeouts.instanceHint')} />
              <datalist id="tr-instances">
                {picked.map((i) => (
                  <option key={i.id} value={optionText(i)} />
                ))}
              </datalist>
            </Field>
          )}
          <Field id="tr-timeout" label={t('timeouts.timeout')}>
            <input id="tr-timeout" type="number" min={minS} max={2_592_000} step={1} value={f.timeout} onInput={set('timeout')} placeholder={t('timeouts.timeoutHint', { min: minS })} />
          </Field>
          <Field id="tr-late" label={t('timeouts.late')}>
            <input id="tr-late" type="number" min={0} max={99} step={1} value={f.late} onInput={set('late')} placeholder={t('timeouts.lateHint')} />
          </Field>
          <Field id="tr-desc" label={t('timeouts.description')} class="wide">
            <input id="tr-desc" maxLength={500} value={f.description} onInput={set('description')} />
          </Field>
          <div class="field">
            <button type="submit" class="primary" disabled={create.busy}>
              {t('timeouts.add')}
            </button>
          </div>
        </ActionForm>
      )}
      {create.error ? <ErrorNote error={create.error} /> : null}
      {saved && (
        <p class="note ok" role="status" id="timeouts-saved">
          {saved}
        </p>
      )}
      {rules.error ? <ErrorNote error={rules.error} onRetry={rules.reload} /> : null}
      {remove.error ? <ErrorNote error={remove.error} /> : null}
      <DataTable
        items={d?.items}
        none={t('timeouts.none')}
        label={t('timeouts.title')}
        class="cards"
        cols={[t('timeouts.scope'), t('timeouts.timeoutCol'), t('timeouts.lateCol'), t('timeouts.description')]}
        hidden={t('common.actions')}
        row={(r) =>
          editing === r.id ? (
            <EditRow
              key={r.id}
              r={r}
              minS={minS}
              onDone={async (msg) => {
                await rules.reload();
                setEditing(null);
                setSaved(msg);
              }}
              onCancel={() => setEditing(null)}
            />
          ) : (
            <tr key={r.id} data-rule={r.id}>
              <td data-label={t('timeouts.scope')}>
                <span class="muted small">{t(`timeouts.scope.${r.scope}`)}: </span>
                {r.scope === 'instance' && r.instance_id ? <InstanceTarget rule={r} /> : r.scope === 'software' ? <code>{r.software_pattern}</code> : t('timeouts.wholeCustomer')}
              </td>
              <td data-label={t('timeouts.timeoutCol')}>{r.timeout_s === null ? <span class="muted">{t('timeouts.inherited')}</span> : duration(r.timeout_s)}</td>
              <td data-label={t('timeouts.lateCol')}>{r.late_percent === null ? <span class="muted">{t('timeouts.inherited')}</span> : r.late_percent === 0 ? t('timeouts.neverLate') : `${r.late_percent} %`}</td>
              <td data-label={t('timeouts.description')}>{r.description}</td>
              <td>
                {canAdmin && (
                  <div class="row">
                    <button type="button" class="small" onClick={() => (setSaved(null), setEditing(r.id))}>
                      {t('timeouts.edit')}
                      <span class="sr-only"> {targetText(r, t)}</span>
                    </button>
                    <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(r)}>
                      {t('common.delete')}
                      <span class="sr-only"> {targetText(r, t)}</span>
                    </button>
                  </div>
                )}
              </td>
            </tr>
          )
        }
      />
    </Section>
  );
}

const optionText = (i: Instance) => `${i.machine} / ${i.software}`;

/** A rule's row while an admin changes it: timeout and late share (empty: inherited), description. */
function EditRow({ r, minS, onDone, onCancel }: { r: TimeoutRule; minS: number; onDone: (msg: string) => Promise<void>; onCancel: () => void }) {
  const { t } = useApp();
  const [timeout, setTimeoutS] = useState(r.timeout_s === null ? '' : String(r.timeout_s));
  const [late, setLate] = useState(r.late_percent === null ? '' : String(r.late_percent));
  const [description, setDescription] = useState(r.description);
  const save = useAction(async () => {
    const ts = intOf(timeout);
    const lp = intOf(late);
    if (Number.isNaN(ts) || Number.isNaN(lp)) throw refusal(t('timeouts.wholeNumbers'));
    if (ts === null && lp === null) throw refusal(t('timeouts.keepOne'));
    const body: TimeoutRuleUpdate = { timeout_s: ts, late_percent: lp, description: description.trim() };
    const out = await put<TimeoutRuleChanged>(`/api/timeout-rules/${r.id}`, body);
    await onDone(t('timeouts.changed', { n: out.instances_changed }));
  });
  const id = `tr-edit-${r.id}`;
  return (
    <tr data-rule={r.id} class="editing">
      <td colSpan={5}>
        <ActionForm class="inline-form" onSubmit={save.run}>
          <span class="field">
            <span class="muted small">{t(`timeouts.scope.${r.scope}`)}</span>
            {r.scope === 'instance' && r.instance_id ? <InstanceTarget rule={r} /> : r.scope === 'software' ? <code>{r.software_pattern}</code> : t('timeouts.wholeCustomer')}
          </span>
          <Field id={`${id}-timeout`} label={t('timeouts.timeout')}>
            <input id={`${id}-timeout`} type="number" min={minS} max={2_592_000} step={1} value={timeout} onInput={(e) => setTimeoutS(e.currentTarget.value)} placeholder={t('timeouts.inherited')} />
          </Field>
          <Field id={`${id}-late`} label={t('timeouts.late')}>
            <input id={`${id}-late`} type="number" min={0} max={99} step={1} value={late} onInput={(e) => setLate(e.currentTarget.value)} placeholder={t('timeouts.inherited')} />
          </Field>
          <Field id={`${id}-desc`} label={t('timeouts.description')} class="grow">
            <input id={`${id}-desc`} maxLength={500} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
          </Field>
          <button type="submit" class="primary" disabled={save.busy}>
            {t('timeouts.save')}
          </button>
          <button type="button" class="secondary" onClick={onCancel}>
            {t('common.cancel')}
          </button>
        </ActionForm>
        {save.error ? <ErrorNote error={save.error} /> : null}
      </td>
    </tr>
  );
}
