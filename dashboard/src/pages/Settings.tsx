// Settings of the active customer: licence and grace period, the onboarding checklist, API tokens
// (a new token is shown once, with a copy button), webhooks (the secret likewise), whitelist rules,
// members, and the support contacts. Changing needs the admin role (members: owner); viewers read.
import { useState } from 'preact/hooks';
import { del, missingFeature, post, put, qs } from '../api.js';
import { useApp } from '../ctx.js';
import { dateTime, number } from '../format.js';
import type { ApiToken, CreatedToken, LicenceStatus, Member, OnboardingStatus, Role, SupportInfo, Webhook, WebhookDelivery, WhitelistRule, WhitelistRuleInput } from '../types.js';
import { ErrorNote, Loading, Scroll, Section, Unavailable, useAction, useFetch, TableHead } from '../components/common.js';
import { SecretBox } from '../components/SecretBox.js';
import { useTitle } from '../components/title.js';

export function SettingsPage() {
  const { t, role } = useApp();
  useTitle(t('settings.title'));
  const isOwner = role === 'owner';
  return (
    <>
      <div class="page-head">
        <h1 id="page-title" tabIndex={-1}>
          {t('settings.title')}
        </h1>
      </div>
      <nav class="jump" aria-label={t('settings.sections')}>
        <a href="#licence">{t('licence.title')}</a>
        <a href="#onboarding">{t('onboarding.title')}</a>
        <a href="#tokens">{t('tokens.title')}</a>
        <a href="#webhooks">{t('webhooks.title')}</a>
        <a href="#whitelist">{t('whitelist.title')}</a>
        {isOwner && <a href="#members">{t('members.title')}</a>}
        <a href="#support">{t('support.title')}</a>
      </nav>
      <div class="settings-grid">
        <LicenceSection />
        <OnboardingSection />
      </div>
      <TokensSection />
      <WebhooksSection />
      <WhitelistSection />
      {isOwner && <MembersSection />}
      <SupportSection />
    </>
  );
}

