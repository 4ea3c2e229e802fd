// Settings of the active customer: licence and grace period, the onboarding checklist, API tokens
// (a new token is shown once, with a copy button), webhooks (the secret likewise), whitelist rules,
// timeout rules (how long an instance may be silent before late and red), members, the user's own
// e-mail notifications, and the support contacts. Changing needs the admin role (members: owner);
// viewers read.
// Each section is a file in settings/ and reads its own endpoint.
import { useApp } from '../ctx.js';
import { JumpLinks, PageTitle } from '../components/common.js';
import { useTitle } from '../components/title.js';
import { LicenceSection } from './settings/Licence.js';
import { OnboardingSection } from './settings/Onboarding.js';
import { TokensSection } from './settings/Tokens.js';
import { WebhooksSection } from './settings/Webhooks.js';
import { WhitelistSection } from './settings/Whitelist.js';
import { TimeoutsSection } from './settings/Timeouts.js';
import { MembersSection } from './settings/Members.js';
import { SupportSection } from './settings/Support.js';
import { NotificationsSection } from './settings/Notifications.js';

export function SettingsPage() {
  const { t, role } = useApp();
  useTitle(t('settings.title'));
  const isOwner = role === 'owner';
  return (
    <>
      <div class="page-head">
        <PageTitle>{t('settings.title')}</PageTitle>
      </div>
      <JumpLinks
        label={t('settings.sections')}
        links={[
          ['licence', t('licence.title')],
          ['onboarding', t('onboarding.title')],
          ['tokens', t('tokens.title')],
          ['webhooks', t('webhooks.title')],
          ['whitelist', t('whitelist.title')],
          ['timeouts', t('timeouts.title')],
          isOwner && ['members', t('members.title')],
          ['notifications', t('notify.title')],
          ['support', t('support.title')],
        ]}
      />
      <div class="settings-grid">
        <LicenceSection />
        <OnboardingSection />
      </div>
      <TokensSection />
      <WebhooksSection />
      <WhitelistSection />
      <TimeoutsSection />
      {isOwner && <MembersSection />}
      <NotificationsSection />
      <SupportSection />
    </>
  );
}
