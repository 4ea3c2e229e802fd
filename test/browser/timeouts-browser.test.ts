// Timeout rules and the late colour in the dashboard (headless Chromium against the real stack): an
// admin reads an instance's timeout and deadline, adds a rule for it in Settings › Timeouts (the
// instance picked by machine name) and sees the deadline move on the instance page; a second rule
// for the same instance shows the api's refusal next to the form; the admin shortens the rule and
// adds one for a software pattern, which an instance takes at once; a viewer reads the rules
// without edit controls; that instance turns late, then red in the fleet list (row, reason, chip
// counts, its deadline); the admin deletes the instance's rule and the instance has the defaults again. The
// e-mail settings offer "turns late". Screenshots go to test/artifacts/.
import t from 'tap';
import type { Browser } from 'playwright-core';
import { testStack, get, post, eventually } from '../helpers/stack.js';
import { launchBrowser, browserUnavailable, screenshot, expectNoAxeViolations, logInSession } from '../helpers/browser.js';

const skip = browserUnavailable();
// A time the instance page shows: the time, or the date and time when it falls on another day in
// Berlin (dashboard/src/format.ts); a run near midnight sees the second.
const AT = String.raw`(\d\d:\d\d:\d\d|\d\d/\d\d/\d{4}, \d\d:\d\d)`;
if (skip) t.plan(0, `browser tests skipped: ${skip}`);
else await run();

