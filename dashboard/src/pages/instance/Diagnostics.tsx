// Diagnostics, newest first: filtered by severity, suppressed ones (whitelist) on request, each with
// its help text behind a button.
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { shortTime } from '../../format.js';
import type { Diagnostic } from '../../types.js';
import { DataTable, ErrorNote, Loading, Section, useFetch, useInterval } from '../../components/common.js';
import { Check, Field, Select } from '../../components/forms.js';
import { HelpPanel } from './HelpPanel.js';

const SEVERITIES = [0, 1, 2] as const;

const severityKey = (s: number) => (s >= 2 ? 'error' : s === 1 ? 'warning' : 'info');

function Severity({ s }: { s: number }) {
  const { t } = useApp();
  const k = severityKey(s);
  return (
    <span class={`sev sev-${k}`}>
      <span aria-hidden="true">{s >= 2 ? '■' : s === 1 ? '▲' : '●'}</span> {t(`severity.${k}`)}
    </span>
  );
}

export function DiagnosticsSection({ id }: { id: string }) {
  const { t, lang } = useApp();
  const [minSev, setMinSev] = useState(0);
  const [suppressed, setSuppressed] = useState(false);
  const [open, setOpen] = useState<string | null>(null);
  const path = `/api/instances/${id}/diagnostics${qs({ severity: minSev || null, suppressed: suppressed ? 'include' : null, limit: 200 })}`;
  const diags = useFetch<{ items: Diagnostic[] }>(path);
  useInterval(() => void diags.reload(), 30_000);
  const key = (d: Diagnostic) => `${d.report_id}:${d.item}`;
  return (
    <Section
      id="diagnostics"
      title={t('diag.title')}
      actions={
        <>
          <Field id="diag-sev" label={t('diag.minSeverity')} class="inline">
            <Select id="diag-sev" value={minSev} values={SEVERITIES} label={(s) => t(`severity.${severityKey(s)}`)} onChange={setMinSev} />
          </Field>
          <Check checked={suppressed} onChange={setSuppressed}>
            {t('diag.showSuppressed')}
          </Check>
        </>
      }
    >
      {diags.error ? <ErrorNote error={diags.error} onRetry={diags.reload} /> : null}
      {!diags.data && !diags.error ? <Loading /> : null}
      <DataTable
        items={diags.data?.items}
        none={suppressed ? t('diag.none') : t('diag.noneUnsuppressed')}
        label={t('diag.title')}
        class="diag-table cards"
        cols={[t('diag.time'), t('diag.severity'), t('diag.code'), t('diag.message')]}
        hidden={t('diag.help')}
        row={(d) => {
          const k = key(d);
          const isOpen = open === k;
          return (
            <Fragment key={k}>
              <tr class={d.suppressed ? 'suppressed' : ''} data-code={d.code}>
                <td data-label={t('diag.time')}>
                  <time dateTime={d.received_at}>{shortTime(d.received_at, lang)}</time>
                </td>
                <td data-label={t('diag.severity')}>
                  <Severity s={d.severity} />
                </td>
                <td data-label={t('diag.code')}>
                  <code>{d.code}</code>
                </td>
                <td data-label={t('diag.message')}>
                  {d.message || <span class="muted">—</span>}
                  {d.suppressed && <span class="tag">{t('diag.suppressed')}</span>}
                </td>
                <td>
                  <button type="button" class="small" aria-expanded={isOpen} aria-controls={`help-${k}`} onClick={() => setOpen(isOpen ? null : k)}>
                    {isOpen ? t('diag.hideHelp') : t('diag.help')}
                    <span class="sr-only"> {d.code}</span>
                  </button>
                </td>
              </tr>
              {isOpen && (
                <tr class="help-row">
                  <td colSpan={5} id={`help-${k}`}>
                    <HelpPanel id={id} code={d.code} />
                  </td>
                </tr>
              )}
            </Fragment>
          );
        }}
      />
    </Section>
  );
}
