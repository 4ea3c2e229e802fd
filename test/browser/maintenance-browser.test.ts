// Maintenance windows in the dashboard (headless Chromium against the real stack): an admin opens
// the page "Maintenance", adds a one-off window for a machine (times in the browser's zone) and a
// recurring one for a software pattern in another zone on two weekdays, sees the server's reason
// for a window it refuses, and deletes one after confirming; each checked in the api. A viewer sees
// the list without the form or delete buttons. WCAG A/AA by axe-core, no sideways scrolling at
// phone width. Screenshots go to test/artifacts/.
import t from 'tap';
import type { Browser } from 'playwright-core';
import { testStack, get, eventually } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { launchBrowser, browserUnavailable, screenshot, expectNoAxeViolations, horizontalOverflow, logInSession } from '../helpers/browser.js';

const skip = browserUnavailable();
if (skip) t.plan(0, `browser tests skipped: ${skip}`);
else await run();

async function run(): Promise<void> {
  const s = await testStack(t, 'dashmaint');
  const admin = await s.newUser('admin');
  const viewer = await s.newUser('viewer');
  const WAIT = 45_000;

  // No assertion outside a subtest: tap would end the file there (and its teardown stop the stack).
  for (const sw of ['agent', 'db-backup']) {
    const r = await s.report('web-1', 'heartbeat', { version: '1.0' }, { software: sw });
    if (r.status !== 200) throw new Error(`heartbeat web-1/${sw}: ${r.status}`);
  }
  const machineId = await eventually(async () => {
    const items = (await get(`${s.apiUrl}/api/instances`, admin.jwt)).body.items as { machine_id: string }[];
    return items.length === 2 ? items[0]!.machine_id : null;
  }, 15_000, 'two instances');
  const windows = async () => (await get(`${s.apiUrl}/api/maintenance-windows`, admin.jwt)).body.items as any[];

  const browser: Browser = await launchBrowser();
  t.teardown(() => browser.close());

  const session = (user: { email: string; password: string }, width = 1280) => logInSession(browser, s.apiUrl, user, { width, waitMs: WAIT });

  const a = await session(admin);
  const page = a.page;
  // Tomorrow 22:00 to 23:30 in Berlin (the browser's zone), as <input type="datetime-local"> takes it.
  const day = new Date(Date.now() + 86_400_000).toLocaleDateString('sv-SE', { timeZone: 'Europe/Berlin' });

  t.test('an admin adds a one-off window for a machine from the page "Maintenance"', async (t) => {
    await page.click('nav >> text=Maintenance');
    await page.waitForURL((u) => u.pathname === '/maintenance');
    await page.locator('text=No maintenance windows.').waitFor();
    await screenshot(page, 'maintenance-empty-desktop');
    await expectNoAxeViolations(t, page, 'maintenance page');
    await page.selectOption('#maint-scope', 'machine');
    await page.locator('#maint-machine option', { hasText: 'web-1' }).waitFor({ state: 'attached' });
    await page.fill('#maint-start', `${day}T22:00`);
    await page.fill('#maint-end', `${day}T23:30`);
    await page.fill('#maint-desc', 'switch firmware');
    await page.click('button:has-text("Add window")');
    await page.locator('tr[data-window]', { hasText: 'machine web-1' }).waitFor();
    const [w] = await windows();
    t.match(w, { scope: 'machine', machine_id: machineId, kind: 'once', description: 'switch firmware' });
    const startBerlin = new Date(w.starts_at).toLocaleString('sv-SE', { timeZone: 'Europe/Berlin' });
    t.equal(startBerlin, `${day} 22:00:00`, 'the start is 22:00 in the browser’s zone');
    t.equal(new Date(w.ends_at).getTime() - new Date(w.starts_at).getTime(), 90 * 60_000);
  });

  t.test('a recurring window for a software pattern in another zone; a refused one shows the reason', async (t) => {
    await page.selectOption('#maint-kind', 'recurring');
    await page.selectOption('#maint-scope', 'software');
    await page.fill('#maint-pattern', 'db-*');
    await page.fill('#maint-zone', 'America/New_York');
    // Twelve hours from now in that zone: the window is never in progress while this file runs
    // (at a fixed 01:30 on Sat and Sun it was, on weekend mornings, and put db-backup in maintenance
    // in the test below).
    const nyHour = Number(new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', hour: '2-digit', hourCycle: 'h23' }).format(new Date()));
    const start = `${String((nyHour + 12) % 24).padStart(2, '0')}:30`;
    await page.fill('#maint-time', start);
    await page.fill('#maint-minutes', '1400');
    await page.click('button:has-text("Add window")');
    await page.locator('.note.error', { hasText: 'duration_minutes: at most 1320' }).first().waitFor();
    await screenshot(page, 'maintenance-refused-desktop');
    t.equal((await windows()).length, 1, 'nothing stored');
    for (const d of ['Mon', 'Tue', 'Wed', 'Thu', 'Fri']) await page.locator('label.check', { hasText: d }).locator('input').uncheck();
    await page.fill('#maint-minutes', '90');
    await page.click('button:has-text("Add window")');
    const row = page.locator('tr[data-window]', { hasText: 'software db-*' });
    await row.waitFor();
    t.match(await row.textContent(), new RegExp(`Sat, Sun at ${start} \\(America/New_York\\) for 90 min`));
    const w = (await windows()).find((x) => x.scope === 'software');
    t.match(w, { software_pattern: 'db-*', kind: 'recurring', recurrence: { time_zone: 'America/New_York', start_time: start, duration_minutes: 90, days: ['sat', 'sun'] } });
    await screenshot(page, 'maintenance-two-windows-desktop');
    await expectNoAxeViolations(t, page, 'maintenance page with the recurring form');
  });

  t.test('an admin deletes a window after confirming', async (t) => {
    const row = page.locator('tr[data-window]', { hasText: 'machine web-1' });
    await row.locator('button:has-text("Delete")').click();
    await row.waitFor({ state: 'detached' });
    t.match(a.dialogs.at(-1), /^Delete the maintenance window for machine web-1\?/, 'asked first');
    t.same((await windows()).map((w) => w.scope), ['software'], 'gone in the api');
    t.same(a.errors, [], 'no script errors');
  });

  t.test('a window in progress: the fleet shows its instance in maintenance, the others as they are', async (t) => {
    const items = (await get(`${s.apiUrl}/api/instances`, admin.jwt)).body.items as { id: string; software: string }[];
    const agent = items.find((i) => i.software === 'agent')!;
    const r = await request('POST', `${s.apiUrl}/api/maintenance-windows`, admin.jwt, {
      scope: 'instance',
      instance_id: agent.id,
      starts_at: new Date().toISOString(),
      ends_at: new Date(Date.now() + 3_600_000).toISOString(),
      description: 'disk swap',
    });
    t.equal(r.status, 201);
    await page.goto(`${s.apiUrl}/`);
    const row = page.locator('tr', { hasText: 'agent' }).filter({ hasText: 'web-1' }).first();
    await row.locator('.light-word', { hasText: /^Maintenance$/ }).waitFor();
    t.match(await row.textContent(), /maintenance window/, 'with its reason');
    t.equal(await page.locator('tr', { hasText: 'db-backup' }).locator('.light-word', { hasText: /^Maintenance$/ }).count(), 0, 'the other instance is not in it');
    // The counts are cached per customer for API_COUNT_CACHE_MS (1 s) apart from the rows: the
    // page read them while the window was not yet there (the CI run saw 0).
    const chip = page.locator('.light-filter .chip-maintenance');
    await eventually(async () => {
      await page.reload();
      await chip.waitFor();
      return /\b1\b/.test((await chip.textContent()) ?? '');
    }, WAIT, 'the maintenance chip counts 1');
    t.match(await chip.textContent(), /\b1\b/, 'counted in the maintenance chip');
    await screenshot(page, 'fleet-maintenance-desktop');
    t.same(a.errors, [], 'no script errors');
  });

  t.test('a viewer sees the list, no form and no delete button; at phone width nothing scrolls sideways', async (t) => {
    const v = await session(viewer, 390);
    await v.page.goto(`${s.apiUrl}/maintenance`);
    await v.page.locator('tr[data-window]', { hasText: 'software db-*' }).waitFor();
    t.equal(await v.page.locator('#add-window').count(), 0, 'no form');
    t.equal(await v.page.locator('tr[data-window] button').count(), 0, 'no delete button');
    const o = await horizontalOverflow(v.page);
    t.ok(o.scrollWidth <= o.width, `no sideways scrolling (${JSON.stringify(o)})`);
    await screenshot(v.page, 'maintenance-viewer-phone');
    await expectNoAxeViolations(t, v.page, 'maintenance page at phone width');
    await v.ctx.close();
  });
}
