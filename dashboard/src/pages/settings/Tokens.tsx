// API tokens (admin): create one (shown once, with a copy button), optionally bound to a machine
// (or a machine-name pattern) and expiring; list them with who created them and when they were
// last used; revoke one.
import { useState } from 'preact/hooks';
import { del, post } from '../../api.js';
import { useApp } from '../../ctx.js';
import { ago, dateTime } from '../../format.js';
import type { ApiToken, CreatedToken } from '../../types.js';
import { DataTable, ErrorNote, Section, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Check, Field, Select } from '../../components/forms.js';
import { SecretBox } from '../../components/SecretBox.js';
import { AdminOnly } from './AdminOnly.js';

/** Expiry choices of the form, in days (0: never). */
const EXPIRY_DAYS = [0, 7, 30, 90, 365] as const;
type ExpiryDays = (typeof EXPIRY_DAYS)[number];

export function TokensSection() {
  const { t, lang, canAdmin } = useApp();
  const tokens = useFetch<{ items: ApiToken[] }>(canAdmin ? '/api/tokens' : null);
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState({ ingest: true, read: false });
  const [machine, setMachine] = useState('');
  const [expiryDays, setExpiryDays] = useState<ExpiryDays>(0);
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const bound = machine.trim() !== '';
  const create = useAction(async () => {
    // A machine-bound token has the ingest scope only.
    const sc = bound ? ['ingest' as const] : (['ingest', 'read'] as const).filter((s) => scopes[s]);
    const tok = await post<CreatedToken>('/api/tokens', {
      name: name.trim() || undefined,
      scopes: sc,
      machine: bound ? machine.trim() : undefined,
      expires_at: expiryDays ? new Date(Date.now() + expiryDays * 86_400_000).toISOString() : undefined,
    });
    setCreated(tok);
    setName('');
    setMachine('');
    setExpiryDays(0);
    await tokens.reload();
  });
  const expired = (tok: ApiToken) => tok.expires_at !== null && Date.parse(tok.expires_at) <= Date.now();
  const revoke = useAction(async (tok: ApiToken) => {
    if (!confirm(t('tokens.confirmRevoke', { name: tok.name || tok.prefix }))) return;
    await del(`/api/tokens/${tok.id}`);
    await tokens.reload();
  });
  return (
    <Section id="tokens" title={t('tokens.title')} busy={tokens.loading}>
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
            <Check checked={scopes.read && !bound} onChange={(read) => setScopes({ ...scopes, read })}>
              {t('tokens.scope.read')}
            </Check>
          </fieldset>
          <Field id="token-machine" label={t('tokens.machine')}>
            <input
              id="token-machine"
              value={machine}
              maxLength={128}
              pattern="[a-z0-9*?\-]{1,128}"
              title={t('tokens.machineHint')}
              placeholder={t('tokens.machinePlaceholder')}
              onInput={(e) => setMachine(e.currentTarget.value)}
            />
          </Field>
          <Field id="token-expires" label={t('tokens.expires')}>
            <Select
              id="token-expires"
              value={expiryDays}
              values={EXPIRY_DAYS}
              label={(d) => (d === 0 ? t('tokens.expires.never') : t('tokens.expires.days', { n: d }))}
              onChange={setExpiryDays}
            />
          </Field>
          <button type="submit" class="primary" disabled={create.busy || (!bound && !scopes.ingest && !scopes.read)}>
            {t('tokens.create')}
          </button>
        </ActionForm>
        <p class="muted small">{t('tokens.machineHint')}</p>
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
          cols={[t('tokens.name'), t('tokens.prefix'), t('tokens.scopes'), t('tokens.machine'), t('tokens.createdAt'), t('tokens.lastUsed'), t('tokens.expires'), t('tokens.state')]}
          hidden={t('common.actions')}
          row={(tok) => (
            <tr key={tok.id} data-token={tok.id} data-revoked={tok.revoked_at ? 'yes' : 'no'} data-expired={expired(tok) ? 'yes' : 'no'}>
              <td data-label={t('tokens.name')}>{tok.name || <span class="muted">—</span>}</td>
              <td data-label={t('tokens.prefix')}>
                <code>{tok.prefix}…</code>
              </td>
              <td data-label={t('tokens.scopes')}>{tok.scopes.join(', ')}</td>
              <td data-label={t('tokens.machine')} data-machine={tok.machine ?? ''}>
                {tok.machine ? <code>{tok.machine}</code> : <span class="muted">{t('tokens.anyMachine')}</span>}
              </td>
              <td data-label={t('tokens.createdAt')}>
                {dateTime(tok.created_at, lang)}
                <br />
                <span class="muted small">{tok.created_by ? t('tokens.createdBy', { who: tok.created_by.email }) : t('tokens.createdByCli')}</span>
              </td>
              <td data-label={t('tokens.lastUsed')} title={tok.last_used_at ? dateTime(tok.last_used_at, lang) : undefined}>
                {tok.last_used_at ? ago(tok.last_used_at, lang) : <span class="muted">{t('tokens.neverUsed')}</span>}
              </td>
              <td data-label={t('tokens.expires')}>{tok.expires_at ? dateTime(tok.expires_at, lang) : <span class="muted">{t('tokens.expires.never')}</span>}</td>
              <td data-label={t('tokens.state')}>
                {tok.revoked_at ? (
                  <span class="state state-cancelled">{t('tokens.revokedAt', { when: dateTime(tok.revoked_at, lang) })}</span>
                ) : expired(tok) ? (
                  <span class="state state-cancelled">{t('tokens.expired')}</span>
                ) : (
                  <span class="state state-succeeded">{t('tokens.active')}</span>
                )}
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
