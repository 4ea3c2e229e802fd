// Files the machine uploaded (this software's, or all), to download; an admin deletes one (its bytes
// and its room in the quota artifact_bytes, DELETE /api/artifacts/{id}).
import { useState } from 'preact/hooks';
import { del, missingFeature, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { bytes, dateTime } from '../../format.js';
import type { Artifact } from '../../types.js';
import { DataTable, ErrorNote, Loading, Section, Unavailable, useAction, useFetch, useInterval } from '../../components/common.js';
import { Check } from '../../components/forms.js';

export function ArtifactsSection({ machineId, software }: { machineId: string; software: string }) {
  const { t, lang, canAdmin } = useApp();
  const [all, setAll] = useState(false);
  const arts = useFetch<{ items: Artifact[]; total: number }>(`/api/machines/${machineId}/artifacts${qs({ software: all ? null : software, limit: 100 })}`);
  useInterval(() => void arts.reload(), 60_000);
  const remove = useAction(async (a: Artifact) => {
    if (!confirm(t('artifacts.confirmDelete', { file: a.filename }))) return;
    await del(`/api/artifacts/${a.id}`);
    await arts.reload();
  });
  return (
    <Section
      id="artifacts"
      title={t('artifacts.title')}
      actions={
        <Check checked={all} onChange={setAll}>
          {t('artifacts.allSoftware')}
        </Check>
      }
    >
      {missingFeature(arts.error) ? <Unavailable /> : arts.error ? <ErrorNote error={arts.error} onRetry={arts.reload} /> : null}
      {!arts.data && !arts.error ? <Loading /> : null}
      {remove.error ? <ErrorNote error={remove.error} /> : null}
      <DataTable
        items={arts.data?.items}
        none={t('artifacts.none')}
        label={t('artifacts.title')}
        class="cards"
        cols={[t('artifacts.file'), t('artifacts.size'), t('artifacts.software'), t('artifacts.uploaded'), 'SHA-256']}
        hidden={canAdmin ? t('common.actions') : undefined}
        row={(a) => (
          <tr key={a.id} data-artifact={a.id}>
            <td data-label={t('artifacts.file')}>
              <a href={a.download} download={a.filename}>
                {a.filename}
              </a>
            </td>
            <td data-label={t('artifacts.size')}>{bytes(a.size, lang)}</td>
            <td data-label={t('artifacts.software')}>{a.software}</td>
            <td data-label={t('artifacts.uploaded')}>{dateTime(a.uploaded_at, lang)}</td>
            <td data-label="SHA-256">{a.sha256 ? <code title={a.sha256}>{a.sha256.slice(0, 12)}…</code> : <span class="muted">—</span>}</td>
            {canAdmin && (
              <td data-label={t('common.actions')}>
                <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(a)}>
                  {t('common.delete')}
                  <span class="sr-only"> {a.filename}</span>
                </button>
              </td>
            )}
          </tr>
        )}
      >
        {arts.data && arts.data.total > arts.data.items.length && <p class="muted small">{t('artifacts.more', { shown: arts.data.items.length, total: arts.data.total })}</p>}
      </DataTable>
    </Section>
  );
}
