// E-mail notifications (every member, for themselves): which changes of the active customer's
// traffic lights are mailed (turned red, turned yellow, recovered), in which language. The changes
// come as one digest per interval; every mail has a link to turn them off without logging in.
import { useEffect, useState } from 'preact/hooks';
import { missingFeature, put } from '../../api.js';
import { useApp } from '../../ctx.js';
import type { EmailNotifications, MailKind } from '../../types.js';
import { ErrorNote, Loading, Section, Unavailable, useAction, useFetch } from '../../components/common.js';
import { ActionForm, Check, Field, Select } from '../../components/forms.js';
import type { Lang } from '../../i18n.js';

const LANGS: Lang[] = ['de', 'en'];

export function NotificationsSection() {
  const { t, me } = useApp();
  const isUser = !!me;
  const sub = useFetch<EmailNotifications>(isUser ? '/api/notifications/email' : null);
  const [kinds, setKinds] = useState<MailKind[]>([]);
  const [mailLang, setMailLang] = useState<Lang>('en');
  const [saved, setSaved] = useState(false);
  useEffect(() => {
    if (!sub.data) return;
    setKinds(sub.data.kinds);
    setMailLang(sub.data.lang);
  }, [sub.data]);
  const save = useAction(async () => {
    setSaved(false);
    const r = await put<EmailNotifications>('/api/notifications/email', { kinds, lang: mailLang });
    setKinds(r.kinds);
    setMailLang(r.lang);
    setSaved(true);
  });
  if (missingFeature(sub.error)) {
    return (
      <Section id="notifications" title={t('notify.title')}>
        <Unavailable />
      </Section>
    );
  }
  const d = sub.data;
  return (
    <Section id="notifications" title={t('notify.title')}>
      {sub.error ? <ErrorNote error={sub.error} onRetry={sub.reload} /> : null}
      {!d && !sub.error ? <Loading /> : null}
      {d && (
        <>
          <p class="muted small">{t('notify.intro', { email: d.email, minutes: String(Math.max(1, Math.round(d.digest_interval_s / 60))) })}</p>
          <ActionForm class="inline-form" onSubmit={save.run}>
            <fieldset class="field" id="notify-kinds">
              <legend>{t('notify.kinds')}</legend>
              {d.available_kinds.map((k) => (
                <Check
                  key={k}
                  checked={kinds.includes(k)}
                  onChange={(on) => {
                    setSaved(false);
                    setKinds(on ? [...kinds.filter((x) => x !== k), k] : kinds.filter((x) => x !== k));
                  }}
                >
                  {t(`notify.kind.${k}`)}
                </Check>
              ))}
            </fieldset>
            <Field id="notify-lang" label={t('notify.lang')} class="inline">
              <Select id="notify-lang" value={mailLang} values={LANGS} label={(l) => t(`lang.${l}`)} onChange={(l) => (setSaved(false), setMailLang(l))} />
            </Field>
            <button type="submit" class="primary" disabled={save.busy}>
              {t('notify.save')}
            </button>
          </ActionForm>
          {save.error ? <ErrorNote error={save.error} /> : null}
          {saved && (
            <p class="note ok" role="status" id="notify-saved">
              {kinds.length ? t('notify.saved') : t('notify.off')}
            </p>
          )}
        </>
      )}
    </Section>
  );
}
