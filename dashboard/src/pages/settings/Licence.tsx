// The licence: tier, devices seen against the limit, and the grace period once over it.
import { useApp } from '../../ctx.js';
import { dateTime, number } from '../../format.js';
import type { LicenceStatus } from '../../types.js';
import { ErrorNote, Loading, Section, useFetch } from '../../components/common.js';

export function LicenceSection() {
  const { t, lang } = useApp();
  const lic = useFetch<LicenceStatus>('/api/dashboard/license-status');
  const l = lic.data;
  const g = l?.grace_period;
  return (
    <Section id="licence" title={t('licence.title')} busy={lic.loading}>
      {lic.error ? <ErrorNote error={lic.error} onRetry={lic.reload} /> : null}
      {!l && !lic.error ? <Loading /> : null}
      {l && g && (
        <>
          <p>
            <span class="tag">{t(`licence.tier.${l.tier}`)}</span>{' '}
            <span class={`limit limit-${l.limit_status}`} data-limit={l.limit_status}>
              {t(`licence.status.${l.limit_status}`)}
            </span>
          </p>
          <label for="licence-usage" class="small">
            {t('licence.devices', { count: l.device_count, limit: l.device_limit, days: l.window_days })}
          </label>
          <progress id="licence-usage" class={`usage usage-${l.limit_status}`} max={100} value={Math.min(100, l.usage_percent)}>
            {number(l.usage_percent, lang, 0)} %
          </progress>
          {g.active && (
            <p class="note warn" role="status">
              {t('licence.graceActive', { days: g.days_left ?? 0, end: dateTime(g.ends_at, lang) })}
            </p>
          )}
          {l.new_machines_refused && (
            <p class="note error" role="alert">
              {t('licence.refused')}
            </p>
          )}
          {!g.active && !l.new_machines_refused && <p class="muted small">{t('licence.graceInfo', { days: g.days })}</p>}
        </>
      )}
    </Section>
  );
}
