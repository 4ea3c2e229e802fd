// Decommissioning (docs/operations.md "Decommissioning"): admins retire this instance, or its machine
// with every instance on it, after a confirmation; the fleet list is shown afterwards (the retired
// ones are gone from it). A retired instance's page says so and offers nothing more.
import { post } from '../../api.js';
import { useApp } from '../../ctx.js';
import { shortTime } from '../../format.js';
import { navigate } from '../../router.js';
import type { InstanceDetail } from '../../types.js';
import { ErrorNote, Section, useAction } from '../../components/common.js';

export function RetireSection({ i }: { i: InstanceDetail }) {
  const { t, lang, canAdmin } = useApp();
  const name = `${i.machine} / ${i.software}`;
  const retire = useAction(async (what: 'instance' | 'machine') => {
    const ask = what === 'instance' ? t('retire.confirmInstance', { name }) : t('retire.confirmMachine', { machine: i.machine });
    if (!confirm(ask)) return;
    await post(what === 'instance' ? `/api/instances/${i.id}/retire` : `/api/machines/${i.machine_id}/retire`);
    navigate('/');
  });
  if (i.retired_at) {
    return (
      <Section id="retire" title={t('retire.title')}>
        <p data-testid="retired-note">{t('retire.retired', { when: shortTime(i.retired_at, lang) })}</p>
      </Section>
    );
  }
  if (!canAdmin) return null;
  return (
    <Section id="retire" title={t('retire.title')}>
      <p class="muted">{t('retire.explain')}</p>
      {retire.error ? <ErrorNote error={retire.error} /> : null}
      <p>
        <button type="button" class="danger" disabled={retire.busy} onClick={() => void retire.run('instance')}>
          {t('retire.instance')}
        </button>{' '}
        <button type="button" class="danger" disabled={retire.busy} onClick={() => void retire.run('machine')}>
          {t('retire.machine', { machine: i.machine })}
        </button>
      </p>
    </Section>
  );
}
