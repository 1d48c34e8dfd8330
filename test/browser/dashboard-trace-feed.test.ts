import type { Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { collectPageErrors, dashboardInChromium } from '../helpers/dashboard.js';
import { type SharedServer, sharedDashboardServer } from './dashboard-helpers.js';

/**
 * The trace page reads a session's trace incrementally: every page of it on the first load (not the
 * first 5,000 events), then only what is stored after the last event it holds, workers created later
 * included, and a span still running when first read gets its words once it ends.
 */

/** More than one page of the server's (5,000 events). */
const STORED = 6_200;

/** Every event of the session and its workers, paged through as the API allows. */
async function allEvents(t: SharedServer, sessionId: string): Promise<any[]> {
  const events: any[] = [];
  for (;;) {
    const after = events.length === 0 ? '' : `&after=${events.at(-1).id}`;
    const page = await t.request(
      'GET',
      `/sessions/${sessionId}/trace?include_worker_sessions=true&limit=5000${after}`,
    );
    expect(page.status).toBe(200);
    events.push(...page.body.events);
    if (!page.body.has_more) return events;
  }
}

/** The page's requests for the trace, in order, as their query strings. */
function traceRequests(page: Page): URLSearchParams[] {
  const seen: URLSearchParams[] = [];
  page.on('request', (request) => {
    const url = new URL(request.url());
    if (/\/sessions\/[^/]+\/trace$/.test(url.pathname)) seen.push(url.searchParams);
  });
  return seen;
}

describe.runIf(browserTestsRun)('the trace page reads the trace incrementally', () => {
  const chromium = dashboardInChromium();
  // A `slow:` turn streams for 15 s: long enough for the page's 3 s polls to read it while it runs.
  const t = sharedDashboardServer(() => chromium.root, {
    scripted: { slow_token_delay_ms: 25, slow_tokens: 600 },
  });

  /** As openSignedIn, with the page's trace requests seen from its very first. */
  async function open(
    hash: string,
    before: (page: Page) => Promise<unknown> = async () => {},
  ): Promise<{ page: Page; errors: string[]; requests: URLSearchParams[] }> {
    const context = await chromium.browser.newContext({ viewport: { width: 1400, height: 900 } });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    const errors = collectPageErrors(page);
    const requests = traceRequests(page);
    await before(page);
    await page.goto(`${t.server.signInLink()}${hash}`);
    return { page, errors, requests };
  }

  it('shows every stored event of a session holding more than one page of them', async () => {
    const sessionId = await t.sessionWithTurns(['think: run: echo hi']);
    for (let i = 0; i < STORED; i += 1)
      t.context.bus.emit({
        type: 'feedback.implicit',
        session_id: sessionId,
        payload: { type: 'accept', confidence: 0.5, subject_turn_id: null, context: { index: i } },
      });
    await t.context.flush();
    const stored = (await allEvents(t, sessionId)).length;
    expect(stored).toBeGreaterThan(STORED);

    // The second page waits until the page has said how far the first load has got.
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const { page, errors, requests } = await open(`#/sessions/${sessionId}/trace`, (page) =>
      page.route(/\/trace\?.*after=/, async (route) => {
        await released;
        await route.continue();
      }),
    );
    await expect
      .poll(() => page.getByTestId('trace-loading').textContent(), { timeout: 10_000 })
      .toContain('loading events… 5,000');
    release();
    await page.getByRole('tab', { name: 'Events' }).click();
    const count = page.locator('.filters > .muted');
    await expect.poll(() => count.textContent(), { timeout: 20_000 }).toBe(`${stored} of ${stored} events`);
    expect(await page.locator('table.events tbody tr').count()).toBe(stored);
    expect(await page.getByTestId('trace-loading').count()).toBe(0);
    // Two pages, the second after the last event of the first.
    expect(requests.length).toBeGreaterThanOrEqual(2);
    expect(requests[0]!.get('after')).toBeNull();
    expect(requests[1]!.get('after')).not.toBeNull();
    expect(errors).toEqual([]);
  }, 60_000);

  it('then asks only for events after the last it holds, and shows those stored later, a new worker’s too', async () => {
    const sessionId = await t.sessionWithTurns(['think: run: echo hi']);
    const { page, errors, requests } = await open(`#/sessions/${sessionId}/trace`);
    const turns = page.locator('[data-testid="span-tree"] > li[data-span-kind="turn"]');
    await expect.poll(() => turns.count(), { timeout: 10_000 }).toBe(1);
    const firstLoad = requests.length;
    expect(requests[0]!.get('after')).toBeNull();
    expect(requests[0]!.get('include_worker_sessions')).toBe('true');

    // A slow turn the page reads while it runs, then a delegation: its worker session is created now.
    const slow = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'slow: rivers' });
    expect(slow.status).toBe(202);
    await expect.poll(() => turns.count(), { timeout: 10_000 }).toBe(2);
    // Read while it runs: its model call's words are not written yet.
    expect(await turns.nth(1).getAttribute('data-status')).toBe('running');
    await expect.poll(() => turns.nth(1).getAttribute('data-status'), { timeout: 30_000 }).toBe('completed');
    const delegated = await t.request('POST', `/sessions/${sessionId}/turns`, {
      message: 'delegate: count the files',
    });
    expect(delegated.status).toBe(202);
    await expect.poll(() => turns.count(), { timeout: 10_000 }).toBe(3);
    await expect
      .poll(() => turns.nth(2).locator('li[data-span-kind="delegate"] li[data-span-kind="turn"]').count(), {
        timeout: 20_000,
      })
      .toBe(1);

    // The slow turn's model call, first read running (no text yet), shows its text once it ended.
    const slowCall = turns.nth(1).locator(':scope > ul.span-children > li[data-span-kind="model"]').first();
    await expect
      .poll(() => slowCall.locator(':scope > .span-row [data-said="text"]').textContent(), {
        timeout: 10_000,
      })
      .toContain('Slowly about rivers');
    // All the stored events, the worker's included, and no second download of the whole trace.
    const stored = await allEvents(t, sessionId);
    expect(stored.some((event) => event.session_id !== sessionId)).toBe(true);
    await page.getByRole('tab', { name: 'Events' }).click();
    await expect
      .poll(() => page.locator('.filters > .muted').textContent(), { timeout: 10_000 })
      .toBe(`${stored.length} of ${stored.length} events`);
    expect(await page.locator('table.events .pill.worker').count()).toBe(
      stored.filter((event) => event.session_id !== sessionId).length,
    );
    const later = requests.slice(firstLoad);
    expect(later.length).toBeGreaterThan(2);
    for (const query of later) expect(query.get('after')).not.toBeNull();
    expect(errors).toEqual([]);
  }, 90_000);
});
