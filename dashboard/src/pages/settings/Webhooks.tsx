// Webhooks (admin): add one (its signing secret shown once), see whether it delivers, its recent
// deliveries, delete it. A server without webhooks says so.
import { useState } from 'preact/hooks';
import { del, missingFeature, post, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import type { Webhook, WebhookDelivery } from '../../types.js';
import { DataTable, ErrorNote, Listed, Loading, Section, Unavailable, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Field } from '../../components/forms.js';
import { SecretBox } from '../../components/SecretBox.js';
import { AdminOnly } from './AdminOnly.js';

export function WebhooksSection() {
  const { t, lang, canAdmin } = useApp();
  const hooks = useFetch<{ items: Webhook[] }>(canAdmin ? '/api/webhooks' : null);
  const [url, setUrl] = useState('');
  const [description, setDescription] = useState('');
  const [created, setCreated] = useState<Webhook | null>(null);
  const [openDeliveries, setOpenDeliveries] = useState<string | null>(null);
  const create = useAction(async () => {
    const h = await post<Webhook>('/api/webhooks', { url: url.trim(), description: description.trim() || undefined });
    setCreated(h);
    setUrl('');
    setDescription('');
    await hooks.reload();
  });
  const remove = useAction(async (h: Webhook) => {
    if (!confirm(t('webhooks.confirmDelete', { url: h.url }))) return;
    await del(`/api/webhooks/${h.id}`);
    await hooks.reload();
  });
  if (missingFeature(hooks.error)) {
    return (
      <Section id="webhooks" title={t('webhooks.title')}>
        <Unavailable />
      </Section>
    );
  }
  return (
    <Section id="webhooks" title={t('webhooks.title')}>
      <p class="muted small">{t('webhooks.intro')}</p>
      <AdminOnly>
        <ActionForm class="inline-form" onSubmit={create.run}>
          <Field id="webhook-url" label={t('webhooks.url')} class="grow">
            <input id="webhook-url" type="url" required value={url} maxLength={2048} placeholder="https://example.com/fleet-hook" onInput={(e) => setUrl(e.currentTarget.value)} />
          </Field>
          <Field id="webhook-desc" label={t('webhooks.description')} class="grow">
            <input id="webhook-desc" value={description} maxLength={256} onInput={(e) => setDescription(e.currentTarget.value)} />
          </Field>
          <button type="submit" class="primary" disabled={create.busy}>
            {t('webhooks.add')}
          </button>
        </ActionForm>
        {create.error ? <ErrorNote error={create.error} /> : null}
        {created?.secret && (
          <SecretBox
            id="new-secret"
            title={t('webhooks.created')}
            note={t('webhooks.onlyOnce')}
            label={t('webhooks.secret')}
            value={created.secret}
            selectOnFocus
            onHide={() => setCreated(null)}
          />
        )}
        {hooks.error ? <ErrorNote error={hooks.error} onRetry={hooks.reload} /> : null}
        {remove.error ? <ErrorNote error={remove.error} /> : null}
        <Listed items={hooks.data?.items} none={t('webhooks.none')}>
          {(items) => (
            <ul class="hook-list">
              {items.map((h) => (
                <li key={h.id} data-webhook={h.id}>
                  <div class="hook-main">
                    <div>
                      <code class="break">{h.url}</code>
                      {h.description && <div class="muted small">{h.description}</div>}
                      <div class="small">
                        {h.consecutive_failures ? (
                          <span class="state state-failed">{t('webhooks.failing', { n: h.consecutive_failures, error: h.last_error ?? '' })}</span>
                        ) : h.last_success_at ? (
                          <span class="state state-succeeded">{t('webhooks.lastOk', { when: dateTime(h.last_success_at, lang) })}</span>
                        ) : (
                          <span class="muted">{t('webhooks.nothingYet')}</span>
                        )}
                      </div>
                    </div>
                    <div class="row">
                      <button type="button" class="small" aria-expanded={openDeliveries === h.id} onClick={() => setOpenDeliveries(openDeliveries === h.id ? null : h.id)}>
                        {t('webhooks.deliveries')}
                      </button>
                      <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(h)}>
                        {t('common.delete')}
                        <span class="sr-only"> {h.url}</span>
                      </button>
                    </div>
                  </div>
                  {openDeliveries === h.id && <Deliveries id={h.id} />}
                </li>
              ))}
            </ul>
          )}
        </Listed>
      </AdminOnly>
    </Section>
  );
}

function Deliveries({ id }: { id: string }) {
  const { t, lang } = useApp();
  const d = useFetch<{ items: WebhookDelivery[] }>(`/api/webhooks/${id}/deliveries${qs({ limit: 20 })}`);
  if (d.error) return <ErrorNote error={d.error} onRetry={d.reload} />;
  if (!d.data) return <Loading />;
  if (d.data.items.length === 0) return <p class="muted small">{t('webhooks.noDeliveries')}</p>;
  return (
    <DataTable
      items={d.data.items}
      label={t('webhooks.deliveries')}
      class="small-table"
      cols={[t('webhooks.event'), t('commands.state'), t('webhooks.attempts'), t('webhooks.last')]}
      row={(x) => (
        <tr key={x.event_id}>
          <td>
            {t(`light.${x.from}`)} → {t(`light.${x.to}`)} <span class="muted small">{dateTime(x.event_at, lang)}</span>
          </td>
          <td>
            <span class={`state state-${x.state === 'delivered' ? 'succeeded' : x.state === 'failed' ? 'failed' : 'queued'}`}>{t(`webhooks.st.${x.state}`)}</span>
          </td>
          <td>{x.attempts}</td>
          <td>{x.last_status ? `HTTP ${x.last_status}` : x.last_error ?? '—'}</td>
        </tr>
      )}
    />
  );
}
