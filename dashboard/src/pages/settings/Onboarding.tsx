// The onboarding checklist: which first steps are done (the server's list; known steps in the
// page's language).
import { useApp } from '../../ctx.js';
import { dateTime } from '../../format.js';
import type { OnboardingStatus } from '../../types.js';
import { ErrorNote, Loading, Section, useFetch } from '../../components/common.js';

const STEPS = ['token_created', 'first_heartbeat', 'first_diagnostics', 'first_status', 'help_texts', 'teammate_invited'] as const;
type Step = (typeof STEPS)[number];

export function OnboardingSection() {
  const { t, lang } = useApp();
  const ob = useFetch<OnboardingStatus>('/api/onboarding/status');
  const o = ob.data;
  return (
    <Section id="onboarding" title={t('onboarding.title')} busy={ob.loading}>
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
