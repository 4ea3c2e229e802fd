// Whitelist rules: diagnostics they match are suppressed. Everyone reads; admins add, switch and
// delete.
import { useState } from 'preact/hooks';
import { del, post, put } from '../../api.js';
import { useApp } from '../../ctx.js';
import type { WhitelistRule, WhitelistRuleInput } from '../../types.js';
import { DataTable, ErrorNote, Section, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Field } from '../../components/forms.js';

const emptyRule = { machine: '', software: '', code_from: '', code_to: '', message: '', note: '' };

function ruleCodes(r: WhitelistRule): string {
  return r.code_from === r.code_to ? String(r.code_from) : `${r.code_from}–${r.code_to}`;
}

export function WhitelistSection() {
  const { t, canAdmin } = useApp();
  const rules = useFetch<{ items: WhitelistRule[] }>('/api/whitelist');
  const [f, setF] = useState(emptyRule);
  const set = (k: keyof typeof emptyRule) => (e: Event) => setF({ ...f, [k]: (e.currentTarget as HTMLInputElement).value });
  const create = useAction(async () => {
    const from = Number(f.code_from);
    const to = f.code_to.trim() === '' ? from : Number(f.code_to);
    const body: WhitelistRuleInput = {
      machine: f.machine.trim() || null,
      software: f.software.trim() || null,
      ...(from === to ? { code: from } : { code_from: from, code_to: to }),
      message: f.message.trim() || null,
      note: f.note.trim() || undefined,
    };
    await post<WhitelistRule>('/api/whitelist', body);
    setF(emptyRule);
    await rules.reload();
  });
  const toggle = useAction(async (r: WhitelistRule) => {
    const body: WhitelistRuleInput = { machine: r.machine, software: r.software, code_from: r.code_from, code_to: r.code_to, message: r.message, note: r.note, enabled: !r.enabled };
    await put<WhitelistRule>(`/api/whitelist/${r.id}`, body);
    await rules.reload();
  });
  const remove = useAction(async (r: WhitelistRule) => {
    if (!confirm(t('whitelist.confirmDelete', { codes: ruleCodes(r) }))) return;
    await del(`/api/whitelist/${r.id}`);
    await rules.reload();
  });
  return (
    <Section id="whitelist" title={t('whitelist.title')} busy={rules.loading}>
      <p class="muted small">{t('whitelist.intro')}</p>
      {canAdmin && (
        <ActionForm class="grid-form" onSubmit={create.run}>
          <Field id="wl-code-from" label={t('whitelist.codeFrom')}>
            <input id="wl-code-from" type="number" required step={1} value={f.code_from} onInput={set('code_from')} />
          </Field>
          <Field id="wl-code-to" label={t('whitelist.codeTo')}>
            <input id="wl-code-to" type="number" step={1} value={f.code_to} onInput={set('code_to')} placeholder={t('whitelist.codeToHint')} />
          </Field>
          <Field id="wl-machine" label={t('whitelist.machine')}>
            <input id="wl-machine" value={f.machine} pattern="[a-z0-9*?\-]{1,128}" onInput={set('machine')} placeholder="web-*" />
          </Field>
          <Field id="wl-software" label={t('whitelist.software')}>
            <input id="wl-software" value={f.software} pattern="[a-z0-9*?\-]{1,128}" onInput={set('software')} placeholder="agent" />
          </Field>
          <Field id="wl-message" label={t('whitelist.message')} class="wide">
            <input id="wl-message" value={f.message} maxLength={512} onInput={set('message')} placeholder="*disk*full*" />
          </Field>
          <Field id="wl-note" label={t('whitelist.note')} class="wide">
            <input id="wl-note" value={f.note} maxLength={1024} onInput={set('note')} />
          </Field>
          <div class="field">
            <button type="submit" class="primary" disabled={create.busy}>
              {t('whitelist.add')}
            </button>
          </div>
        </ActionForm>
      )}
      {create.error ? <ErrorNote error={create.error} /> : null}
      {rules.error ? <ErrorNote error={rules.error} onRetry={rules.reload} /> : null}
      {toggle.error ? <ErrorNote error={toggle.error} /> : null}
      {remove.error ? <ErrorNote error={remove.error} /> : null}
      <DataTable
        items={rules.data?.items}
        none={t('whitelist.none')}
        label={t('whitelist.title')}
        class="cards"
        cols={[t('whitelist.codes'), t('whitelist.machine'), t('whitelist.software'), t('whitelist.message'), t('whitelist.note'), t('whitelist.enabled')]}
        hidden={t('common.actions')}
        row={(r) => (
          <tr key={r.id} data-rule={r.id}>
            <td data-label={t('whitelist.codes')}>
              <code>{ruleCodes(r)}</code>
            </td>
            <td data-label={t('whitelist.machine')}>{r.machine ?? <span class="muted">{t('whitelist.any')}</span>}</td>
            <td data-label={t('whitelist.software')}>{r.software ?? <span class="muted">{t('whitelist.any')}</span>}</td>
            <td data-label={t('whitelist.message')}>{r.message ?? <span class="muted">{t('whitelist.any')}</span>}</td>
            <td data-label={t('whitelist.note')}>{r.note}</td>
            <td data-label={t('whitelist.enabled')}>
              {canAdmin ? (
                <label class="check">
                  <input type="checkbox" checked={r.enabled} disabled={toggle.busy} onChange={() => void toggle.run(r)} />
                  <span class="sr-only">{t('whitelist.enabledFor', { codes: ruleCodes(r) })}</span>
                </label>
              ) : r.enabled ? (
                t('common.yes')
              ) : (
                t('common.no')
              )}
            </td>
            <td>
              {canAdmin && (
                <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(r)}>
                  {t('common.delete')}
                  <span class="sr-only"> {ruleCodes(r)}</span>
                </button>
              )}
            </td>
          </tr>
        )}
      />
    </Section>
  );
}
