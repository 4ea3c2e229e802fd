// What the instance reported about itself with its last heartbeat, and where it belongs; its
// timeout (from its timeout rule or the default), its late share, and the deadline and late time
// that follow from its last heartbeat (docs/api.md "Timeout rules").
import { useApp } from '../../ctx.js';
import { ago, dateTime, duration, shortTime } from '../../format.js';
import type { InstanceDetail } from '../../types.js';
import { statusKey } from '../Fleet.js';

export function Facts({ i }: { i: InstanceDetail }) {
  const { t, lang } = useApp();
  /** "in 3 min (18:40:12)" / "2 min ago (18:33:05)". */
  const when = (iso: string | null) => (iso ? `${ago(iso, lang)} (${shortTime(iso, lang)})` : '—');
  return (
    <dl class="facts">
      <Fact k={t('instance.status')} v={i.status ? t(statusKey(i.status)) : '—'} />
      <Fact k={t('instance.lastHeartbeat')} v={i.last_heartbeat_at ? `${ago(i.last_heartbeat_at, lang)} (${shortTime(i.last_heartbeat_at, lang)})` : t('fleet.never')} />
      <Fact k={t('instance.version')} v={i.version ?? '—'} />
      <Fact k={t('instance.uptime')} v={duration(i.uptime_seconds)} />
      <Fact k={t('instance.group')} v={i.group ?? '—'} />
      <Fact k={t('instance.location')} v={i.location ?? '—'} />
      <Fact k={t('instance.priorities')} v={`${i.group_priority ?? '—'} / ${i.sort_priority ?? '—'}`} />
      <Fact k={t('instance.ips')} v={i.ip_addresses.length ? i.ip_addresses.join(', ') : '—'} />
      <Fact k={t('instance.pid')} v={i.pid === null ? '—' : String(i.pid)} />
      <Fact k={t('instance.firstSeen')} v={dateTime(i.first_seen_at, lang)} />
      <Fact k={t('instance.timeout')} v={duration(i.timeout_s)} name="timeout" />
      {i.late_percent > 0 && <Fact k={t('instance.lateShare')} v={t('instance.lateShareValue', { p: i.late_percent, after: duration((i.timeout_s * i.late_percent) / 100) })} name="late-share" />}
      <Fact k={t('instance.deadline')} v={when(i.deadline)} name="deadline" />
      {i.late_at && <Fact k={t('instance.lateAt')} v={when(i.late_at)} name="late-at" />}
      {i.maintenance_until && <Fact k={t('instance.maintenanceUntil')} v={when(i.maintenance_until)} name="maintenance-until" />}
    </dl>
  );
}

function Fact({ k, v, name }: { k: string; v: string; name?: string }) {
  return (
    <div data-fact={name}>
      <dt>{k}</dt>
      <dd>{v}</dd>
    </div>
  );
}
