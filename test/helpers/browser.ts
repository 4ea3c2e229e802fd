// Headless Chromium for the dashboard tests: Debian's /usr/bin/chromium (installed by the test set-up,
// deploy/bootstrap.mjs), driven by playwright-core. Never a downloaded browser. Each launch gets a
// fresh profile in a temporary folder (Playwright makes and removes it), nothing in the background
// talks to the internet.
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../../deploy/service-process.js';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Why the browser tests cannot run here, or null. SKIP_BROWSER_TESTS=1 skips them on purpose. */
export function browserUnavailable(): string | null {
  if (process.env.SKIP_BROWSER_TESTS === '1') return 'SKIP_BROWSER_TESTS=1';
  return null;
}

export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: the test set-up installs the Debian package chromium (deploy/bootstrap.mjs); or set SKIP_BROWSER_TESTS=1`);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--headless',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

/** test/artifacts/ (gitignored): screenshots to look at. */
export const ARTIFACTS = join(ROOT, 'test', 'artifacts');

export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[]; failureSummary?: string }[];
}

/** axe-core's WCAG 2.x A/AA checks on the page as it is now (labels, names, contrast, structure). */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  const axe = (await import('axe-core')).default;
  // Evaluated through the DevTools protocol: the page's CSP (no inline scripts) stays in force.
  if (!(await page.evaluate('typeof window.axe === "object"'))) await page.evaluate(axe.source);
  // A string, evaluated in the page (this project's TypeScript knows no DOM).
  return page.evaluate<AxeViolation[]>(`(async () => {
    const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] }, resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => ({ target: n.target, failureSummary: n.failureSummary })) }));
  })()`);
}

/** Nothing wider than the viewport (no sideways scrolling at phone width). */
export async function horizontalOverflow(page: Page): Promise<{ scrollWidth: number; width: number; culprits: string[] }> {
  return page.evaluate(`(() => {
    const width = window.innerWidth;
    const culprits = [];
    for (const el of document.querySelectorAll('body *')) {
      const b = el.getBoundingClientRect();
      if (b.right > width + 1 && culprits.length < 10) culprits.push(el.tagName.toLowerCase() + '.' + String(el.className).replace(/\\s+/g, '.') + ' right=' + Math.round(b.right));
    }
    return { scrollWidth: document.documentElement.scrollWidth, width, culprits };
  })()`);
}

/**
 * Waits until `expression` is true in the page. Each check is one evaluation through the DevTools
 * protocol, which the page's CSP allows; Playwright's own waitForFunction re-evaluates a string
 * inside the page while polling, which the dashboard's CSP (no 'unsafe-eval') refuses once the
 * first check was false.
 */
export async function untilInPage(page: Page, expression: string, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await page.evaluate<boolean>(`!!(${expression})`)) return;
    if (Date.now() > until) throw new Error(`not true in the page within ${ms} ms: ${expression}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The dashboard section `id` once it has its data: a card that fetches says `aria-busy=true` while it
 * loads. Its text read before that is the "Loading" line, so a test that reads a section right
 * after a navigation or reload reads it through this (textContent and waitFor wait for the match).
 */
export function settled(page: Page, id: string): Locator {
  return page.locator(`section#${id}[aria-busy=false]`);
}

/** A user's page in a fresh context: dialogs accepted and recorded, page errors and CSP refusals recorded. */
export interface Session {
  ctx: BrowserContext;
  page: Page;
  dialogs: string[];
  errors: string[];
}

/**
 * Logs `user` in through the login page (fields filled, Enter) and waits for `path` (the login
 * page's `next`). In Berlin time and British English, `width` × 900, every wait `waitMs`.
 */
export async function logInSession(
  browser: Browser,
  apiUrl: string,
  user: { email: string; password: string },
  o: { width?: number; waitMs?: number; path?: string } = {},
): Promise<Session> {
  const path = o.path ?? '/';
  const ctx = await browser.newContext({ viewport: { width: o.width ?? 1280, height: 900 }, locale: 'en-GB', timezoneId: 'Europe/Berlin' });
  ctx.setDefaultTimeout(o.waitMs ?? 15_000);
  const page = await ctx.newPage();
  const dialogs: string[] = [];
  const errors: string[] = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.accept();
  });
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) errors.push(m.text());
  });
  await page.goto(`${apiUrl}/login${path === '/' ? '' : `?next=${encodeURIComponent(path)}`}`);
  await page.locator('#login-email').waitFor();
  await page.fill('#login-email', user.email);
  await page.fill('#login-password', user.password);
  await page.keyboard.press('Enter');
  await page.waitForURL((u) => u.pathname === path);
  return { ctx, page, dialogs, errors };
}

/** One assertion: axe-core finds no WCAG A/AA violation on the page as it is now (each named with where). */
export async function expectNoAxeViolations(t: { same(a: unknown, b: unknown, m: string): unknown }, page: Page, what: string): Promise<void> {
  const v = await axeViolations(page);
  t.same(
    v.map((x) => `${x.id} (${x.impact}): ${x.help} @ ${x.nodes.map((n) => n.target.join(' ')).join(' | ')}`),
    [],
    `${what}: no WCAG A/AA violations`,
  );
}
