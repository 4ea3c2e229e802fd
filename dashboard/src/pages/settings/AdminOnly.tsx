// The part of a settings section that needs the admin role; viewers read why it is not there.
import type { ComponentChildren } from 'preact';
import { useApp } from '../../ctx.js';

export function AdminOnly({ children }: { children: ComponentChildren }) {
  const { t, canAdmin } = useApp();
  if (!canAdmin) return <p class="muted">{t('settings.needsRole', { role: t('role.admin') })}</p>;
  return <>{children}</>;
}
