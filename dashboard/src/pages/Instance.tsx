// One instance: its light and facts, the latest status with the snapshot tree, diagnostics with help
// texts (DE/EN), the colour history, the machine's host metrics, artifacts, agent commands, and
// retiring it (admins).
// Each section is a file in instance/ and reads its own endpoint, so one that fails (or a server
// without that feature) does not take the others down.
import { ApiError } from '../api.js';
import { useApp } from '../ctx.js';
import { shortTime } from '../format.js';
import { useLive } from '../live.js';
import { reasonText } from '../i18n.js';
import type { InstanceDetail } from '../types.js';
import { ErrorNote, JumpLinks, LightBadge, Loading, NotFoundNote, PageTitle, useFetch, useInterval } from '../components/common.js';
import { useTitle } from '../components/title.js';
import { Facts } from './instance/Facts.js';
import { StatusSection } from './instance/Status.js';
import { DiagnosticsSection } from './instance/Diagnostics.js';
import { HistorySection } from './instance/History.js';
import { MetricsSection } from './instance/Metrics.js';
import { ArtifactsSection } from './instance/Artifacts.js';
import { CommandsSection } from './instance/Commands.js';
import { RetireSection } from './instance/Retire.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function InstancePage({ id }: { id: string }) {
  const { t, lang } = useApp();
  const valid = UUID_RE.test(id);
  const inst = useFetch<InstanceDetail>(valid ? `/api/instances/${id}` : null);
  const name = inst.data ? `${inst.data.machine} / ${inst.data.software}` : t('instance.title');
  useTitle(name);

  useLive(
    (m) => {
      if (m.type === 'open') return void inst.reload();
      if (m.event.instance_id !== id) return;
      inst.setData((d) => (d ? { ...d, light: m.event.to, light_reason: m.event.reason, light_since: m.event.at } : d));
      // A change away from late or red came with a heartbeat: its deadline moved too.
      if (m.event.from === 'late' || m.event.from === 'red' || m.event.from === 'maintenance') void inst.reload();
    },
    [id, inst.reload],
  );
  useInterval(() => void inst.reload(), 15_000);

  if (!valid || (inst.error instanceof ApiError && (inst.error.status === 404 || inst.error.status === 400))) {
    return <NotFoundNote title={t('instance.notFound')} />;
  }
  if (!inst.data) return inst.error ? <ErrorNote error={inst.error} onRetry={inst.reload} /> : <Loading />;
  const i = inst.data;

  return (
    <>
      <nav aria-label={t('instance.breadcrumb')} class="crumbs">
        <a href="/">{t('nav.fleet')}</a> <span aria-hidden="true">›</span> <span>{name}</span>
      </nav>
      <div class="page-head">
        <PageTitle>
          {i.machine} <span class="sep">/</span> {i.software}
        </PageTitle>
        <LightBadge light={i.light} reason={i.light_reason} />
      </div>
      <p class="light-reason" data-testid="light-reason">
        {reasonText(i.light_reason, t)}
        {i.light_since && (
          <span class="muted">
            {' '}
            · {t('instance.since', { when: shortTime(i.light_since, lang) })}
          </span>
        )}
      </p>

      <Facts i={i} />

      <JumpLinks
        label={t('instance.sections')}
        links={[
          ['status', t('instance.status')],
          ['diagnostics', t('diag.title')],
          ['history', t('history.title')],
          ['metrics', t('metrics.title')],
          ['artifacts', t('artifacts.title')],
          ['commands', t('commands.title')],
        ]}
      />

      <StatusSection id={id} />
      <DiagnosticsSection id={id} />
      <HistorySection id={id} />
      <MetricsSection machineId={i.machine_id} machine={i.machine} />
      <ArtifactsSection machineId={i.machine_id} software={i.software} />
      <CommandsSection id={id} name={name} />
      <RetireSection i={i} />
    </>
  );
}
