import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { dashboardInChromium } from '../helpers/dashboard.js';
import { openSignedIn, SCREENSHOT_DIR, screenshotsOf, sharedDashboardServer } from './dashboard-helpers.js';

/**
 * Issue 30, observation 5 in a real Chromium: the usage page draws cost, tokens, latency (p50 and
 * p95) and failures over time, per model, from GET /stats/usage; and the screenshots of the pages
 * the other files do not cover (the session page, sign-in), in both schemes at both widths.
 */

describe.runIf(browserTestsRun)('the usage page (issue 30)', () => {
  const chromium = dashboardInChromium();
  const t = sharedDashboardServer(() => chromium.root);
  let made: Promise<string> | null = null;

  /** Turns on two models (the planner's and the delegate's), then one whose model call fails. */
  function session(): Promise<string> {
    made ??= t.sessionWithTurns(['think: what is metis', 'delegate: count the files', 'fail: server_error']);
    return made;
  }

  it("draws cost, tokens, latency and failures per model from the server's usage", async () => {
    await session();
    const usage = (
      await t.request(
        'GET',
        `/stats/usage?bucket=hour&from=${new Date(Date.now() - 86_400_000).toISOString()}`,
      )
    ).body;
    const models = [...new Set(usage.rows.map((row: any) => row.model))].sort();
    expect(models).toEqual(['scripted:demo', 'scripted:fast']);
    const opened = await openSignedIn(chromium.browser, t, '#/store');
    onTestFinished(opened.close);
    const page = opened.page;
    for (const chart of ['chart-cost', 'chart-tokens', 'chart-latency', 'chart-failures'])
      await expect
        .poll(() => page.getByTestId(chart).locator('circle').count(), { timeout: 10_000 })
        .toBeGreaterThan(0);
    // One line per model (p50 and p95 each for the latency), in the legend and drawn.
    const drawn = (chart: string) =>
      page
        .getByTestId(chart)
        .locator('g.series')
        .evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-series')));
    expect(await drawn('chart-cost')).toEqual(models);
    expect(await drawn('chart-latency')).toEqual(models.flatMap((m) => [`${m} p50`, `${m} p95`]));
    // The failed model call is on the failures chart: a point above zero, said in its tooltip.
    const failures = await page.getByTestId('chart-failures').locator('circle title').allTextContents();
    expect(failures.some((text) => /scripted:demo, .*: [1-9]/.test(text))).toBe(true);
    const calls = usage.rows
      .filter((row: any) => row.model === 'scripted:demo')
      .reduce((sum: number, row: any) => sum + row.calls, 0);
    expect(await page.locator('tr[data-model="scripted:demo"] td').nth(1).textContent()).toBe(String(calls));
    expect(opened.errors).toEqual([]);
  });

  it('writes screenshots of the usage, session and sign-in pages, light and dark, at 1,400 and 900 px', async () => {
    const sessionId = await session();
    await screenshotsOf(chromium.browser, t, 'usage', '#/store', async (page) => {
      await expect
        .poll(() => page.getByTestId('chart-cost').locator('circle').count(), { timeout: 10_000 })
        .toBeGreaterThan(0);
    });
    await screenshotsOf(chromium.browser, t, 'session', `#/sessions/${sessionId}`, async (page) => {
      await expect.poll(() => page.locator('[data-turn-status]').count(), { timeout: 10_000 }).toBe(3);
    });
    // Signed out: no sign-in link, so the page says how to get in.
    for (const colorScheme of ['light', 'dark'] as const) {
      const context = await chromium.browser.newContext({ colorScheme });
      onTestFinished(() => context.close());
      const page = await context.newPage();
      await page.goto(`${t.url}/`);
      for (const width of [1400, 900]) {
        await page.setViewportSize({ width, height: 700 });
        await expect.poll(() => page.getByTestId('sign-in').isVisible(), { timeout: 10_000 }).toBe(true);
        await page.screenshot({
          path: `${SCREENSHOT_DIR}/sign-in-${colorScheme}-${width}.png`,
          fullPage: true,
        });
      }
    }
  }, 90_000);
});
