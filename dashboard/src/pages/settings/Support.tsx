// Support: the channels of the customer's tier and, where there is one, the personal contact.
import { useApp } from '../../ctx.js';
import type { SupportInfo } from '../../types.js';
import { ErrorNote, Loading, Section, useFetch } from '../../components/common.js';

export function SupportSection() {
  const { t } = useApp();
  const sup = useFetch<SupportInfo>('/api/support-info');
  const s = sup.data;
  const href = (kind: string, v: string) => (kind === 'email' ? `mailto:${v}` : kind === 'phone' ? `tel:${v.replace(/[^+\d]/g, '')}` : /^https?:\/\//.test(v) ? v : undefined);
  return (
    <Section id="support" title={t('support.title')} busy={sup.loading}>
      {sup.error ? <ErrorNote error={sup.error} onRetry={sup.reload} /> : null}
      {!s && !sup.error ? <Loading /> : null}
      {s && (
        <>
          <ul class="contacts">
            {s.channels.map((c) => (
              <li key={c.kind + c.value}>
                <strong>{c.label}</strong>: {href(c.kind, c.value) ? <a href={href(c.kind, c.value)}>{c.value}</a> : c.value}
                {c.hours && <span class="muted small"> ({c.hours})</span>}
              </li>
            ))}
          </ul>
          {s.contact && (
            <p>
              {t('support.contact')}: <strong>{s.contact.name}</strong> · <a href={`mailto:${s.contact.email}`}>{s.contact.email}</a>
              {s.contact.phone && <> · {s.contact.phone}</>}
            </p>
          )}
        </>
      )}
    </Section>
  );
}
