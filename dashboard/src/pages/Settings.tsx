// Settings of the active customer: licence and grace period, the onboarding checklist, API tokens
// (a new token is shown once, with a copy button), webhooks (the secret likewise), whitelist rules,
// members, and the support contacts. Changing needs the admin role (members: owner); viewers read.
// Each section is a file in settings/ and reads its own endpoint.
import { useApp } from '../ctx.js';
import { useTitle } from '../components/title.js';
import { LicenceSection } from './settings/Licence.js';
import { OnboardingSection } from './settings/Onboarding.js';
import { TokensSection } from './settings/Tokens.js';
import { WebhooksSection } from './settings/Webhooks.js';
import { WhitelistSection } from './settings/Whitelist.js';
import { MembersSection } from './settings/Members.js';
import { SupportSection } from './settings/Support.js';

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