async function run(): Promise<void> {
  // Rules may be as short as 1 s here, so the late and red phases take seconds; the sweep judges
  // every 0.5 s. The default timeout (300 s) keeps every other instance green throughout. Counts are
  // not cached, so a total read while an instance is late counts it.
  const s = await testStack(t, 'dashtimeouts', { env: { TIMEOUT_RULE_MIN_S: '1', LIGHT_SWEEP_INTERVAL_MS: '500', API_COUNT_CACHE_MS: '0' } });
  const admin = await s.newUser('admin');
  const viewer = await s.newUser('viewer');
  const WAIT = 45_000;

  // No assertion outside a subtest: tap would end the file there (and its teardown stop the stack).
  for (const m of ['kiosk-1', 'kiosk-2']) {
    const r = await s.report(m, 'heartbeat', { version: '1.0' });
    if (r.status !== 200) throw new Error(`heartbeat ${m}: ${r.status}`);
  }
  const ids = await eventually(async () => {
    const items = (await get(`${s.apiUrl}/api/instances`, admin.jwt)).body.items as { id: string; machine: string }[];
    return items.length === 2 ? Object.fromEntries(items.map((i) => [i.machine, i.id])) : null;
  }, 15_000, 'two instances');
  const kiosk = ids['kiosk-1']!;
  const api = async (id = kiosk) => (await get(`${s.apiUrl}/api/instances/${id}`, admin.jwt)).body;
  /** The stored deadline minus the last heartbeat, seconds. */
  const timeoutOf = (i: { deadline: string; last_heartbeat_at: string }) => (Date.parse(i.deadline) - Date.parse(i.last_heartbeat_at)) / 1000;

  const browser: Browser = await launchBrowser();
  t.teardown(() => browser.close());

  const session = (user: { email: string; password: string }) => logInSession(browser, s.apiUrl, user, { waitMs: WAIT });
  const a = await session(admin);
  const page = a.page;
  const fact = (name: string) => page.locator(`[data-fact=${name}] dd`);
  const timeouts = page.locator('#timeouts');
  const ruleRow = timeouts.locator('tr[data-rule]');
  let ruleId = '';

  t.test('the instance page shows the default timeout and its deadline', async (t) => {
    await page.goto(`${s.apiUrl}/instances/${kiosk}`);
    await fact('deadline').waitFor();
    t.equal(await fact('timeout').textContent(), '5 min 0 s', 'HEARTBEAT_TIMEOUT_S');
    t.match(await fact('deadline').textContent(), new RegExp(`^in [1-5] min \\(${AT}\\)$`), 'relative, then the time');
    t.equal(await page.locator('[data-fact=late-share]').count(), 0, 'no late share: none shown');
    t.equal(await page.locator('[data-fact=late-at]').count(), 0);
  });

  t.test('an admin adds a rule for the instance, picked by machine name', async (t) => {
    await page.goto(`${s.apiUrl}/settings#timeouts`);
    await timeouts.locator('[data-testid=timeout-defaults]').waitFor();
    t.equal(await timeouts.locator('[data-testid=timeout-defaults]').textContent(), 'Without a rule: red after 5 min 0 s, never late.');
    t.match(await timeouts.textContent(), 'No rules: every instance has the defaults.');
    await page.selectOption('#tr-scope', 'instance');
    await page.fill('#tr-instance', 'kiosk-1');
    await page.locator('#tr-instances option[value="kiosk-1 / agent"]').waitFor({ state: 'attached' });
    t.equal(await page.locator('#tr-instances option').count(), 1, 'only the machine typed');
    await page.fill('#tr-instance', 'kiosk-1 / agent');
    await page.fill('#tr-timeout', '3600');
    await page.fill('#tr-late', '50');
    await page.fill('#tr-desc', 'kiosk in the hall');
    await timeouts.locator('button[type=submit]').click();
    t.equal(await page.locator('#timeouts-saved').textContent(), 'Saved: 1 instance(s) got new values.');
    await ruleRow.first().waitFor();
    t.equal(await ruleRow.count(), 1);
    t.match(await ruleRow.textContent(), /One instance: kiosk-1 \/ agent.*1 h 0 min.*50 %.*kiosk in the hall/);
    const rules = (await get(`${s.apiUrl}/api/timeout-rules`, admin.jwt)).body;
    t.match(rules.items, [{ scope: 'instance', instance_id: kiosk, machine: 'kiosk-1', software: 'agent', software_pattern: null, timeout_s: 3600, late_percent: 50, description: 'kiosk in the hall' }], 'stored');
    ruleId = rules.items[0].id;
    const i = await api();
    t.match(i, { timeout_s: 3600, late_percent: 50 });
    t.equal(timeoutOf(i), 3600, 'its deadline moved with it');
    t.equal((Date.parse(i.late_at) - Date.parse(i.last_heartbeat_at)) / 1000, 1800);
    t.match(await api(ids['kiosk-2']), { timeout_s: 300, late_percent: 0 }, 'the other instance keeps the defaults');
    await timeouts.scrollIntoViewIfNeeded();
    await screenshot(page, 'timeouts-settings-desktop');
    await expectNoAxeViolations(t, page, 'settings with timeouts');
  });

  t.test("a second rule for the same instance: the api's refusal next to the form", async (t) => {
    await page.selectOption('#tr-scope', 'instance');
    await page.fill('#tr-instance', kiosk);
    await page.fill('#tr-timeout', '60');
    await timeouts.locator('button[type=submit]').click();
    const alert = timeouts.locator('[role=alert]');
    await alert.waitFor();
    t.equal(await alert.textContent(), `a rule for this target exists already (${ruleId}): change it with PUT /api/timeout-rules/${ruleId}`);
    t.equal((await get(`${s.apiUrl}/api/timeout-rules`, admin.jwt)).body.items.length, 1, 'nothing added');
  });

  t.test('the instance page shows the new timeout, late share, deadline and late time', async (t) => {
    await page.goto(`${s.apiUrl}/instances/${kiosk}`);
    await fact('late-share').waitFor();
    t.equal(await fact('timeout').textContent(), '1 h 0 min');
    t.equal(await fact('late-share').textContent(), '50 % of the timeout (30 min 0 s)');
    t.match(await fact('deadline').textContent(), new RegExp(`^in (59|60) min \\(${AT}\\)$`));
    t.match(await fact('late-at').textContent(), new RegExp(`^in (29|30) min \\(${AT}\\)$`));
    await screenshot(page, 'timeouts-instance-deadline-desktop');
    await expectNoAxeViolations(t, page, 'instance page');
  });

  t.test('the admin shortens the rule: 20 s, late at 25 %', async (t) => {
    await page.goto(`${s.apiUrl}/settings#timeouts`);
    await ruleRow.first().waitFor();
    await ruleRow.locator('button', { hasText: 'Edit' }).click();
    const edit = `#tr-edit-${ruleId}`;
    t.equal(await page.inputValue(`${edit}-timeout`), '3600', 'the form starts from the rule');
    await page.fill(`${edit}-timeout`, '');
    await page.fill(`${edit}-late`, '');
    await timeouts.locator('button', { hasText: 'Save' }).click();
    const alert = timeouts.locator('[role=alert]');
    await alert.waitFor();
    t.equal(await alert.textContent(), 'A rule keeps a timeout, a late share or both: delete it instead.', 'clearing both: the refusal beside the form');
    t.match((await get(`${s.apiUrl}/api/timeout-rules`, admin.jwt)).body.items, [{ timeout_s: 3600, late_percent: 50 }], 'unchanged');
    await page.fill(`${edit}-timeout`, '20');
    await page.fill(`${edit}-late`, '25');
    await page.fill(`${edit}-desc`, 'short');
    await timeouts.locator('button', { hasText: 'Save' }).click();
    t.equal(await page.locator('#timeouts-saved').textContent(), 'Saved: 1 instance(s) got new values.');
    t.match(await ruleRow.textContent(), /20 s.*25 %.*short/);
    const i = await api();
    t.match(i, { timeout_s: 20, late_percent: 25 });
    t.equal(timeoutOf(i), 20);
  });

  let door = '';
  t.test('an admin adds a rule for a software pattern: the instance under it takes it at once', async (t) => {
    t.equal((await s.report('door-1', 'heartbeat', { version: '1.0' }, { software: 'doorbell' })).status, 200);
    door = await eventually(async () => ((await get(`${s.apiUrl}/api/instances`, admin.jwt)).body.items as { id: string; machine: string }[]).find((i) => i.machine === 'door-1')?.id, 10_000, 'door-1 stored');
    await page.selectOption('#tr-scope', 'software');
    await page.fill('#tr-pattern', 'door*');
    await page.fill('#tr-timeout', '40');
    await page.fill('#tr-late', '25');
    await timeouts.locator('button[type=submit]').click();
    t.equal(await page.locator('#timeouts-saved').textContent(), 'Saved: 1 instance(s) got new values.');
    t.equal(await ruleRow.count(), 2);
    t.match(await ruleRow.first().textContent(), /^Software pattern: door\*40 s25 %/, 'patterns before instances');
    t.match((await get(`${s.apiUrl}/api/timeout-rules`, admin.jwt)).body.items[0], { scope: 'software', software_pattern: 'door*', timeout_s: 40, late_percent: 25 });
    const i = await api(door);
    t.match(i, { timeout_s: 40, late_percent: 25 });
    t.equal(timeoutOf(i), 40);
    t.equal((Date.parse(i.late_at) - Date.parse(i.last_heartbeat_at)) / 1000, 10, 'late 10 s after its heartbeat');
  });

  t.test('a viewer reads the rules, without edit controls', async (t) => {
    const v = await session(viewer);
    await v.page.goto(`${s.apiUrl}/settings#timeouts`);
    const sec = v.page.locator('#timeouts');
    const kioskRule = sec.locator('tr[data-rule]', { hasText: 'kiosk-1 / agent' });
    await kioskRule.waitFor();
    t.match(await kioskRule.textContent(), /kiosk-1 \/ agent20 s25 %short/);
    t.equal(await sec.locator('tr[data-rule]').count(), 2);
    t.equal(await sec.locator('form').count(), 0, 'no form');
    t.equal(await sec.locator('button').count(), 0, 'no edit or delete buttons');
    t.equal((await post(`${s.apiUrl}/api/timeout-rules`, viewer.jwt, { scope: 'customer', late_percent: 5 })).status, 403, 'and the api refuses');
    t.same(v.errors, [], 'no script errors');
    await v.ctx.close();
  });

  t.test('the fleet list: the instance under the pattern turns late, then red; chips count it; its row shows the deadline', async (t) => {
    // door-1 sent one heartbeat: late 10 s after it, red 40 s after it. (kiosk-1, silent for
    // longer than its shortened rule, is red by now.)
    await page.goto(`${s.apiUrl}/`);
    await page.locator('.live-live').waitFor();
    const row = page.locator(`tr[data-instance="${door}"]`);
    await page.locator(`tr[data-instance="${door}"][data-light=late]`).waitFor({ timeout: 30_000 });
    await page.locator('[data-count=late]', { hasText: /^1$/ }).waitFor();
    t.match(await row.locator('.light-word').textContent(), 'Late');
    t.match(await row.textContent(), /heartbeat late: none for more than 10 s of 40 s/, 'the reason, in words');
    const i = await api(door);
    t.equal(i.light, 'late', 'the api agrees');
    // A late instance counts in the totals: the summary's, the list's and the page's "All".
    t.equal((await get(`${s.apiUrl}/api/fleet/summary`, admin.jwt)).body.total, 3);
    t.equal((await get(`${s.apiUrl}/api/instances`, admin.jwt)).body.total, 3);
    await page.reload();
    await page.locator(`tr[data-instance="${door}"][data-light=late]`).waitFor();
    await page.locator('[data-count=all]', { hasText: /^3$/ }).waitFor();
    await page.locator('.live-live').waitFor();
    t.equal(await row.locator('[data-deadline]').getAttribute('data-deadline'), i.deadline, "the row's deadline is the api's");
    t.match(await row.locator('[data-deadline]').textContent(), /^red in \d+ sec$/);
    await screenshot(page, 'timeouts-fleet-late-desktop');
    await expectNoAxeViolations(t, page, 'fleet with a late instance');
    await page.locator(`tr[data-instance="${door}"][data-light=red]`).waitFor({ timeout: 40_000 });
    await page.locator('[data-count=late]', { hasText: /^0$/ }).waitFor();
    t.equal(await page.locator('[data-count=red]').textContent(), '2', 'door-1 and kiosk-1');
    t.match(await row.locator('[data-deadline]').textContent(), /^red (now|\d+ sec ago)$/);
    t.equal(await page.locator(`tr[data-instance="${ids['kiosk-2']}"]`).getAttribute('data-light'), 'green', 'the instance without a rule stays green');
    // The late chip filters to the late ones: none now.
    await page.locator('.chip-late').click();
    await page.locator('.note', { hasText: 'No instance matches the filter.' }).waitFor();
    t.equal(await page.locator('tr[data-instance]').count(), 0);
  });

  t.test("the admin deletes the instance's rule: it has the defaults again", async (t) => {
    await page.goto(`${s.apiUrl}/settings#timeouts`);
    const kioskRule = ruleRow.filter({ hasText: 'kiosk-1 / agent' });
    await kioskRule.waitFor();
    await kioskRule.locator('button', { hasText: 'Delete' }).click();
    await kioskRule.waitFor({ state: 'detached' });
    t.match(a.dialogs.at(-1), /^Delete the timeout rule for .+\? Its instances fall back/, 'asked first');
    t.match((await get(`${s.apiUrl}/api/timeout-rules`, admin.jwt)).body.items, [{ software_pattern: 'door*' }], 'the pattern rule stays');
    const i = await api();
    t.match(i, { timeout_s: 300, late_percent: 0, late_at: null });
    t.equal(timeoutOf(i), 300);
  });

  t.test('the e-mail settings offer "turns late"', async (t) => {
    const box = page.locator('#notifications').getByRole('checkbox', { name: /turns late/ });
    await box.waitFor();
    await box.check();
    await page.locator('#notifications button[type=submit]').click();
    await page.locator('#notify-saved').waitFor();
    t.same((await get(`${s.apiUrl}/api/notifications/email`, admin.jwt)).body.kinds, ['late']);
    t.same(a.errors, [], 'no script errors, no Content-Security-Policy violations');
  });
}
