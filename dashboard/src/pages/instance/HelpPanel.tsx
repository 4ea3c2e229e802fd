// A diagnostic code's help text (DE/EN), as the agent sent it.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import type { Lang } from '../../i18n.js';
import type { HelpText } from '../../types.js';
import { ErrorNote, Loading, useFetch } from '../../components/common.js';

/** The help text of a code in the chosen language (the UI's, switchable here too). */
export function HelpPanel({ id, code }: { id: string; code: number }) {
  const { t, lang } = useApp();
  const [helpLang, setHelpLang] = useState<Lang>(lang);
  useEffect(() => setHelpLang(lang), [lang]);
  const help = useFetch<HelpText>(`/api/instances/${id}/help${qs({ code, lang: helpLang })}`);
  const available = help.error instanceof ApiError && help.error.status === 404 ? ((help.error.body as { available?: string[] })?.available ?? []) : null;
  return (
    <div class="help" data-help-code={code} lang={helpLang}>
      <div class="help-head">
        <span class="muted small">{t('diag.helpFor', { code })}</span>
        <div role="group" aria-label={t('diag.helpLanguage')} class="seg">
          {(['de', 'en'] as const).map((l) => (
            <button key={l} type="button" class="small" aria-pressed={helpLang === l} onClick={() => setHelpLang(l)} lang={l}>
              {l.toUpperCase()}
            </button>
          ))}
        </div>
      </div>
      {help.loading && !help.data ? <Loading /> : null}
      {available !== null ? (
        <p class="muted" role="status">
          {t('diag.noHelp', { lang: t(`lang.${helpLang}`) })}
          {available.length > 0 && (
            <>
              {' '}
              {available.map((l) => (
                <button key={l} type="button" class="link" onClick={() => setHelpLang(l as Lang)}>
                  {t('diag.showIn', { lang: t(`lang.${l as Lang}`) })}
                </button>
              ))}
            </>
          )}
        </p>
      ) : help.error ? (
        <ErrorNote error={help.error} />
      ) : help.data && help.data.lang === helpLang ? (
        <article class="help-text">
          {help.data.title && <h3>{help.data.title}</h3>}
          <p class="pre">{help.data.text}</p>
        </article>
      ) : null}
    </div>
  );
}
