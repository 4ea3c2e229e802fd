// The dashboard end to end in headless Chromium (Debian's, driven by playwright-core) against the
// real stack: log in with the keyboard, see a heartbeating instance green, stop it and watch it turn
// red live (from the event stream, without a reload), open it, read the snapshot's typed leaves,
// read a diagnostic's help text in DE and EN, show suppressed diagnostics, queue a command and see
// its state change, create a token (shown once, copied) and revoke it, switch customer, log out;
// as a system administrator, find a dead letter, open it and replay it; invite a teammate, who
// follows the e-mailed link (an SMTP server of this file's own receives it), chooses a password,
// logs in, changes the password, and sees the reset page.
// Screenshots of the main pages at desktop and phone width go to test/artifacts/ (not committed);
// every page passes axe-core's WCAG A/AA checks and fits a phone's width; the page loads nothing
// from another host and throws no script error.
import t from 'tap';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { testStack, post, get, eventually } from '../helpers/stack.js';
import { addMembership } from '../../lib/store/accounts.js';
import { launchBrowser, browserUnavailable, screenshot, expectNoAxeViolations, horizontalOverflow, untilInPage, settled } from '../helpers/browser.js';
import { randomUUID } from 'node:crypto';
import { subjects, encodeBatch, encodeReport, type Report } from '../../lib/contract/messages.js';
import { deadLetterOf } from '../../lib/store/dead-letters.js';
import { smtpServer, linkToken } from '../helpers/smtp.js';

const skip = browserUnavailable();
if (skip) t.plan(0, `browser tests skipped: ${skip}`);
else await run();

