// Files the machine uploaded (this software's, or all), to download.
import { useState } from 'preact/hooks';
import { missingFeature, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { bytes, dateTime } from '../../format.js';
import type { Artifact } from '../../types.js';
import { DataTable, ErrorNote, Loading, Section, Unavailable, useFetch, useInterval } from '../../components/common.js';
import { Check } from '../../components/forms.js';

export function ArtifactsSection({ machineId, software }: { machineId: string; software: string }) {
  const { t, lang } = useApp();
  const [all, setAll] = useState(false);
  const arts = useFetch<{ items: Artifact[]; total: number }>(`/api/machines/${machineId}/artifacts${qs({ software: all ? null : software, limit: 100 })}`);
  useInterval(() => void arts.reload(), 60_000);
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
      <DataTable
        items={arts.data?.items}
        none={t('artifacts.none')}
        label={t('artifacts.title')}
        class="cards"
        cols={[t('artifacts.file'), t('artifacts.size'), t('artifacts.software'), t('artifacts.uploaded'), 'SHA-256']}
        row={(a) => (
          <tr key={a.id}>
            <td data-label={t('artifacts.file')}>
              <a href={a.download} download={a.filename}>
                {a.filename}
              </a>
            </td>
            <td data-label={t('artifacts.size')}>{bytes(a.size, lang)}</td>
            <td data-label={t('artifacts.software')}>{a.software}</td>
            <td data-label={t('artifacts.uploaded')}>{dateTime(a.uploaded_at, lang)}</td>
            <td data-label="SHA-256">{a.sha256 ? <code title={a.sha256}>{a.sha256.slice(0, 12)}…</code> : <span class="muted">—</span>}</td>
          </tr>
        )}
      >
        {arts.data && arts.data.total > arts.data.items.length && <p class="muted small">{t('artifacts.more', { shown: arts.data.items.length, total: arts.data.total })}</p>}
      </DataTable>
    </Section>
  );
}
