// The dashboard's fleet page with 100,000 instances of one customer (headless Chromium, the real
// api): it renders one page of rows (never 100,000), the counts are the whole fleet's, paging works
// in the grouped view (offsets) and the flat view (cursors), and the machine filter and a colour
// filter are applied by the server. A second customer's instances never show. Screenshot:
// test/artifacts/fleet-100k-desktop.png. No timing is asserted (speed lives in bench/read-path.ts).
import t from 'tap';
import type { Page } from 'playwright-core';
import { testStack } from '../helpers/stack.js';
import { judgeAll } from '../helpers/lights.js';
import { launchBrowser, browserUnavailable, screenshot, untilInPage } from '../helpers/browser.js';

const skip = browserUnavailable();
if (skip) t.plan(0, `browser tests skipped: ${skip}`);
else await run();

async function run(): Promise<void> {
  const s = await testStack(t, 'fleetscale', { gateway: false, worker: false, env: { HEARTBEAT_TIMEOUT_S: '86400' } });
  const N = 100_000;
  const SOFTWARE = ['agent', 'logcollector', 'updater', 'scanner'];
  // 25,000 machines with 4 pieces of software each; every 50th instance red (status error), in 20
  // groups; seeded by SQL in two statements (as bench/read-path.ts does).
  await s.pool.query(
    `INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at)
     SELECT $1, 'm' || lpad(g::text, 6, '0'), now(), now() FROM generate_series(0, $2::int - 1) g`,
    [s.customer.id, N / SOFTWARE.length],
  );
  await s.pool.query(
    `INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at, group_name, location, group_priority, sort_priority, status, status_at)
     SELECT m.customer_id, m.id, sw, now(), now(), now(), 'group-' || lpad((n % 20)::text, 2, '0'), 'site-' || (n % 50), n % 20, n % 1000,
            CASE WHEN n % 50 = 0 THEN 'error' ELSE 'running' END, now()
       FROM machines m CROSS JOIN unnest($2::text[]) WITH ORDINALITY AS s(sw, k)
      CROSS JOIN LATERAL (SELECT substr(m.slug, 2)::int * 4 + s.k::int - 1 AS n) x
      WHERE m.customer_id = $1`,
    [s.customer.id, SOFTWARE],
  );
  await s.pool.query('ANALYZE instances');
  const B = await s.newCustomer('other');
  await s.pool.query(
    `WITH m AS (INSERT INTO machines (customer_id, slug, first_seen_at, last_seen_at) VALUES ($1, 'm012345', now(), now()) RETURNING id)
     INSERT INTO instances (customer_id, machine_id, software, first_seen_at, last_seen_at, last_heartbeat_at) SELECT $1, id, 'b-only', now(), now(), now() FROM m`,
    [B.customer.id],
  );
  // The api shows the stored colour: judged as a worker would.
  await judgeAll(s.pool);
  await s.pool.query('ANALYZE instance_lights');
  const owner = await s.newUser('owner');

  const browser = await launchBrowser();
  t.teardown(() => browser.close());
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'Europe/Berlin' });
  ctx.setDefaultTimeout(90_000); // a loaded 2-core machine
  const page = await ctx.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const WAIT = 90_000;

  const range = () => page.locator('[data-testid=fleet-range]').first().textContent();
  const rowIds = (p: Page) => p.locator('tr[data-instance]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-instance')));
  const rowsAre = (n: number) => untilInPage(page, `document.querySelectorAll('tr[data-instance]').length === ${n}`, WAIT);

  t.test('log in: the fleet page shows one page of 100 rows and the whole fleet in the counts', async (t) => {
    await page.goto(`${s.apiUrl}/`);
    await page.waitForURL(/\/login\?next=/);
    await page.locator('#login-email').fill(owner.email);
    await page.locator('#login-password').fill(owner.password);
    await page.keyboard.press('Enter');
    await page.waitForURL((u) => u.pathname === '/');
    await rowsAre(100);
    t.pass('100 rows: one page');
    await page.locator('[data-count=all]', { hasText: /^100000$/ }).waitFor({ timeout: WAIT });
    await page.locator('[data-count=red]', { hasText: /^2000$/ }).waitFor({ timeout: WAIT });
    await page.locator('[data-count=green]', { hasText: /^98000$/ }).waitFor({ timeout: WAIT });
    t.pass('counts of all 100,000: 2,000 red, 98,000 green');
    t.equal(await range(), '1–100 of 100,000');
    t.match(await page.locator('.group-title').first().textContent(), /^group-00/, 'grouped: the group of the lowest priority first');
    await screenshot(page, 'fleet-100k-desktop');
  });

  t.test('paging the grouped view (offsets): next, next, previous', async (t) => {
    const first = await rowIds(page);
    await page.locator('nav.pager').first().getByRole('button', { name: 'Next' }).click();
    await page.locator('[data-testid=fleet-range]', { hasText: '101–200 of 100,000' }).first().waitFor({ timeout: WAIT });
    await rowsAre(100);
    const second = await rowIds(page);
    t.equal(second.filter((id) => first.includes(id)).length, 0, 'page 2 shares no row with page 1');
    await page.locator('nav.pager').first().getByRole('button', { name: 'Next' }).click();
    await page.locator('[data-testid=fleet-range]', { hasText: '201–300 of 100,000' }).first().waitFor({ timeout: WAIT });
    await page.locator('nav.pager').first().getByRole('button', { name: 'Previous' }).click();
    await page.locator('[data-testid=fleet-range]', { hasText: '101–200 of 100,000' }).first().waitFor({ timeout: WAIT });
    await rowsAre(100);
    t.same(await rowIds(page), second, 'back on page 2: the same rows');
  });

  t.test('the flat view pages by cursor, from the start again', async (t) => {
    await page.selectOption('#fleet-by', 'none');
    await page.locator('[data-testid=fleet-range]', { hasText: '1–100 of 100,000' }).first().waitFor({ timeout: WAIT });
    await rowsAre(100);
    const first = await rowIds(page);
    await page.locator('nav.pager').first().getByRole('button', { name: 'Next' }).click();
    await page.locator('[data-testid=fleet-range]', { hasText: '101–200 of 100,000' }).first().waitFor({ timeout: WAIT });
    await untilInPage(page, `!${JSON.stringify(first)}.includes(document.querySelector('tr[data-instance]').getAttribute('data-instance'))`, WAIT);
    await rowsAre(100);
    const second = await rowIds(page);
    t.equal(second.filter((id) => first.includes(id)).length, 0, 'page 2 shares no row with page 1');
    t.equal(new Set([...first, ...second]).size, 200);
    await screenshot(page, 'fleet-100k-flat-page2-desktop');
  });

  t.test('the machine filter and a colour filter are the server’s: matching rows of all 100,000, never the other customer’s', async (t) => {
    await page.fill('#fleet-q', 'M01234');
    // m012340 … m012349: 10 machines, 4 instances each.
    await page.locator('[data-count=all]', { hasText: /^40$/ }).waitFor({ timeout: WAIT });
    await rowsAre(40);
    const text = await page.locator('tr[data-instance]').allTextContents();
    t.ok(text.every((r) => /m01234\d/.test(r)), 'only the matching machines');
    t.notOk(text.some((r) => /b-only/.test(r)), "not the other customer's m012345");
    t.equal(await page.locator('nav.pager').count(), 0, 'one page: no pager');
    await page.fill('#fleet-q', '');
    await page.locator('[data-count=all]', { hasText: /^100000$/ }).waitFor({ timeout: WAIT });
    await page.click('button.chip-red');
    await page.locator('[data-testid=fleet-range]', { hasText: '1–100 of 2,000' }).first().waitFor({ timeout: WAIT });
    await rowsAre(100);
    t.same([...new Set(await page.locator('tr[data-instance]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-light'))))], ['red'], 'red only');
    await screenshot(page, 'fleet-100k-red-desktop');
    t.same(errors, [], 'no script error');
  });
}
