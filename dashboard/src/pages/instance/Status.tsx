// The latest status report: the status word, its message, and the snapshot as a tree.
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import type { InstanceStatus } from '../../types.js';
import { ErrorNote, Loading, Section, useFetch, useInterval } from '../../components/common.js';
import { SnapshotTree } from '../../components/SnapshotTree.js';
import { statusKey } from '../Fleet.js';

export function StatusSection({ id }: { id: string }) {
  const { t, lang } = useApp();
  const st = useFetch<InstanceStatus>(`/api/instances/${id}/status`);
  useInterval(() => void st.reload(), 30_000);
  return (
    <Section id="status" title={t('instance.status')}>
      {st.error ? <ErrorNote error={st.error} onRetry={st.reload} /> : null}
      {!st.data ? (
        st.error ? null : <Loading />
      ) : st.data.status === null ? (
        <p class="muted">{t('instance.noStatus')}</p>
      ) : (
        <>
          <p>
            <span class={`status status-${st.data.status}`}>{t(statusKey(st.data.status))}</span>
            {st.data.message && <span> — {st.data.message}</span>}
            <span class="muted small"> · {dateTime(st.data.status_at, lang)}</span>
          </p>
          <h3>{t('instance.snapshot')}</h3>
          <SnapshotTree snapshot={st.data.snapshot} />
        </>
      )}
    </Section>
  );
}
