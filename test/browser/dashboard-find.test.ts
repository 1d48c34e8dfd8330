import type { Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { dashboardInChromium } from '../helpers/dashboard.js';
import { openSignedIn, screenshotsOf, sharedDashboardServer } from './dashboard-helpers.js';

/**
 * Issue 30, observation 4 in a real Chromium: the sessions list finds and compares sessions: titles
 * (the first message, or one the user sets in place), a text search, filters and pages answered by
 * the server, and `conformance run`'s sessions out of the way until asked for.
 */

describe.runIf(browserTestsRun)('finding sessions in the dashboard (issue 30)', () => {
  const chromium = dashboardInChromium();
  const t = sharedDashboardServer(() => chromium.root);
  let made: Promise<{ asked: string; banana: string; ended: string; conformance: string }> | null = null;

  /** Sessions with words to find, one ended, one made the way `conformance run` makes them, and many empty ones. */
  function sessions() {
    made ??= (async () => {
      for (let i = 0; i < 52; i += 1) await t.request('POST', '/sessions', {});
      const asked = await t.sessionWithTurns(['think: what is metis']);
      const banana = await t.sessionWithTurns(['run: echo banana split']);
      const ended = await t.sessionWithTurns(['hello there']);
      expect((await t.request('POST', `/sessions/${ended}/end`, {})).status).toBe(200);
      const conformance = (await t.request('POST', '/sessions', { model: 'scripted:conformance' })).body
        .session_id as string;
      expect(conformance).toMatch(/^sess_/);
      return { asked, banana, ended, conformance };
    })();
    return made;
  }

  async function open(): Promise<{ page: Page; errors: string[] }> {
    const opened = await openSignedIn(chromium.browser, t, '#/');
    onTestFinished(opened.close);
    await expect
      .poll(() => opened.page.locator('tr[data-session]').count(), { timeout: 10_000 })
      .toBeGreaterThan(0);
    return opened;
  }

  const listed = (page: Page) =>
    page
      .locator('tr[data-session]')
      .evaluateAll((rows) => rows.map((row) => row.getAttribute('data-session')));

  it('titles each session with its first message, and renames it in place', async () => {
    const { asked } = await sessions();
    const { page, errors } = await open();
    const row = page.locator(`tr[data-session="${asked}"]`);
    await expect
      .poll(() => row.getByTestId('session-title').textContent(), { timeout: 10_000 })
      .toBe('think: what is metis');
    await row.getByRole('button', { name: /^Rename/ }).click();
    await row.getByLabel('Title').fill('What metis is');
    await row.getByLabel('Title').press('Enter');
    await expect
      .poll(() => row.getByTestId('session-title').textContent(), { timeout: 10_000 })
      .toBe('What metis is');
    const stored = (await t.request('GET', `/sessions?q=metis`)).body.sessions.find(
      (s: any) => s.id === asked,
    );
    expect(stored).toMatchObject({ title: 'What metis is', title_source: 'user' });
    // An empty title gives the first message back.
    await row.getByRole('button', { name: /^Rename/ }).click();
    await row.getByLabel('Title').fill('');
    await row.getByRole('button', { name: 'Save' }).click();
    await expect
      .poll(() => row.getByTestId('session-title').textContent(), { timeout: 10_000 })
      .toBe('think: what is metis');
    expect(errors).toEqual([]);
  });

  it('searches the words of the messages and filters by status, on the server', async () => {
    const { banana, ended, asked } = await sessions();
    const { page } = await open();
    const requests: string[] = [];
    page.on('request', (request) => requests.push(request.url()));
    await page.getByLabel('Search', { exact: true }).fill('banana');
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual([banana]);
    expect(requests.some((url) => /\/sessions\?.*q=banana/.test(url))).toBe(true);
    // The search is in the address: a reload finds the same.
    expect(page.url()).toContain('#/?q=banana');
    await page.reload();
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual([banana]);
    expect(await page.getByLabel('Search', { exact: true }).inputValue()).toBe('banana');
    await page.getByRole('button', { name: 'Clear' }).click();
    await page.getByLabel('Status').selectOption('ended');
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual([ended]);
    await page.getByLabel('Status').selectOption('');
    await page.getByLabel('Cost ≥ $').fill('0.00000001');
    await page.getByLabel('Cost ≥ $').press('Tab');
    await expect
      .poll(async () => (await listed(page)).sort(), { timeout: 10_000 })
      .toEqual([asked, banana, ended].sort());
    expect(requests.some((url) => /min_cost_usd=/.test(url))).toBe(true);
    // Latency: a bound no model call of these sessions reaches leaves none.
    await page.getByLabel('Latency p95 ≥ ms').fill('600000');
    await page.getByLabel('Latency p95 ≥ ms').press('Enter');
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual([]);
    expect(await page.locator('main').textContent()).toContain('No session matches.');
    expect(requests.some((url) => /min_latency_p95_ms=600000/.test(url))).toBe(true);
  });

  it("hides conformance run's sessions unless asked to show them", async () => {
    const { conformance } = await sessions();
    const { page } = await open();
    await expect.poll(() => listed(page), { timeout: 10_000 }).not.toContain(conformance);
    await page.getByLabel('show conformance').check();
    await expect.poll(() => listed(page), { timeout: 10_000 }).toContain(conformance);
    expect(await page.locator(`tr[data-session="${conformance}"] [data-tag="conformance"]`).count()).toBe(1);
  });

  it('pages through the sessions with next and previous', async () => {
    await sessions();
    const { page } = await open();
    const all = (await t.request('GET', '/sessions?limit=200')).body.sessions.map((s: any) => s.id);
    expect(all.length).toBeGreaterThan(50);
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual(all.slice(0, 50));
    await page.getByRole('button', { name: 'Next →' }).click();
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual(all.slice(50, 100));
    expect(await page.getByRole('button', { name: 'Next →' }).isDisabled()).toBe(true);
    await page.getByRole('button', { name: '← Previous' }).click();
    await expect.poll(() => listed(page), { timeout: 10_000 }).toEqual(all.slice(0, 50));
  });

  it('writes screenshots of the sessions list, light and dark, at 1,400 and 900 px', async () => {
    const { asked } = await sessions();
    await screenshotsOf(chromium.browser, t, 'sessions', '#/', async (page) => {
      await expect
        .poll(() => page.locator(`tr[data-session="${asked}"]`).count(), { timeout: 10_000 })
        .toBe(1);
    });
  }, 90_000);
});
