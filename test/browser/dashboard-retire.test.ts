// Decommissioning in the dashboard (headless Chromium against the real stack): an admin opens an
// instance, retires it after confirming, and sees it leave the fleet list and its counts; then
// retires a whole machine the same way. The retired instance's page, opened by its link, says it is
// retired and offers nothing. A viewer sees no retire buttons. Screenshots go to test/artifacts/.
import t from 'tap';
import type { Browser, Page } from 'playwright-core';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { launchBrowser, browserUnavailable, screenshot, expectNoAxeViolations, logInSession } from '../helpers/browser.js';

const skip = browserUnavailable();
if (skip) t.plan(0, `browser tests skipped: ${skip}`);
else await run();

async function run(): Promise<void> {
  const s = await testStack(t, 'dashretire');
  const admin = await s.newUser('admin');
  const viewer = await s.newUser('viewer');
  const WAIT = 45_000;

  const agents: [string, string][] = [
    ['keep-01', 'agent'],
    ['old-01', 'agent'],
    ['old-02', 'agent'],
    ['old-02', 'backup'],
  ];
  // No assertion outside a subtest: tap would end the file there (and its teardown stop the stack).
  for (const [m, sw] of agents) {
    const r = await s.report(m, 'heartbeat', { version: '1.0' }, { software: sw });
    if (r.status !== 200) throw new Error(`heartbeat ${m}/${sw}: ${r.status}`);
  }
  const ids = await eventually(async () => {
    const items = (await get(`${s.apiUrl}/api/instances`, admin.jwt)).body.items as any[];
    return items.length === agents.length ? new Map(items.map((i) => [`${i.machine}/${i.software}`, i.id as string])) : null;
  }, 15_000, 'four instances');

  const browser: Browser = await launchBrowser();
  t.teardown(() => browser.close());

  const session = (user: { email: string; password: string }) => logInSession(browser, s.apiUrl, user, { waitMs: WAIT });

  const a = await session(admin);
  const page: Page = a.page;
  const row = (id: string) => page.locator(`tr[data-instance="${id}"]`);

  t.test('an admin retires an instance from its page; it leaves the fleet list', async (t) => {
    await page.locator('[data-count=all]', { hasText: /^4$/ }).waitFor();
    await page.goto(`${s.apiUrl}/instances/${ids.get('old-01/agent')}`);
    await page.locator('#retire').waitFor();
    await page.locator('#retire').scrollIntoViewIfNeeded();
    await screenshot(page, 'retire-instance-page-desktop');
    await expectNoAxeViolations(t, page, 'instance page');
    await page.click('button:has-text("Retire this instance")');
    await page.waitForURL((u) => u.pathname === '/');
    t.match(a.dialogs.at(-1), /^Retire old-01 \/ agent\?/, 'asked first');
    await page.locator('[data-count=all]', { hasText: /^3$/ }).waitFor();
    // The count comes with the summary, the rows with the list: the page reads them apart.
    await row(ids.get('keep-01/agent')!).waitFor();
    await row(ids.get('old-01/agent')!).waitFor({ state: 'detached' });
    t.equal(await row(ids.get('old-01/agent')!).count(), 0, 'gone from the list');
    t.equal(await row(ids.get('keep-01/agent')!).count(), 1, 'the others stay');
    await screenshot(page, 'retire-fleet-after-instance-desktop');
    const r = await get(`${s.apiUrl}/api/instances/${ids.get('old-01/agent')}`, admin.jwt);
    t.ok(r.body.retired_at, 'retired in the api');
  });

  t.test("the retired instance's link still opens: it says it is retired, no buttons", async (t) => {
    await page.goto(`${s.apiUrl}/instances/${ids.get('old-01/agent')}`);
    await page.locator('[data-testid=retired-note]').waitFor();
    t.match(await page.locator('[data-testid=retired-note]').textContent(), /^Retired /);
    t.equal(await page.locator('#retire button').count(), 0);
    t.match(await page.locator('[data-testid=light-reason]').textContent(), /retired/);
    await screenshot(page, 'retire-retired-instance-desktop');
  });

  t.test('an admin retires a whole machine: every instance on it leaves the list', async (t) => {
    await page.goto(`${s.apiUrl}/instances/${ids.get('old-02/agent')}`);
    await page.click('button:has-text("Retire machine old-02")');
    await page.waitForURL((u) => u.pathname === '/');
    t.match(a.dialogs.at(-1), /^Retire machine old-02 with all its software\?/);
    await page.locator('[data-count=all]', { hasText: /^1$/ }).waitFor();
    // The rows come with the list, apart from the count (as above).
    await row(ids.get('keep-01/agent')!).waitFor();
    await row(ids.get('old-02/agent')!).waitFor({ state: 'detached' });
    await row(ids.get('old-02/backup')!).waitFor({ state: 'detached' });
    t.equal(await row(ids.get('old-02/agent')!).count(), 0);
    t.equal(await row(ids.get('old-02/backup')!).count(), 0);
    t.equal(await row(ids.get('keep-01/agent')!).count(), 1);
    await screenshot(page, 'retire-fleet-after-machine-desktop');
    t.same(a.errors, [], 'no script errors');
  });

  t.test('a viewer sees no retire buttons', async (t) => {
    const v = await session(viewer);
    await v.page.goto(`${s.apiUrl}/instances/${ids.get('keep-01/agent')}`);
    await v.page.locator('h1', { hasText: 'keep-01' }).waitFor();
    await v.page.locator('#commands').waitFor();
    t.equal(await v.page.locator('#retire').count(), 0);
    t.equal((await post(`${s.apiUrl}/api/instances/${ids.get('keep-01/agent')}/retire`, viewer.jwt, {})).status, 403, 'and the api refuses');
    await v.ctx.close();
  });
}
