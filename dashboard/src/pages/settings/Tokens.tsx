// API tokens (admin): create one (shown once, with a copy button), list them, revoke one.
import { useState } from 'preact/hooks';
import { del, post } from '../../api.js';
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import type { ApiToken, CreatedToken } from '../../types.js';
import { DataTable, ErrorNote, Section, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Check, Field } from '../../components/forms.js';
import { SecretBox } from '../../components/SecretBox.js';
import { AdminOnly } from './AdminOnly.js';

export function TokensSection() {
  const { t, lang, canAdmin } = useApp();
  const tokens = useFetch<{ items: ApiToken[] }>(canAdmin ? '/api/tokens' : null);
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState({ ingest: true, read: false });
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const create = useAction(async () => {
    const sc = (['ingest', 'read'] as const).filter((s) => scopes[s]);
    const tok = await post<CreatedToken>('/api/tokens', { name: name.trim() || undefined, scopes: sc });
    setCreated(tok);
    setName('');
    await tokens.reload();
  });
  const revoke = useAction(async (tok: ApiToken) => {
    if (!confirm(t('tokens.confirmRevoke', { name: tok.name || tok.prefix }))) return;
    await del(`/api/tokens/${tok.id}`);
    await tokens.reload();
  });
  return (
    <Section id="tokens" title={t('tokens.title')}>
      <p class="muted small">{t('tokens.intro')}</p>
      <AdminOnly>
        <ActionForm class="inline-form" onSubmit={create.run}>
          <Field id="token-name" label={t('tokens.name')} class="grow">
            <input id="token-name" value={name} maxLength={100} onInput={(e) => setName(e.currentTarget.value)} placeholder={t('tokens.namePlaceholder')} />
          </Field>
          <fieldset class="field">
            <legend>{t('tokens.scopes')}</legend>
            <Check checked={scopes.ingest} onChange={(ingest) => setScopes({ ...scopes, ingest })}>
              {t('tokens.scope.ingest')}
            </Check>
            <Check checked={scopes.read} onChange={(read) => setScopes({ ...scopes, read })}>
              {t('tokens.scope.read')}
            </Check>
          </fieldset>
          <button type="submit" class="primary" disabled={create.busy || (!scopes.ingest && !scopes.read)}>
            {t('tokens.create')}
          </button>
        </ActionForm>
        {create.error ? <ErrorNote error={create.error} /> : null}
        {created && (
          <SecretBox
            id="new-token"
            title={t('tokens.created', { name: created.name || created.prefix })}
            note={t('tokens.onlyOnce')}
            label={t('tokens.value')}
            value={created.token}
            selectOnFocus
            onHide={() => setCreated(null)}
          />
        )}
        {tokens.error ? <ErrorNote error={tokens.error} onRetry={tokens.reload} /> : null}
        {revoke.error ? <ErrorNote error={revoke.error} /> : null}
        <DataTable
          items={tokens.data?.items}
          none={t('tokens.none')}
          label={t('tokens.title')}
          class="token-table cards"
          cols={[t('tokens.name'), t('tokens.prefix'), t('tokens.scopes'), t('tokens.createdAt'), t('tokens.state')]}
          hidden={t('common.actions')}
          row={(tok) => (
            <tr key={tok.id} data-token={tok.id} data-revoked={tok.revoked_at ? 'yes' : 'no'}>
              <td data-label={t('tokens.name')}>{tok.name || <span class="muted">—</span>}</td>
              <td data-label={t('tokens.prefix')}>
                <code>{tok.prefix}…</code>
              </td>
              <td data-label={t('tokens.scopes')}>{tok.scopes.join(', ')}</td>
              <td data-label={t('tokens.createdAt')}>{dateTime(tok.created_at, lang)}</td>
              <td data-label={t('tokens.state')}>
                {tok.revoked_at ? <span class="state state-cancelled">{t('tokens.revokedAt', { when: dateTime(tok.revoked_at, lang) })}</span> : <span class="state state-succeeded">{t('tokens.active')}</span>}
              </td>
              <td>
                {!tok.revoked_at && (
                  <button type="button" class="small danger" disabled={revoke.busy} onClick={() => void revoke.run(tok)}>
                    {t('tokens.revoke')}
                    <span class="sr-only"> {tok.name || tok.prefix}</span>
                  </button>
                )}
              </td>
            </tr>
          )}
        />
      </AdminOnly>
    </Section>
  );
}
