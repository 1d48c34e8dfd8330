import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { build } from 'vite';
import { afterAll, beforeAll } from 'vitest';
import { CHROMIUM } from './browser.js';

/** Where the browser tests leave a screenshot of each page, for review (issue 16). */
export const SCREENSHOTS = join('test-results', 'dashboard');

let built: Promise<string> | null = null;

/**
 * The dashboard built from its sources now (as `npm run build` does), into a temp folder shared by the
 * file's tests (the OS cleans temp folders; a build is a few hundred KB).
 */
export function buildDashboard(): Promise<string> {
  built ??= (async () => {
    const outDir = mkdtempSync(join(tmpdir(), 'metis-dashboard-'));
    await build({
      configFile: 'dashboard/vite.config.ts',
      logLevel: 'silent',
      build: { outDir, emptyOutDir: true },
    });
    return outDir;
  })();
  return built;
}

export async function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** Messages the page logged as errors (a CSP refusal, an exception): a test expects none. */
export function collectPageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && !/Failed to load resource/.test(message.text()))
      errors.push(message.text());
  });
  return errors;
}

/**
 * For a describe block: builds the dashboard and launches Chromium once before its tests, closes the
 * browser after them. Read `browser` and `root` inside the tests.
 */
export function dashboardInChromium(): { readonly browser: Browser; readonly root: string } {
  const state: { browser?: Browser; root?: string } = {};
  beforeAll(async () => {
    state.root = await buildDashboard();
    state.browser = await launchChromium();
  }, 120_000);
  afterAll(async () => {
    await state.browser?.close();
  });
  return {
    get browser() {
      return state.browser!;
    },
    get root() {
      return state.root!;
    },
  };
}
