// Members (owner): invite by e-mail (the invitee gets a single-use link; no account is made and no
// password is shown here), the pending invitations (send again, revoke), change a role, remove a
// member (their sessions end at once).
import { useState } from 'preact/hooks';
import { del, post, put } from '../../api.js';
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import type { Invitation, Member, Role } from '../../types.js';
import type { Lang } from '../../i18n.js';
import { DataTable, ErrorNote, Section, useAction, useFetch, useInterval } from '../../components/common.js';
import { ActionForm, Field, Select } from '../../components/forms.js';

export function MembersSection() {
  const { t, lang, me } = useApp();
  const members = useFetch<{ items: Member[] }>('/api/members');
  const invitations = useFetch<{ items: Invitation[] }>('/api/invitations');
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<Role>('viewer');
  const [mailLang, setMailLang] = useState<Lang>(lang);
  const [note, setNote] = useState<string | null>(null);
  // While an e-mail is being sent, look again every 2 s for what became of it.
  useInterval(() => void invitations.reload(), invitations.data?.items.some((i) => i.mail_status === 'pending') ? 2000 : null);
  const invite = useAction(async () => {
    const r = await post<{ invitation: Invitation }>('/api/invitations', { email: email.trim(), role, lang: mailLang });
    setNote(t('members.invited', { email: r.invitation.email }));
    setEmail('');
    await invitations.reload();
  });
  const resend = useAction(async (i: Invitation) => {
    await post(`/api/invitations/${i.id}/resend`);
    setNote(t('inv.resent', { email: i.email }));
    await invitations.reload();
  });
  const revoke = useAction(async (i: Invitation) => {
    if (!confirm(t('inv.confirmRevoke', { email: i.email }))) return;
    await del(`/api/invitations/${i.id}`);
    setNote(null);
    await invitations.reload();
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
  const roleName = (r: Role) => t(`role.${r}`);
  const langs: Lang[] = ['de', 'en'];
  return (
    <Section id="members" title={t('members.title')} busy={members.loading || invitations.loading}>
      <ActionForm class="inline-form" onSubmit={invite.run}>
        <Field id="member-email" label={t('members.email')} class="grow">
          <input id="member-email" type="email" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} autoComplete="off" />
        </Field>
        <Field id="member-role" label={t('members.role')}>
          <Select id="member-role" value={role} values={roles} label={roleName} onChange={setRole} />
        </Field>
        <Field id="member-lang" label={t('members.mailLang')}>
          <Select id="member-lang" value={mailLang} values={langs} label={(l) => t(`lang.${l}`)} onChange={setMailLang} />
        </Field>
        <button type="submit" class="primary" disabled={invite.busy}>
          {t('members.invite')}
        </button>
      </ActionForm>
      {invite.error ? <ErrorNote error={invite.error} /> : null}
      {note && (
        <p class="note ok" role="status" id="invite-note">
          {note}
        </p>
      )}
      {resend.error ? <ErrorNote error={resend.error} /> : null}
      {revoke.error ? <ErrorNote error={revoke.error} /> : null}
      <h3 id="invitations">{t('inv.title')}</h3>
      {invitations.error ? <ErrorNote error={invitations.error} onRetry={invitations.reload} /> : null}
      {invitations.data && invitations.data.items.length === 0 ? (
        <p class="muted">{t('inv.none')}</p>
      ) : (
        <DataTable
          items={invitations.data?.items}
          label={t('inv.title')}
          class="cards"
          cols={[t('members.email'), t('members.role'), t('inv.state'), t('inv.validUntil')]}
          hidden={t('common.actions')}
          row={(i) => (
            <tr key={i.id} data-invitation={i.email}>
              <td data-label={t('members.email')}>{i.email}</td>
              <td data-label={t('members.role')}>{roleName(i.role)}</td>
              <td data-label={t('inv.state')}>
                {t(`inv.status.${i.status}`)}, {t(`inv.mail.${i.mail_status}`)}
              </td>
              <td data-label={t('inv.validUntil')}>{dateTime(i.expires_at, lang)}</td>
              <td>
                <button type="button" class="small" disabled={resend.busy} onClick={() => void resend.run(i)}>
                  {t('inv.resend')}
                  <span class="sr-only"> {i.email}</span>
                </button>{' '}
                <button type="button" class="small danger" disabled={revoke.busy} onClick={() => void revoke.run(i)}>
                  {t('inv.revoke')}
                  <span class="sr-only"> {i.email}</span>
                </button>
              </td>
            </tr>
          )}
        />
      )}
      <h3>{t('members.title')}</h3>
      {members.error ? <ErrorNote error={members.error} onRetry={members.reload} /> : null}
      {change.error ? <ErrorNote error={change.error} /> : null}
      {remove.error ? <ErrorNote error={remove.error} /> : null}
      <DataTable
        items={members.data?.items}
        label={t('members.title')}
        class="cards"
        cols={[t('members.email'), t('members.role'), t('members.since')]}
        hidden={t('common.actions')}
        row={(m) => (
          <tr key={m.user_id} data-member={m.email}>
            <td data-label={t('members.email')}>
              {m.email}
              {m.user_id === me?.user.id && <span class="muted small"> ({t('members.you')})</span>}
            </td>
            <td data-label={t('members.role')}>
              <label class="sr-only" for={`role-${m.user_id}`}>
                {t('members.roleOf', { email: m.email })}
              </label>
              <Select id={`role-${m.user_id}`} value={m.role} values={roles} label={roleName} disabled={change.busy} onChange={(r) => void change.run(m, r)} />
            </td>
            <td data-label={t('members.since')}>{dateTime(m.created_at, lang)}</td>
            <td>
              <button type="button" class="small danger" disabled={remove.busy} onClick={() => void remove.run(m)}>
                {t('members.remove')}
                <span class="sr-only"> {m.email}</span>
              </button>
            </td>
          </tr>
        )}
      />
    </Section>
  );
}