function LicenceSection() {
  const { t, lang } = useApp();
  const lic = useFetch<LicenceStatus>('/api/dashboard/license-status');
  const l = lic.data;
  const g = l?.grace_period;
  return (
    <Section id="licence" title={t('licence.title')}>
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

const STEPS = ['token_created', 'first_heartbeat', 'first_diagnostics', 'first_status', 'help_texts', 'teammate_invited'] as const;
type Step = (typeof STEPS)[number];

function OnboardingSection() {
  const { t, lang } = useApp();
  const ob = useFetch<OnboardingStatus>('/api/onboarding/status');
  const o = ob.data;
  return (
    <Section id="onboarding" title={t('onboarding.title')}>
      {ob.error ? <ErrorNote error={ob.error} onRetry={ob.reload} /> : null}
      {!o && !ob.error ? <Loading /> : null}
      {o && (
        <>
          <label for="onboarding-progress" class="small">
            {o.complete ? t('onboarding.complete') : t('onboarding.progress', { done: o.done, total: o.total })}
          </label>
          <progress id="onboarding-progress" max={o.total} value={o.done}>
            {o.percent} %
          </progress>
          <ol class="checklist">
            {o.steps.map((s) => (
              <li key={s.key} class={s.done ? 'done' : ''} data-step={s.key}>
                <span class="tick" aria-hidden="true">
                  {s.done ? '✓' : ''}
                </span>
                <div>
                  <strong>{STEPS.includes(s.key as Step) ? t(`onboarding.step.${s.key as Step}`) : s.title}</strong>
                  <span class="sr-only"> — {s.done ? t('onboarding.done') : t('onboarding.open')}</span>
                  <div class="muted small">{s.done ? t('onboarding.doneAt', { when: dateTime(s.done_at, lang) }) : STEPS.includes(s.key as Step) ? t(`onboarding.hint.${s.key as Step}`) : s.hint}</div>
                </div>
              </li>
            ))}
          </ol>
        </>
      )}
    </Section>
  );
}

function NeedsRole({ role }: { role: Role }) {
  const { t } = useApp();
  return <p class="muted">{t('settings.needsRole', { role: t(`role.${role}`) })}</p>;
}

function TokensSection() {
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
      {!canAdmin ? (
        <NeedsRole role="admin" />
      ) : (
        <>
          <form
            class="inline-form"
            onSubmit={(e) => {
              e.preventDefault();
              void create.run();
            }}
          >
            <div class="field grow">
              <label for="token-name">{t('tokens.name')}</label>
              <input id="token-name" value={name} maxLength={100} onInput={(e) => setName(e.currentTarget.value)} placeholder={t('tokens.namePlaceholder')} />
            </div>
            <fieldset class="field">
              <legend>{t('tokens.scopes')}</legend>
              <label class="check">
                <input type="checkbox" checked={scopes.ingest} onChange={(e) => setScopes({ ...scopes, ingest: e.currentTarget.checked })} /> {t('tokens.scope.ingest')}
              </label>
              <label class="check">
                <input type="checkbox" checked={scopes.read} onChange={(e) => setScopes({ ...scopes, read: e.currentTarget.checked })} /> {t('tokens.scope.read')}
              </label>
            </fieldset>
            <button type="submit" class="primary" disabled={create.busy || (!scopes.ingest && !scopes.read)}>
              {t('tokens.create')}
            </button>
          </form>
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
          {tokens.data && tokens.data.items.length === 0 && <p class="muted">{t('tokens.none')}</p>}
          {tokens.data && tokens.data.items.length > 0 && (
            <Scroll label={t('tokens.title')}>
              <table class="token-table cards">
                <TableHead cols={[t('tokens.name'), t('tokens.prefix'), t('tokens.scopes'), t('tokens.createdAt'), t('tokens.state')]} hidden={t('common.actions')} />
                <tbody>
                  {tokens.data.items.map((tok) => (
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
                  ))}
                </tbody>
              </table>
            </Scroll>
          )}
        </>
      )}
    </Section>
  );
}

function WebhooksSection() {
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
      {!canAdmin ? (
        <NeedsRole role="admin" />
      ) : (
        <>
          <form
            class="inline-form"
            onSubmit={(e) => {
              e.preventDefault();
              void create.run();
            }}
          >
            <div class="field grow">
              <label for="webhook-url">{t('webhooks.url')}</label>
              <input id="webhook-url" type="url" required value={url} maxLength={2048} placeholder="https://example.com/fleet-hook" onInput={(e) => setUrl(e.currentTarget.value)} />
            </div>
            <div class="field grow">
              <label for="webhook-desc">{t('webhooks.description')}</label>
              <input id="webhook-desc" value={description} maxLength={256} onInput={(e) => setDescription(e.currentTarget.value)} />
            </div>
            <button type="submit" class="primary" disabled={create.busy}>
              {t('webhooks.add')}
            </button>
          </form>
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
          {hooks.data && hooks.data.items.length === 0 && <p class="muted">{t('webhooks.none')}</p>}
          {hooks.data && hooks.data.items.length > 0 && (
            <ul class="hook-list">
              {hooks.data.items.map((h) => (
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
        </>
      )}
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
    <Scroll label={t('webhooks.deliveries')}>
      <table class="small-table">
        <TableHead cols={[t('webhooks.event'), t('commands.state'), t('webhooks.attempts'), t('webhooks.last')]} />
        <tbody>
          {d.data.items.map((x) => (
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
          ))}
        </tbody>
      </table>
    </Scroll>
  );
}

const emptyRule = { machine: '', software: '', code_from: '', code_to: '', message: '', note: '' };

function ruleCodes(r: WhitelistRule): string {
  return r.code_from === r.code_to ? String(r.code_from) : `${r.code_from}–${r.code_to}`;
}

function WhitelistSection() {
  const { t, canAdmin } = useApp();
  const rules = useFetch<{ items: WhitelistRule[] }>('/api/whitelist');
  const [f, setF] = useState(emptyRule);
  const set = (k: keyof typeof emptyRule) => (e: Event) => setF({ ...f, [k]: (e.currentTarget as HTMLInputElement).value });
  const create = useAction(async () => {
    const from = Number(f.code_from);
    const to = f.code_to.trim() === '' ? from : Number(f.code_to);
    const body: WhitelistRuleInput = {
      machine: f.machine.trim() || null,
      software: f.software.trim() || null,
      ...(from === to ? { code: from } : { code_from: from, code_to: to }),
      message: f.message.trim() || null,
      note: f.note.trim() || undefined,
    };
    await post<WhitelistRule>('/api/whitelist', body);
    setF(emptyRule);
    await rules.reload();
  });
  const toggle = useAction(async (r: WhitelistRule) => {
    const body: WhitelistRuleInput = { machine: r.machine, software: r.software, code_from: r.code_from, code_to: r.code_to, message: r.message, note: r.note, enabled: !r.enabled };
    await put<WhitelistRule>(`/api/whitelist/${r.id}`, body);
    await rules.reload();
  });
  const remove = useAction(async (r: WhitelistRule) => {
    if (!confirm(t('whitelist.confirmDelete', { codes: ruleCodes(r) }))) return;
    await del(`/api/whitelist/${r.id}`);
    await rules.reload();
  });
  return (
    <Section id="whitelist" title={t('whitelist.title')}>
      <p class="muted small">{t('whitelist.intro')}</p>
      {canAdmin && (
        <form
          class="grid-form"
          onSubmit={(e) => {
            e.preventDefault();
            void create.run();
          }}
        >
          <div class="field">
            <label for="wl-code-from">{t('whitelist.codeFrom')}</label>
            <input id="wl-code-from" type="number" required step={1} value={f.code_from} onInput={set('code_from')} />
          </div>
          <div class="field">
            <label for="wl-code-to">{t('whitelist.codeTo')}</label>
            <input id="wl-code-to" type="number" step={1} value={f.code_to} onInput={set('code_to')} placeholder={t('whitelist.codeToHint')} />
          </div>
          <div class="field">
            <label for="wl-machine">{t('whitelist.machine')}</label>
            <input id="wl-machine" value={f.machine} pattern="[a-z0-9*?\-]{1,128}" onInput={set('machine')} placeholder="web-*" />
          </div>
          <div class="field">
            <label for="wl-software">{t('whitelist.software')}</label>
            <input id="wl-software" value={f.software} pattern="[a-z0-9*?\-]{1,128}" onInput={set('software')} placeholder="agent" />
          </div>
          <div class="field wide">
            <label for="wl-message">{t('whitelist.message')}</label>
            <input id="wl-message" value={f.message} maxLength={512} onInput={set('message')} placeholder="*disk*full*" />
          </div>
          <div class="field wide">
            <label for="wl-note">{t('whitelist.note')}</label>
            <input id="wl-note" value={f.note} maxLength={1024} onInput={set('note')} />
          </div>
          <div class="field">
            <button type="submit" class="primary" disabled={create.busy}>
              {t('whitelist.add')}
            </button>
          </div>
        </form>
      )}
      {create.error ? <ErrorNote error={create.error} /> : null}
      {rules.error ? <ErrorNote error={rules.error} onRetry={rules.reload} /> : null}
      {toggle.error ? <ErrorNote error={toggle.error} /> : null}
      {remove.error ? <ErrorNote error={remove.error} /> : null}
      {rules.data && rules.data.items.length === 0 && <p class="muted">{t('whitelist.none')}</p>}
      {rules.data && rules.data.items.length > 0 && (
        <Scroll label={t('whitelist.title')}>
          <table class="cards">
            <TableHead cols={[t('whitelist.codes'), t('whitelist.machine'), t('whitelist.software'), t('whitelist.message'), t('whitelist.note'), t('whitelist.enabled')]} hidden={t('common.actions')} />
            <tbody>
              {rules.data.items.map((r) => (
                <tr key={r.id} data-rule={r.id}>
                  <td data-label={t('whitelist.codes')}>
                    <code>{ruleCodes(r)}</code>
                  </td>
                  <td data-label={t('whitelist.machine')}>{r.machine ?? <span class="muted">{t('whitelist.any')}</span>}</td>
                  <td data-label={t('whitelist.software')}>{r.software ?? <span class="muted">{t('whitelist.any')}</span>}</td>
                  <td data-label={t('whitelist.message')}>{r.message ?? <span class="muted">{t('whitelist.any')}</span>}</td>
                  <td data-label={t('whitelist.note')}>{r.note}</td>
                  <td data-label={t('whitelist.enabled')}>
                    {canAdmin ? (
                      <label class="check">
                        <input type="checkbox" checked={r.enabled} disabled={toggle.busy} onChange={() => void toggle.run(r)} />
                        <span class="sr-only">{t('whitelist.enabledFor', { codes: ruleCodes(r) })}</span>
                      </label>
                    ) : r.enabled ? (
                      t('common.yes')
                    ) : (
                      t('common.no')
                    )}
                  </td>
                  <td>
                    {canAdmin && (
                      <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(r)}>
                        {t('common.delete')}
                        <span class="sr-only"> {ruleCodes(r)}</span>
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
    </Section>
  );
}

function MembersSection() {
  const { t, lang, me } = useApp();
  const members = useFetch<{ items: Member[] }>('/api/members');
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<Role>('viewer');
  const [initial, setInitial] = useState<{ email: string; password: string } | null>(null);
  const add = useAction(async () => {
    const r = await post<{ member: Member; created_user: boolean; initial_password?: string }>('/api/members', { email: email.trim(), role });
    setInitial(r.initial_password ? { email: r.member.email, password: r.initial_password } : null);
    setEmail('');
    await members.reload();
  });
  const change = useAction(async (m: Member, r: Role) => {
    await put(`/api/members/${m.user_id}`, { role: r });
    await members.reload();
  });
  const remove = useAction(async (m: Member) => {
    if (!confirm(t('members.confirmRemove', { email: m.email }))) return;
    await del(`/api/members/${m.user_id}`);
    await members.reload();
  });
  const roles: Role[] = ['viewer', 'admin', 'owner'];
  return (
    <Section id="members" title={t('members.title')}>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void add.run();
        }}
      >
        <div class="field grow">
          <label for="member-email">{t('members.email')}</label>
          <input id="member-email" type="email" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} autoComplete="off" />
        </div>
        <div class="field">
          <label for="member-role">{t('members.role')}</label>
          <select id="member-role" value={role} onChange={(e) => setRole(e.currentTarget.value as Role)}>
            {roles.map((r) => (
              <option key={r} value={r}>
                {t(`role.${r}`)}
              </option>
            ))}
          </select>
        </div>
        <button type="submit" class="primary" disabled={add.busy}>
          {t('members.invite')}
        </button>
      </form>
      {add.error ? <ErrorNote error={add.error} /> : null}
      {initial && <SecretBox id="initial-pw" note={t('members.initialPassword', { email: initial.email })} label={t('members.password')} value={initial.password} />}
      {members.error ? <ErrorNote error={members.error} onRetry={members.reload} /> : null}
      {change.error ? <ErrorNote error={change.error} /> : null}
      {remove.error ? <ErrorNote error={remove.error} /> : null}
      {members.data && (
        <Scroll label={t('members.title')}>
          <table class="cards">
            <TableHead cols={[t('members.email'), t('members.role'), t('members.since')]} hidden={t('common.actions')} />
            <tbody>
              {members.data.items.map((m) => (
                <tr key={m.user_id}>
                  <td data-label={t('members.email')}>
                    {m.email}
                    {m.user_id === me?.user.id && <span class="muted small"> ({t('members.you')})</span>}
                  </td>
                  <td data-label={t('members.role')}>
                    <label class="sr-only" for={`role-${m.user_id}`}>
                      {t('members.roleOf', { email: m.email })}
                    </label>
                    <select id={`role-${m.user_id}`} value={m.role} disabled={change.busy} onChange={(e) => void change.run(m, e.currentTarget.value as Role)}>
                      {roles.map((r) => (
                        <option key={r} value={r}>
                          {t(`role.${r}`)}
                        </option>
                      ))}
                    </select>
                  </td>
                  <td data-label={t('members.since')}>{dateTime(m.created_at, lang)}</td>
                  <td>
                    <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(m)}>
                      {t('members.remove')}
                      <span class="sr-only"> {m.email}</span>
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
    </Section>
  );
}

function SupportSection() {
  const { t } = useApp();
  const sup = useFetch<SupportInfo>('/api/support-info');
  const s = sup.data;
  const href = (kind: string, v: string) => (kind === 'email' ? `mailto:${v}` : kind === 'phone' ? `tel:${v.replace(/[^+\d]/g, '')}` : /^https?:\/\//.test(v) ? v : undefined);
  return (
    <Section id="support" title={t('support.title')}>
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
