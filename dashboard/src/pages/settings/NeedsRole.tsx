// In place of a part of the settings that the user's role may not see.
import { useApp } from '../../ctx.js';
import type { Role } from '../../types.js';

export function NeedsRole({ role }: { role: Role }) {
  const { t } = useApp();
  return <p class="muted">{t('settings.needsRole', { role: t(`role.${role}`) })}</p>;
}
