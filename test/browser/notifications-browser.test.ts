// E-mail notifications in the dashboard, in headless Chromium against the real stack and an SMTP
// server of this file's own: a viewer opens Settings, chooses "turns red" and German in the section
// "E-mail notifications" and saves; an instance turns red and the German digest arrives; its
// unsubscribe link, opened in the browser without a session, turns the subscription off, which the
// settings then show. Screenshots at desktop and phone width (test/artifacts/); every page passes
// axe-core's WCAG A/AA checks and fits a phone's width.
import t from 'tap';
import type { Browser } from 'playwright-core';
import { testStack, get, eventually } from '../helpers/stack.js';
import { launchBrowser, browserUnavailable, screenshot, expectNoAxeViolations, horizontalOverflow, logInSession } from '../helpers/browser.js';
import { smtpServer } from '../helpers/smtp.js';

const skip = browserUnavailable();
if (skip) t.plan(0, `browser tests skipped: ${skip}`);
else await run();

async function run(): Promise<void> {
  const DASH = 'https://fleet.test.example';
  const smtp = await smtpServer();
  t.teardown(() => smtp.close());
  const s = await testStack(t, 'notifybrowser', {
    env: {
      HEARTBEAT_TIMEOUT_S: '2',
      LIGHT_SWEEP_INTERVAL_MS: '500',
      ...smtp.env,
      PUBLIC_DASHBOARD_URL: DASH,
      MAIL_DIGEST_INTERVAL_S: '1',
      MAIL_DIGEST_TICK_MS: '200',
    },
  });
  const viewer = await s.newUser('viewer');
  const WAIT = 45_000;
  const browser: Browser = await launchBrowser();
  t.teardown(() => browser.close());

  async function session(viewport: { width: number; height: number }) {
    const d = await logInSession(browser, s.apiUrl, viewer, { width: viewport.width, waitMs: WAIT, path: '/settings' });
    await d.page.locator('#notifications #notify-kinds').waitFor();
    return d;
  }

  const d = await session({ width: 1280, height: 900 });
  const page = d.page;
  const box = (name: RegExp) => page.locator('#notifications').getByRole('checkbox', { name });

  t.test('a viewer chooses "turns red" and German, and saves', async (t) => {
    t.equal(await page.locator('#notifications-h').textContent(), 'E-mail notifications');
    t.match(await page.locator('#notifications').textContent(), viewer.email, 'names the address the mails go to');
    t.equal(await box(/turns red/).isChecked(), false, 'nothing chosen yet');
    await box(/turns red/).check();
    await page.selectOption('#notify-lang', 'de');
    await page.locator('#notifications button[type=submit]').click();
    t.equal(await page.locator('#notify-saved').textContent(), 'Saved.');
    const r = await get(`${s.apiUrl}/api/notifications/email`, viewer.jwt);
    t.same([r.body.kinds, r.body.lang], [['red'], 'de'], 'stored');
    await page.locator('#notifications').scrollIntoViewIfNeeded();
    await screenshot(page, 'settings-notifications-desktop');
    await expectNoAxeViolations(t, page, 'settings with notifications');
  });

  t.test('an instance turns red: the German digest; its link turns the notifications off without login', async (t) => {
    t.equal((await s.report('kiosk-1', 'heartbeat')).status, 200);
    const m = await smtp.mailTo(viewer.email, 0, WAIT);
    t.match(m.subject, '1 auf Rot');
    t.match(m.text, /^kiosk-1 \/ agent +grün -> rot /m);
    const link = /^(https:\/\/\S+\/unsubscribe\?token=\S+)$/m.exec(m.text)![1]!.replace(DASH, s.apiUrl);
    const anon = await browser.newContext({ viewport: { width: 390, height: 844 }, locale: 'de-DE' });
    const p = await anon.newPage();
    await p.goto(link);
    t.equal(await p.locator('h1').textContent(), 'Abbestellt');
    t.match(await p.locator('body').textContent(), viewer.email);
    const o = await horizontalOverflow(p);
    t.ok(o.scrollWidth <= o.width, `the unsubscribe page fits a phone (${o.scrollWidth} px)`);
    await screenshot(p, 'unsubscribe-phone');
    await expectNoAxeViolations(t, p, 'unsubscribe page');
    await anon.close();
    await eventually(async () => (await get(`${s.apiUrl}/api/notifications/email`, viewer.jwt)).body.kinds.length === 0, 5000, 'off');
    await page.reload();
    await page.locator('#notifications #notify-kinds').waitFor();
    t.equal(await box(/turns red/).isChecked(), false, 'the settings show it off');
  });

  t.test('phone width: the settings with the section fit', async (t) => {
    const p = await session({ width: 390, height: 844 });
    await p.page.locator('#notifications').scrollIntoViewIfNeeded();
    const o = await horizontalOverflow(p.page);
    t.ok(o.scrollWidth <= o.width, `no sideways scrolling at ${o.width} px (page ${o.scrollWidth} px) ${o.culprits.join(', ')}`);
    await screenshot(p.page, 'settings-notifications-phone');
    t.same([...d.errors, ...p.errors], [], 'no script errors, no Content-Security-Policy violations');
    await p.ctx.close();
  });
}
