// What the instance reported about itself with its last heartbeat, and where it belongs.
import { useApp } from '../../ctx.js';
import { ago, dateTime, duration, shortTime } from '../../format.js';
import type { InstanceDetail } from '../../types.js';
import { statusKey } from '../Fleet.js';

export function Facts({ i }: { i: InstanceDetail }) {
  const { t, lang } = useApp();
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
    </dl>
  );
}

function Fact({ k, v }: { k: string; v: string }) {
  return (
    <div>
      <dt>{k}</dt>
      <dd>{v}</dd>
    </div>
  );
}
