// The colour history: every change of the light with its reason, live from the event stream.
import { missingFeature, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import { reasonText } from '../../i18n.js';
import { useLive } from '../../live.js';
import type { LightEvent } from '../../types.js';
import { ErrorNote, LightBadge, Listed, Loading, Section, Unavailable, useFetch } from '../../components/common.js';

const CAUSES = ['report', 'expiry', 'sweep'] as const;
type Cause = (typeof CAUSES)[number];

export function HistorySection({ id }: { id: string }) {
  const { t, lang } = useApp();
  const ev = useFetch<{ items: LightEvent[] }>(`/api/instances/${id}/events${qs({ limit: 100 })}`);
  useLive(
    (m) => {
      if (m.type === 'open') return void ev.reload();
      if (m.event.instance_id !== id) return;
      ev.setData((d) => (d && !d.items.some((x) => x.id === m.event.id) ? { items: [m.event, ...d.items] } : d));
    },
    [id, ev.reload],
  );
  return (
    <Section id="history" title={t('history.title')}>
      {missingFeature(ev.error) ? <Unavailable /> : ev.error ? <ErrorNote error={ev.error} onRetry={ev.reload} /> : null}
      {!ev.data && !ev.error ? <Loading /> : null}
      <Listed items={ev.data?.items} none={t('history.none')}>
        {(items) => (
          <ol class="timeline">
            {items.map((e) => (
              <li key={e.id} data-event={e.id}>
                <time dateTime={e.at}>{dateTime(e.at, lang)}</time>
                <span class="change">
                  {e.from ? <LightBadge light={e.from} compact /> : <span class="muted">—</span>} <span aria-label={t('history.to')}>→</span> <LightBadge light={e.to} compact />
                </span>
                <span class="reason">{reasonText(e.reason, t)}</span>
                {e.cause && <span class="muted small">{CAUSES.includes(e.cause as Cause) ? t(`history.cause.${e.cause as Cause}`) : e.cause}</span>}
              </li>
            ))}
          </ol>
        )}
      </Listed>
    </Section>
  );
}
