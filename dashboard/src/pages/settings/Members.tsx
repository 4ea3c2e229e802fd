// Members (owner): invite by e-mail (a new account's first password shown once), change a role,
// remove a member.
import { useState } from 'preact/hooks';
import { del, post, put } from '../../api.js';
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import type { Member, Role } from '../../types.js';
import { DataTable, ErrorNote, Section, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Field, Select } from '../../components/forms.js';
import { SecretBox } from '../../components/SecretBox.js';

export function MembersSection() {
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
  const roleName = (r: Role) => t(`role.${r}`);
  return (
    <Section id="members" title={t('members.title')}>
      <ActionForm class="inline-form" onSubmit={add.run}>
        <Field id="member-email" label={t('members.email')} class="grow">
          <input id="member-email" type="email" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} autoComplete="off" />
        </Field>
        <Field id="member-role" label={t('members.role')}>
          <Select id="member-role" value={role} values={roles} label={roleName} onChange={setRole} />
        </Field>
        <button type="submit" class="primary" disabled={add.busy}>
          {t('members.invite')}
        </button>
      </ActionForm>
      {add.error ? <ErrorNote error={add.error} /> : null}
      {initial && <SecretBox id="initial-pw" note={t('members.initialPassword', { email: initial.email })} label={t('members.password')} value={initial.password} />}
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
          <tr key={m.user_id}>
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