async function run(): Promise<void> {
  // A short heartbeat timeout and a fast sweep, so that "stops heartbeating" turns red in seconds.
  // Invitation e-mails go to an SMTP server of this file's own.
  const smtp = await smtpServer();
  t.teardown(() => smtp.close());
  const s = await testStack(t, 'dashbrowser', {
    env: { HEARTBEAT_TIMEOUT_S: '6', LIGHT_SWEEP_INTERVAL_MS: '500', COMMAND_SWEEP_MS: '1000', ...smtp.env, TOKEN_USAGE_FLUSH_MS: '500' },
  });
  const A = s.customer;
  const owner = await s.newUser('owner');
  const B = await s.newCustomer('other');
  await addMembership(s.pool, owner.id, B.customer.id, 'viewer');

  const WAIT = 45_000; // generous: a loaded 2-core machine
  const desktop = { width: 1280, height: 900 };
  const phone = { width: 390, height: 844 };

  /** An agent that heartbeats every second until stopped, like a real one. */
  class Agent {
    private timer: ReturnType<typeof setInterval> | null = null;
    readonly commands: { id: string; module: string; command: string; args: unknown }[] = [];
    constructor(
      readonly customer: string,
      readonly token: string,
      readonly machine: string,
      readonly software: string,
      readonly fields: Record<string, unknown> = {},
    ) {}
    url(kind: string) {
      return `${s.gatewayUrl}/api/ingest/${this.customer}/${this.machine}/${this.software}/${kind}`;
    }
    async send(kind: string, body: unknown) {
      const r = await post(this.url(kind), this.token, body);
      if (r.status !== 200 && r.status !== 202) throw new Error(`${kind}: ${r.status} ${JSON.stringify(r.body)}`);
      for (const c of r.body.commands ?? []) if (!this.commands.some((x) => x.id === c.id)) this.commands.push(c);
      return r.body;
    }
    beat() {
      return this.send('heartbeat', { version: '5.10.2', uptime_seconds: 7200, pid: 4242, ip_addresses: ['10.1.2.3'], ...this.fields });
    }
    start() {
      this.timer ??= setInterval(() => void this.beat().catch(() => {}), 1000);
      return this.beat();
    }
    stop() {
      if (this.timer) clearInterval(this.timer);
      this.timer = null;
    }
  }

  const live = new Agent(A.slug, s.token, 'web-01', 'agent', { group: 'Production', group_priority: 1, sort_priority: 1, location: 'Berlin' });
  const steady = new Agent(A.slug, s.token, 'db-01', 'guard', { group: 'Production', group_priority: 1, sort_priority: 2, location: 'Frankfurt' });
  const store = new Agent(A.slug, s.token, 'kiosk-7', 'pos', { group: 'Stores', group_priority: 2, location: 'Hamburg' });
  const other = new Agent(B.customer.slug, B.token, 'b-machine', 'b-agent');
  t.teardown(() => [live, steady, store, other].forEach((a) => a.stop()));

  await live.send('help', {
    items: [
      { code: 7001, lang: 'de', title: 'Festplatte fast voll', text: 'Auf dem Datenträger ist weniger als 10 % frei. Alte Protokolle löschen.' },
      { code: 7001, lang: 'en', title: 'Disk almost full', text: 'Less than 10 % is free on the volume. Delete old logs.' },
    ],
  });
  await live.start();
  await live.send('status', {
    status: 'running',
    message: 'all services up',
    snapshot: {
      cpu: { usage: { value: 37.5, type: 'percent', label: 'CPU usage', hint: 'average over all cores' } },
      memory: { total: { value: 17179869184, type: 'bytes', label: 'Memory' } },
      legacy: 'plain value',
      modules: { agent: { commands: [{ name: 'restart', label: 'Restart service' }] } },
    },
  });
  await steady.start();
  await store.start();
  await other.beat();
  // Suppress code 7002 for everyone (the whitelist), before any diagnostic arrives.
  const rule = await post(`${s.apiUrl}/api/whitelist`, owner.jwt, { code: 7002, note: 'known noise' });
  if (rule.status !== 201) throw new Error(`whitelist rule: ${rule.status} ${JSON.stringify(rule.body)}`);

  const instanceId = (machine: string, token = s.token) =>
    eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=${machine}`, token)).body.items?.[0]?.id as string | undefined, WAIT, `instance ${machine}`);
  const liveId = await instanceId('web-01');
  const steadyId = await instanceId('db-01');
  await instanceId('kiosk-7');

  const browser: Browser = await launchBrowser();
  t.teardown(() => browser.close());

  /** A browser context that records what the page asks for and every script error. */
  async function newContext(viewport: { width: number; height: number }): Promise<{ ctx: BrowserContext; page: Page; requests: string[]; errors: string[] }> {
    const ctx = await browser.newContext({ viewport, locale: 'en-GB', timezoneId: 'Europe/Berlin' });
    await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: s.apiUrl });
    ctx.setDefaultTimeout(WAIT);
    const page = await ctx.newPage();
    const requests: string[] = [];
    const errors: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    page.on('pageerror', (e) => errors.push(e.message));
    // A Content-Security-Policy violation (an inline style or script the policy refuses) is an error too.
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) errors.push(m.text());
    });
    page.on('dialog', (d) => void d.accept());
    return { ctx, page, requests, errors };
  }

  async function logIn(page: Page, path = '/') {
    await page.goto(`${s.apiUrl}${path}`);
    await page.waitForURL(/\/login\?next=/);
    await page.locator('#login-email').waitFor();
    // Keyboard only: the e-mail field has the focus, Tab to the password, Enter submits.
    await page.keyboard.type(owner.email);
    await page.keyboard.press('Tab');
    await page.keyboard.type(owner.password);
    await page.keyboard.press('Enter');
    await page.waitForURL((u) => u.pathname === path);
  }

  const d = await newContext(desktop);
  const page = d.page;
  const row = (id: string) => page.locator(`tr[data-instance="${id}"]`);

  t.test('the login page: labelled fields, a wrong password is refused with a message', async (t) => {
    await page.goto(`${s.apiUrl}/instances/${liveId}`);
    await page.waitForURL(/\/login\?next=%2Finstances%2F/);
    t.equal(await page.locator('label[for=login-email]').textContent(), 'E-mail address');
    await page.fill('#login-email', owner.email);
    await page.fill('#login-password', 'wrong password');
    await page.click('button[type=submit]');
    t.match(await page.locator('#login-error').textContent(), /Wrong e-mail address or password/);
    await screenshot(page, 'login-desktop');
    await expectNoAxeViolations(t, page, 'login');
    const cookies = await d.ctx.cookies();
    t.notOk(cookies.some((c) => c.name === 'fleet_session'), 'no session after a failed login');
  });

  t.test('log in with the keyboard: the deep link opens after login; the session is an HttpOnly cookie only', async (t) => {
    await logIn(page, `/instances/${liveId}`);
    await page.locator('h1', { hasText: 'web-01' }).waitFor();
    t.pass('the instance page behind the deep link');
    const cookie = (await d.ctx.cookies()).find((c) => c.name === 'fleet_session');
    t.ok(cookie, 'session cookie set');
    t.equal(cookie?.httpOnly, true, 'HttpOnly');
    t.equal(cookie?.sameSite, 'Lax', 'SameSite=Lax');
    const stored = await page.evaluate<string>('JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie');
    t.notMatch(stored, /eyJ/, 'no JWT in localStorage, sessionStorage or a script-readable cookie');
  });

  t.test('fleet: grouped and sorted, counts per colour, the heartbeating instance green, live stream connected', async (t) => {
    await page.click('nav.main-nav a:has-text("Fleet")');
    await page.waitForURL((u) => u.pathname === '/');
    await row(liveId).and(page.locator('[data-light=green]')).waitFor();
    t.pass('web-01 is green');
    const groups = await page.locator('.group-title').allTextContents();
    t.match(groups[0], /^Production/, 'groups by lowest group_priority: Production first');
    t.match(groups[1], /^Stores/);
    const order = await page.locator('.group').first().locator('tr[data-instance]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-instance')));
    t.same(order, [liveId, steadyId], 'sorted by sort_priority within the group');
    await page.locator('[data-count=all]', { hasText: /^3$/ }).waitFor();
    t.pass('three instances');
    await page.locator('[data-count=green]', { hasText: /^3$/ }).waitFor();
    t.pass('all green');
    await page.locator('.live-state.live-live').waitFor();
    t.pass('the event stream is connected');
    t.notOk(await page.locator('[data-instance] >> text=b-machine').count(), "nothing of the other customer");

    // Text and colour filters.
    await page.fill('#fleet-q', 'kiosk');
    await untilInPage(page, "document.querySelectorAll('tr[data-instance]').length === 1");
    t.match(await page.locator('tr[data-instance]').textContent(), /kiosk-7/, 'text filter');
    await page.fill('#fleet-q', '');
    await page.click('button.chip-red');
    await page.locator('text=No instance matches the filter.').waitFor();
    t.equal(await page.locator('button.chip-red').getAttribute('aria-pressed'), 'true', 'the colour filter says it is on');
    await page.click('button.chip-red');
    await untilInPage(page, "document.querySelectorAll('tr[data-instance]').length === 3");
    await screenshot(page, 'fleet-desktop');
    await expectNoAxeViolations(t, page, 'fleet');
  });

  t.test('stop the agent: the instance turns red live, without a reload', async (t) => {
    await page.evaluate('window.__sameDocument = true');
    live.stop();
    const started = Date.now();
    await row(liveId).and(page.locator('[data-light=red]')).waitFor({ timeout: WAIT });
    t.pass(`red after ${Date.now() - started} ms`);
    t.equal(await page.evaluate('window.__sameDocument'), true, 'the same page: no reload');
    await page.locator('[data-count=red]', { hasText: /^1$/ }).waitFor();
    await page.locator('[data-count=green]', { hasText: /^2$/ }).waitFor();
    t.pass('the counts follow: 1 red, 2 green');
    t.match(await row(liveId).textContent(), /no heartbeat/i, 'the reason is shown');
    t.equal(await row(steadyId).getAttribute('data-light'), 'green', 'the other instance stays green');
    await screenshot(page, 'fleet-red-desktop');

    // A machine that was never seen before shows up by itself too (its first colour is an event).
    const newcomer = new Agent(A.slug, s.token, 'new-box', 'agent', { group: 'Stores', group_priority: 2, location: 'Kiel' });
    await newcomer.beat();
    await page.locator('tr[data-instance][data-light=green]', { hasText: 'new-box' }).waitFor();
    t.equal(await page.evaluate('window.__sameDocument'), true, 'a new instance appears without a reload');
  });

  t.test('open it: facts, the snapshot with typed leaves (label, value with unit, hint), the colour history', async (t) => {
    // Diagnostics arrive while it is red: a warning with help texts, and one the whitelist suppresses.
    await live.send('diagnostics', { items: [{ code: 7001, severity: 2, message: 'Disk C: 95% full' }, { code: 7002, severity: 1, message: 'known noise' }] });
    await eventually(async () => (await get(`${s.apiUrl}/api/instances/${liveId}/diagnostics?suppressed=include`, s.token)).body.items?.length === 2, WAIT, 'diagnostics stored');
    await page.focus(`tr[data-instance="${liveId}"] a.instance-link`);
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/instances/${liveId}`);
    await page.locator('h1', { hasText: 'web-01' }).waitFor();
    t.equal(await page.evaluate('window.__sameDocument'), true, 'followed without a reload');
    await untilInPage(page, "document.activeElement !== null && document.activeElement.id === 'page-title'", 10_000);
    t.pass('focus moved to the new page heading');
    t.equal(await page.locator('.page-head [data-light]').getAttribute('data-light'), 'red');
    const cpu = page.locator('.snap-leaf.typed[data-path="cpu/usage"]');
    t.match(await cpu.locator('.snap-k').textContent(), /^CPU usage/, 'label');
    t.equal(await cpu.locator('.snap-value').textContent(), '37.5 %', 'value with its unit');
    t.equal(await cpu.locator('.snap-hint').textContent(), 'average over all cores', 'hint');
    t.equal(await page.locator('.snap-leaf.typed[data-path="memory/total"] .snap-value').textContent(), '16 GiB', 'bytes shown in IEC units');
    t.equal(await page.locator('.snap-leaf[data-path="legacy"] .snap-value').textContent(), 'plain value', 'an untyped leaf as sent');
    // The history reads ClickHouse: the change shows there a moment after it shows in the light.
    const change = page.locator('#history li[data-event]', { hasText: /Green\s*→\s*Red/ }).first();
    await change.waitFor();
    t.match(await change.textContent(), /no heartbeat for more than 6 s/, 'the change to red is in the colour history, with its reason');
  });

  t.test('host metrics as charts (with the numbers as a table) and artifacts with a working download', async (t) => {
    // An hour of host metrics for the machine, and a crash log uploaded in one chunk.
    const now = Date.now();
    const items = Array.from({ length: 12 }, (_, i) => ({
      client_metric_id: `dash-${i}`,
      ts: new Date(now - (11 - i) * 5 * 60_000).toISOString(),
      values: { cpu_percent: 10 + i * 5, load1: 0.5 + i / 10 },
    }));
    const m = await post(`${s.gatewayUrl}/api/ingest/${A.slug}/web-01/logcollector/metrics`, s.token, { items });
    t.equal(m.status, 200, 'metrics accepted');
    const bytes = Buffer.from('2026-11-22 crash: segmentation fault in worker 3\n');
    const init = await post(live.url('artifact-init'), s.token, { filename: 'crash.log', size: bytes.length, content_type: 'text/plain' });
    t.equal(init.status, 201, 'upload started');
    const chunk = await fetch(live.url(`artifact-chunk/${init.body.upload_id}/0`), {
      method: 'PUT',
      headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/octet-stream' },
      body: bytes,
    });
    t.equal(chunk.status, 200, 'chunk stored');
    const done = await post(live.url(`artifact-complete/${init.body.upload_id}`), s.token, '');
    t.equal(done.status, 200, 'upload complete');
    const machineId = (await get(`${s.apiUrl}/api/instances/${liveId}`, s.token)).body.machine_id;
    await eventually(async () => (await get(`${s.apiUrl}/api/machines/${machineId}/artifacts`, s.token)).body.items?.length === 1, WAIT, 'artifact listed');
    await eventually(async () => (await get(`${s.apiUrl}/api/machines/${machineId}/metrics`, s.token)).body.names?.length === 2, WAIT, 'metrics stored');

    await page.reload();
    const chart = page.locator('#metrics .chart[data-metric="cpu_percent"]');
    await chart.locator('canvas').waitFor();
    t.pass('a chart is drawn');
    t.match(await chart.locator('figcaption').textContent(), /latest 65/, 'the caption says the latest value');
    // Each chart appears once its own series has loaded (SeriesChart fetches one each): the
    // second may come a moment after the first (counted at once, it was 1 in a CI run).
    await page.locator('#metrics .chart[data-metric="load1"] canvas').waitFor();
    t.equal(await page.locator('#metrics .chart').count(), 2, 'both metrics shown');
    await chart.locator('summary').click();
    t.equal(await chart.locator('tbody tr').count(), 12, 'the same numbers as a table');
    await page.uncheck('#metrics input[type=checkbox] >> nth=1');
    await untilInPage(page, "document.querySelectorAll('#metrics .chart').length === 1");
    t.pass('a metric can be hidden');

    const link = page.locator('#artifacts a[download]', { hasText: 'crash.log' });
    await link.waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    t.equal(download.suggestedFilename(), 'crash.log');
    const { readFile } = await import('node:fs/promises');
    t.same(await readFile((await download.path())!), bytes, 'the download is the uploaded file');

    // The owner deletes it (the confirm dialog is accepted): gone from the list and from the api.
    const row = page.locator(`#artifacts tr[data-artifact="${done.body.artifact_id}"]`);
    await row.locator('button.danger').click();
    await row.waitFor({ state: 'detached' });
    t.pass('the deleted artifact leaves the list');
    t.equal((await get(`${s.apiUrl}/api/artifacts/${done.body.artifact_id}/download`, s.token)).status, 404, 'and the api has it no more');
  });

  t.test('diagnostics: severity, help text in EN and DE (panel and page language), suppressed on request', async (t) => {
    const diag = page.locator('#diagnostics tr[data-code="7001"]');
    await diag.waitFor();
    t.match(await diag.textContent(), /Error/, 'severity as a word');
    t.equal(await page.locator('#diagnostics tr[data-code="7002"]').count(), 0, 'the suppressed one is hidden');
    await diag.locator('button', { hasText: 'Help' }).click();
    const help = page.locator('.help[data-help-code="7001"]');
    await help.locator('h3', { hasText: 'Disk almost full' }).waitFor();
    t.match(await help.textContent(), /Less than 10 % is free/, 'English text');
    await help.locator('button[lang=de]').click();
    await help.locator('h3', { hasText: 'Festplatte fast voll' }).waitFor();
    t.match(await help.textContent(), /weniger als 10 % frei/, 'German text');
    t.equal(await help.getAttribute('lang'), 'de', 'marked as German for screen readers');
    await help.locator('button[lang=en]').click();
    await help.locator('h3', { hasText: 'Disk almost full' }).waitFor();

    // The page language switch: labels and the help text follow.
    await page.click('header button[lang=de]');
    await page.locator('#diagnostics h2', { hasText: 'Diagnosen' }).waitFor();
    await help.locator('h3', { hasText: 'Festplatte fast voll' }).waitFor();
    t.equal(await page.evaluate('document.documentElement.lang'), 'de', '<html lang> follows');
    await screenshot(page, 'instance-de-desktop');
    await page.click('header button[lang=en]');
    await page.locator('#diagnostics h2', { hasText: 'Diagnostics' }).waitFor();

    await page.check('#diagnostics input[type=checkbox]');
    const suppressed = page.locator('#diagnostics tr[data-code="7002"]');
    await suppressed.waitFor();
    t.match(await suppressed.textContent(), /suppressed/, 'shown on request, marked suppressed');
    await page.uncheck('#diagnostics input[type=checkbox]');
    await suppressed.waitFor({ state: 'detached' });
  });

  t.test('commands: the advertised one is queued from the page and its state follows the agent', async (t) => {
    const cmd = page.locator('#commands li[data-command="agent.restart"]');
    await cmd.waitFor();
    t.match(await cmd.textContent(), /Restart service/, 'advertised with its label');
    await cmd.locator('button', { hasText: 'Run' }).click();
    await page.locator('#commands [role=status]', { hasText: 'queued' }).waitFor();
    const rowQueued = page.locator('#commands tr[data-command-id][data-state=queued]');
    await rowQueued.waitFor();
    t.match(await rowQueued.textContent(), /agent\.restart/);
    const listed = await get(`${s.apiUrl}/api/instances/${liveId}/commands`, owner.jwt);
    t.equal(listed.body.items?.[0]?.state, 'queued', 'queued in the API too');
    await screenshot(page, 'instance-desktop');
    await expectNoAxeViolations(t, page, 'instance');

    // The agent comes back, gets the command with its heartbeat and acknowledges it.
    await eventually(async () => (await live.beat(), live.commands.length > 0), WAIT, 'the command handed to the agent');
    const c = live.commands[0]!;
    t.match(c, { module: 'agent', command: 'restart' });
    await live.send(`commands/${c.id}/ack`, { result: 'success', message: 'restarted in 2 s' });
    const done = page.locator(`#commands tr[data-command-id="${c.id}"][data-state=succeeded]`);
    await done.waitFor();
    t.match(await done.textContent(), /restarted in 2 s/, 'the result message');
    // The heartbeat ended the silence, live on this page too: yellow now (not green), because of the
    // error diagnostic of a moment ago (warnings colour the light for 15 minutes).
    await page.locator('.page-head [data-light=yellow]').waitFor();
    t.pass('no longer red after the heartbeat: yellow, for the recent error diagnostic');
  });

  t.test('settings: create a token (shown once, copied, it works), then revoke it', async (t) => {
    await page.click('nav.main-nav a:has-text("Settings")');
    await page.locator('#tokens h2').waitFor();
    await page.fill('#token-name', 'ci-token');
    await page.check('#tokens input[type=checkbox] >> nth=1'); // read too
    await page.click('#tokens button[type=submit]');
    const box = page.locator('#tokens .secret-box');
    await box.waitFor();
    const token = await page.inputValue('#new-token');
    t.match(token, /^fk_/, 'the token is shown');
    await box.locator('button', { hasText: 'Copy' }).click();
    await box.locator('text=Copied to the clipboard.').waitFor();
    t.equal(await page.evaluate('navigator.clipboard.readText()'), token, 'the copy button put it on the clipboard');
    const hb = await post(`${s.gatewayUrl}/api/ingest/${A.slug}/ci-box/agent/heartbeat`, token, {});
    t.equal(hb.status, 200, 'the new token is accepted by the gateway');
    await screenshot(page, 'settings-desktop');
    await expectNoAxeViolations(t, page, 'settings');

    await box.locator('button', { hasText: 'Done' }).click();
    await box.waitFor({ state: 'detached' });
    t.notOk((await page.content()).includes(token), 'gone from the page once hidden');
    await page.reload();
    await page.locator('#tokens tr[data-token]').first().waitFor();
    t.notOk((await page.content()).includes(token), 'and not shown again after a reload');

    const tokRow = page.locator('#tokens tr[data-token]', { hasText: 'ci-token' });
    t.equal(await tokRow.getAttribute('data-revoked'), 'no');
    // The answer to the page's DELETE, waited for on its own: a failure then says whether the click
    // sent no request, the api refused it, or the page did not show what the api answered.
    const tokenId = await tokRow.getAttribute('data-token');
    const revoked = page.waitForResponse((r) => r.request().method() === 'DELETE' && /\/api\/tokens\/[^/]+$/.test(new URL(r.url()).pathname), { timeout: WAIT });
    await tokRow.locator('button', { hasText: 'Revoke' }).click(); // confirm() is accepted
    const answer = await revoked;
    t.equal(new URL(answer.url()).pathname, `/api/tokens/${tokenId}`, 'the DELETE names the token clicked');
    t.equal(answer.status(), 200, 'the page asked the api to revoke it, and the api did');
    await page.locator('#tokens tr[data-token][data-revoked=yes]', { hasText: 'ci-token' }).waitFor();
    t.pass('shown as revoked');
    const listed = await get(`${s.apiUrl}/api/tokens`, owner.jwt);
    t.ok(listed.body.items.find((x: { name: string; revoked_at: string | null }) => x.name === 'ci-token')?.revoked_at, 'revoked in the API');
    await eventually(async () => (await post(`${s.gatewayUrl}/api/ingest/${A.slug}/ci-box/agent/heartbeat`, token, {})).status === 403, WAIT, 'refused by the gateway');
    t.pass('the gateway refuses the revoked token');

    // A token bound to one machine, expiring in 30 days; the list shows the binding, the creator and the first use.
    await page.fill('#token-name', 'ci-box only');
    await page.fill('#token-machine', 'ci-box');
    await page.selectOption('#token-expires', '30');
    await page.click('#tokens button[type=submit]');
    await box.waitFor();
    const bound = await page.inputValue('#new-token');
    await box.locator('button', { hasText: 'Done' }).click();
    const row = page.locator('#tokens tr[data-token]', { hasText: 'ci-box only' });
    t.equal(await row.locator('td[data-machine]').getAttribute('data-machine'), 'ci-box', 'the binding is listed');
    t.match(await row.textContent(), new RegExp(`by ${owner.email.replace(/[.+]/g, '\\$&')}`), 'and who created it');
    t.equal((await post(`${s.gatewayUrl}/api/ingest/${A.slug}/ci-box/agent/heartbeat`, bound, {})).status, 200, 'it posts as its machine');
    const other = await post(`${s.gatewayUrl}/api/ingest/${A.slug}/ci-other/agent/heartbeat`, bound, {});
    t.equal(other.status, 403, 'and not as another');
    const api = (await get(`${s.apiUrl}/api/tokens`, owner.jwt)).body.items.find((x: { name: string }) => x.name === 'ci-box only');
    t.same([api.scopes, api.machine], [['ingest'], 'ci-box'], 'ingest only');
    t.ok(Math.abs(Date.parse(api.expires_at) - Date.now() - 30 * 86_400_000) < 3600_000, 'expires in 30 days');
    await eventually(async () => {
      await page.reload();
      return !(await page.locator('#tokens tr[data-token]', { hasText: 'ci-box only' }).textContent())?.includes('never');
    }, WAIT, 'the last use shown after the gateway wrote it');
    t.pass('last use shown');
  });

  t.test('settings: licence, onboarding checklist, support contacts, a whitelist rule added from the page', async (t) => {
    // The page was just reloaded: each section fetches on its own, so each is read once it says it is
    // settled (aria-busy=false). Reading at once raced the fetch (support e-mail missing in one CI run).
    t.match(await settled(page, 'licence').textContent(), /[3-6] of 5 devices/, 'device count and limit');
    await settled(page, 'onboarding').waitFor();
    const steps = await page.locator('#onboarding li[data-step]').evaluateAll((els) => els.map((e) => [e.getAttribute('data-step'), e.classList.contains('done')]));
    t.same(steps.slice(0, 5), [
      ['token_created', true],
      ['first_heartbeat', true],
      ['first_diagnostics', true],
      ['first_status', true],
      ['help_texts', true],
    ]);
    t.match(await settled(page, 'support').textContent(), /support@example\.com/, 'support e-mail');
    await page.fill('#wl-code-from', '9000');
    await page.fill('#wl-code-to', '9099');
    await page.fill('#wl-message', '*timeout*');
    await page.click('#whitelist button[type=submit]');
    await page.locator('#whitelist tr[data-rule]', { hasText: '9000–9099' }).waitFor();
    const rules = await get(`${s.apiUrl}/api/whitelist`, owner.jwt);
    t.ok(rules.body.items.some((r: { code_from: number; code_to: number; message: string }) => r.code_from === 9000 && r.code_to === 9099 && r.message === '*timeout*'), 'stored');
  });

  t.test('settings: a webhook added (its secret shown once), listed, deleted', async (t) => {
    await page.fill('#webhook-url', 'https://hooks.example.com/fleet');
    await page.fill('#webhook-desc', 'on-call pager');
    await page.click('#webhooks button[type=submit]');
    const secret = await page.inputValue('#new-secret');
    t.match(secret, /^whsec_/, 'the generated secret is shown');
    const hook = page.locator('#webhooks li[data-webhook]', { hasText: 'hooks.example.com' });
    await hook.waitFor();
    t.match(await hook.textContent(), /on-call pager/, 'listed with its description');
    const listed = await get(`${s.apiUrl}/api/webhooks`, owner.jwt);
    t.equal(listed.body.items?.[0]?.url, 'https://hooks.example.com/fleet', 'stored');
    t.notOk(JSON.stringify(listed.body).includes(secret), 'the list never shows the secret');
    await hook.locator('button', { hasText: 'Deliveries' }).click();
    await hook.locator('text=No deliveries yet.').or(hook.locator('table')).waitFor();
    t.pass('the deliveries open');
    await hook.locator('button', { hasText: 'Delete' }).click(); // confirm() is accepted
    await hook.waitFor({ state: 'detached' });
    t.same((await get(`${s.apiUrl}/api/webhooks`, owner.jwt)).body.items, [], 'deleted');
  });

  t.test('customer switcher: the other customer, with its own instances and the role there', async (t) => {
    await page.click('nav.main-nav a:has-text("Fleet")');
    await row(liveId).waitFor();
    await page.selectOption('#customer-switch', B.customer.id);
    await page.locator('tr[data-instance]', { hasText: 'b-machine' }).waitFor();
    t.equal(await row(liveId).count(), 0, "the first customer's instances are gone");
    await page.click('nav.main-nav a:has-text("Settings")');
    await page.locator('#tokens', { hasText: 'Needs the admin role' }).waitFor();
    t.pass('a viewer there: no token management');
    await page.selectOption('#customer-switch', A.id);
    await page.locator('#tokens tr[data-token]').first().waitFor();
    t.pass('back, an owner again');
  });

  t.test('log out: back to the login page, the session is gone', async (t) => {
    await page.click('header button:has-text("Log out")');
    await page.waitForURL(/\/login/);
    await page.locator('#login-email').waitFor();
    const me = await page.evaluate("fetch('/auth/me').then((r) => r.status)");
    t.equal(me, 401, '/auth/me answers 401');
    t.notOk((await d.ctx.cookies()).some((c) => c.name === 'fleet_session' && c.value), 'no session cookie');
  });

  t.test('desktop: only this host was asked, and no script error', async (t) => {
    const foreign = d.requests.filter((u) => !u.startsWith(s.apiUrl) && !u.startsWith('data:'));
    t.same(foreign, [], 'no request to another host');
    t.same(d.errors, [], 'no script errors, no Content-Security-Policy violations');
  });

  t.test('phone width: every page fits, is accessible, and is captured', async (t) => {
    live.start();
    const p = await newContext(phone);
    await p.page.goto(`${s.apiUrl}/login`);
    await p.page.locator('#login-email').waitFor();
    await screenshot(p.page, 'login-phone');
    await p.page.fill('#login-email', owner.email);
    await p.page.fill('#login-password', owner.password);
    await p.page.click('button[type=submit]');
    await p.page.waitForURL((u) => u.pathname === '/');
    await p.page.locator(`tr[data-instance="${liveId}"]`).waitFor();
    const pages: [string, string, string][] = [
      ['fleet', '/', `tr[data-instance="${steadyId}"]`],
      ['instance', `/instances/${liveId}`, '#commands tr[data-command-id]'],
      ['settings', '/settings', '#tokens tr[data-token]'],
    ];
    for (const [name, path, ready] of pages) {
      if (new URL(p.page.url()).pathname !== path) await p.page.goto(`${s.apiUrl}${path}`);
      await p.page.locator(ready).first().waitFor();
      if (name === 'instance') await p.page.locator('#diagnostics tr[data-code="7001"] button').click();
      const o = await horizontalOverflow(p.page);
      t.ok(o.scrollWidth <= o.width, `${name}: no sideways scrolling at ${o.width} px (page ${o.scrollWidth} px) ${o.culprits.join(', ')}`);
      await screenshot(p.page, `${name}-phone`);
      await expectNoAxeViolations(t, p.page, `${name} (phone)`);
    }
    t.equal(await p.page.locator('nav.main-nav a[href="/dead-letters"]').count(), 0, 'no dead letters for an owner who is no system administrator');
    t.same(p.errors, [], 'no script errors, no Content-Security-Policy violations');
    await p.ctx.close();
  });

  t.test('invite → accept → set password → log in; change the password; the reset page; every width', async (t) => {
    const mate = `mate-${s.id}@example.com`;
    // The owner invites from Settings -> Members.
    const o = await newContext(desktop);
    await o.page.goto(`${s.apiUrl}/login?next=%2Fsettings`);
    await o.page.fill('#login-email', owner.email);
    await o.page.fill('#login-password', owner.password);
    await o.page.click('button[type=submit]');
    await o.page.waitForURL((u) => u.pathname === '/settings');
    await o.page.locator('#member-email').waitFor();
    await o.page.fill('#member-email', mate);
    await o.page.selectOption('#member-role', 'admin');
    await o.page.click('#members button[type=submit]');
    await o.page.locator('#invite-note', { hasText: mate }).waitFor();
    const pending = o.page.locator(`tr[data-invitation="${mate}"]`);
    await pending.waitFor();
    t.match(await pending.textContent(), /admin.*pending/, 'listed as pending, with its role');
    t.notMatch(await o.page.locator('#members').textContent(), /password/i, 'no password shown to the owner');
    await o.page.locator(`tr[data-invitation="${mate}"]`, { hasText: 'e-mail sent' }).waitFor();
    t.pass('the e-mail went out');
    await screenshot(o.page, 'settings-invitations-desktop');
    await expectNoAxeViolations(t, o.page, 'settings with invitations');

    // The invitee opens the link from the e-mail (on this server: the link's path and fragment).
    const mail = await smtp.mailTo(mate);
    t.match(mail.text, /\/invitation#token=inv_/);
    const link = `${s.apiUrl}/invitation#token=${linkToken(mail)}`;
    const ph = await newContext(phone);
    await ph.page.goto(link);
    await ph.page.locator('#accept-password').waitFor();
    const ov = await horizontalOverflow(ph.page);
    t.ok(ov.scrollWidth <= ov.width, `invitation: no sideways scrolling at ${ov.width} px (page ${ov.scrollWidth} px) ${ov.culprits.join(', ')}`);
    await screenshot(ph.page, 'invitation-phone');
    await expectNoAxeViolations(t, ph.page, 'invitation (phone)');
    await ph.ctx.close();

    const i = await newContext(desktop);
    await i.page.goto(link);
    await i.page.locator('#accept-password').waitFor();
    t.match(await i.page.locator('main').textContent(), new RegExp(`invited to .* as admin, with the address ${mate.replace(/[.]/g, '\\.')}`));
    await screenshot(i.page, 'invitation-desktop');
    await expectNoAxeViolations(t, i.page, 'invitation');
    await i.page.fill('#accept-password', 'password');
    await i.page.fill('#accept-password-repeat', 'password');
    await i.page.click('main button[type=submit]');
    await i.page.locator('main [role=alert]', { hasText: /at least 10 characters|common/ }).waitFor();
    t.pass("the server's password rule is shown");
    await i.page.fill('#accept-password', 'our fleet in good hands');
    await i.page.fill('#accept-password-repeat', 'our fleet in good hands');
    await i.page.click('main button[type=submit]');
    await i.page.waitForURL((u) => u.pathname === '/');
    await i.page.locator('.user-email', { hasText: mate }).waitFor();
    t.pass('the new account is logged in');
    await o.page.reload();
    // Members and invitations load apart: the count of invitations means something once both did.
    await settled(o.page, 'members').locator(`tr[data-member="${mate}"]`).waitFor();
    t.equal(await o.page.locator(`tr[data-invitation="${mate}"]`).count(), 0, 'a member now, no longer pending');

    // Log out and in again with the chosen password.
    await i.page.click('header button:has-text("Log out")');
    await i.page.waitForURL(/\/login/);
    await i.page.fill('#login-email', mate);
    await i.page.fill('#login-password', 'our fleet in good hands');
    await i.page.click('button[type=submit]');
    await i.page.waitForURL((u) => u.pathname === '/');
    t.pass('logged in with the password they chose');

    // Change it.
    await i.page.click('header a[href="/password"]');
    await i.page.locator('#pw-current').waitFor();
    await i.page.fill('#pw-current', 'our fleet in good hands');
    await i.page.fill('#pw-new', 'an even better passphrase');
    await i.page.fill('#pw-new-repeat', 'an even better passphrase');
    await i.page.click('main form button[type=submit]');
    await i.page.locator('#pw-done').waitFor();
    await screenshot(i.page, 'password-desktop');
    await expectNoAxeViolations(t, i.page, 'change password');
    t.equal((await post(`${s.apiUrl}/auth/login`, null, { email: mate, password: 'an even better passphrase' })).status, 200, 'the new password works');

    // The reset page, as someone logged out sees it from the login page.
    const r = await newContext(phone);
    await r.page.goto(`${s.apiUrl}/login`);
    await r.page.click('a[href="/reset-password"]');
    await r.page.locator('#reset-email').waitFor();
    await r.page.fill('#reset-email', mate);
    await r.page.click('main button[type=submit]');
    await r.page.locator('#reset-done').waitFor();
    const resetMail = await smtp.mailTo(mate, 1);
    // The link from the e-mail, opened as a mail program does: in a new tab.
    const tab = await r.ctx.newPage();
    tab.on('pageerror', (e) => r.errors.push(e.message));
    await tab.goto(`${s.apiUrl}/reset-password#token=${linkToken(resetMail)}`);
    await tab.locator('#reset-password').waitFor();
    const rv = await horizontalOverflow(tab);
    t.ok(rv.scrollWidth <= rv.width, `reset: no sideways scrolling at ${rv.width} px (page ${rv.scrollWidth} px) ${rv.culprits.join(', ')}`);
    await screenshot(tab, 'reset-password-phone');
    await expectNoAxeViolations(t, tab, 'reset password (phone)');
    await tab.fill('#reset-password', 'reset from the phone, 2026');
    await tab.fill('#reset-password-repeat', 'reset from the phone, 2026');
    await tab.click('main button[type=submit]');
    await tab.locator('#reset-done').waitFor();
    t.equal((await post(`${s.apiUrl}/auth/login`, null, { email: mate, password: 'reset from the phone, 2026' })).status, 200, 'the reset password works');
    await i.page.reload();
    await i.page.waitForURL(/\/login/);
    t.pass("the reset ended the desktop's session: back to the login page");
    t.same([...o.errors, ...i.errors, ...r.errors], [], 'no script errors, no Content-Security-Policy violations');
    await Promise.all([o.ctx.close(), i.ctx.close(), r.ctx.close()]);
  });

  t.test('dead letters (system administrator): listed, filtered, opened, replayed after a confirmation; every width', async (t) => {
    const sysadmin = await s.newUser(null, { systemAdmin: true });
    // Two dead letters, written as the worker writes them: the other customer's heartbeat, and a
    // message that is no batch.
    const subj = subjects(s.env.SUBJECT_PREFIX!);
    const js = s.nc.jetstream();
    const source = { stream: s.env.STREAM_NAME!, seq: 1, subject: subj.reports, deliveries: 1 };
    const report: Report = { id: randomUUID(), kind: 'heartbeat', customerId: B.customer.id, customer: B.customer.slug, machine: 'dl-box', software: 'agent', tokenId: randomUUID(), receivedAt: Date.now(), body: null };
    const dl = deadLetterOf({ base: subj.deadLetter, failure: { kind: 'data', reason: 'Postgres refused a value (22003 numeric_value_out_of_range)' }, failureClass: 'data', source, report });
    await js.publish(dl.subject, encodeBatch([encodeReport(report, Buffer.from('{"version":"5.10.2","uptime_seconds":42}'))]), { headers: dl.headers, msgID: dl.msgID });
    const junk = deadLetterOf({ base: subj.deadLetter, failure: { kind: 'data', reason: 'queue message cannot be decoded' }, failureClass: 'decode', source: { ...source, seq: 2 } });
    await js.publish(junk.subject, Buffer.from([0xff, 0x00, 0x01]), { headers: junk.headers, msgID: junk.msgID });

    const a = await newContext(desktop);
    const pg = a.page;
    await pg.goto(`${s.apiUrl}/dead-letters`);
    await pg.waitForURL(/\/login\?next=%2Fdead-letters/);
    await pg.fill('#login-email', sysadmin.email);
    await pg.fill('#login-password', sysadmin.password);
    await pg.click('button[type=submit]');
    await pg.waitForURL((u) => u.pathname === '/dead-letters');
    await pg.locator('tr[data-dead-letter]').nth(1).waitFor();
    t.equal(await pg.locator('tr[data-dead-letter]').count(), 2, 'both listed');
    t.equal(await pg.locator('nav.main-nav a[href="/dead-letters"]').getAttribute('aria-current'), 'page', 'linked in the header');
    const junkRow = pg.locator('tr[data-dead-letter][data-content=undecodable]');
    t.match(await junkRow.textContent(), /no customer.*undecodable.*decode/, 'the undecodable one: no customer');
    t.equal(await junkRow.locator('button', { hasText: 'Replay' }).count(), 0, 'and no replay for it');

    await pg.fill('#dl-customer', B.customer.slug);
    await pg.click('#dead-letters button[type=submit]');
    await untilInPage(pg, "document.querySelectorAll('tr[data-dead-letter]').length === 1");
    const row = pg.locator('tr[data-dead-letter][data-content=reports]');
    t.match(await row.textContent(), /heartbeat.*dl-box \/ agent.*data.*22003 numeric_value_out_of_range/, 'customer, kind, machine, class, reason');
    await row.locator('button', { hasText: 'Show' }).click();
    const body = pg.locator('.dl-detail pre.dl-body');
    await body.waitFor();
    t.equal(await body.textContent(), '{\n  "version": "5.10.2",\n  "uptime_seconds": 42\n}', 'the body, pretty-printed');
    t.match(await pg.locator('.dl-headers').textContent(), /Fleet-Customer.*other-/, 'the headers');
    await screenshot(pg, 'dead-letters-desktop');
    await expectNoAxeViolations(t, pg, 'dead letters');

    await row.locator('button', { hasText: 'Replay' }).click(); // confirm() is accepted
    await pg.locator('#dl-result', { hasText: '1 replayed' }).waitFor();
    await pg.locator('text=No dead letters.').waitFor();
    t.pass('replayed and gone from the list');
    await eventually(async () => (await get(`${s.apiUrl}/api/instances?machine=dl-box`, B.token)).body.items?.length === 1, WAIT, 'the replayed heartbeat stored');
    t.pass("the other customer's instance exists now");

    const p = await newContext(phone);
    await p.page.goto(`${s.apiUrl}/login?next=%2Fdead-letters`);
    await p.page.fill('#login-email', sysadmin.email);
    await p.page.fill('#login-password', sysadmin.password);
    await p.page.click('button[type=submit]');
    await p.page.waitForURL((u) => u.pathname === '/dead-letters');
    await p.page.locator('tr[data-dead-letter]').first().waitFor();
    await p.page.locator('tr[data-dead-letter] button', { hasText: 'Show' }).click();
    await p.page.locator('.dl-detail pre.dl-body').waitFor();
    const o = await horizontalOverflow(p.page);
    t.ok(o.scrollWidth <= o.width, `dead letters: no sideways scrolling at ${o.width} px (page ${o.scrollWidth} px) ${o.culprits.join(', ')}`);
    await screenshot(p.page, 'dead-letters-phone');
    await expectNoAxeViolations(t, p.page, 'dead letters (phone)');
    t.same([...a.errors, ...p.errors], [], 'no script errors, no Content-Security-Policy violations');
    await Promise.all([a.ctx.close(), p.ctx.close()]);
  });
}
