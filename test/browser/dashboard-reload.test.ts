import type { Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { collectPageErrors, dashboardInChromium, screenshot } from '../helpers/dashboard.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { send, turnStatuses } from './dashboard-helpers.js';

/**
 * Issue 30, observation 1: a session page after a reload shows exactly what it showed live (each
 * tool's status and duration, each turn's footer, a failed turn's badge), rebuilt from the stored
 * events; a tool still running at the reload moves on to its end. One page stays live all along,
 * another is reloaded, and their turns are compared element by element.
 */

const TOKEN = 'dashboard-reload-token-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };
const ALLOW_ALL = { tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' } } as const;

/** What a person sees of one turn: its badges, tools (status and duration), texts and footer. */
interface TurnView {
  id: string;
  status: string | null;
  messages: string[];
  tools: string[];
  texts: string[];
  footer: string | null;
  footerBadges: string[];
}

const turnViews = (page: Page): Promise<TurnView[]> =>
  page.locator('li.turn').evaluateAll((nodes) =>
    nodes.map((node) => {
      const texts = (selector: string) =>
        [...node.querySelectorAll(selector)].map((n) => (n.textContent ?? '').replace(/\s+/g, ' ').trim());
      const footer = node.querySelector('.turn-footer');
      return {
        id: node.id,
        status: footer?.getAttribute('data-turn-status') ?? null,
        messages: texts('.message > header'),
        tools: texts('details.tool > summary'),
        texts: texts('.message .text'),
        footer: footer === null ? null : (footer.textContent ?? '').replace(/\s+/g, ' ').trim(),
        footerBadges: texts('.turn-footer .pill'),
      };
    }),
  );

describe.runIf(browserTestsRun)('the dashboard after a reload (issue 30)', () => {
  const chromium = dashboardInChromium();

  async function open(t: TestServer, hash: string): Promise<{ page: Page; errors: string[] }> {
    const context = await chromium.browser.newContext({ colorScheme: 'light' });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const errors = collectPageErrors(page);
    await page.goto(`${t.server.signInLink()}${hash}`);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    return { page, errors };
  }

  /** Waits until the page shows what `expected` holds, then says it matches (the diff if it never does). */
  async function expectSame(page: Page, expected: TurnView[]): Promise<void> {
    await expect.poll(() => turnViews(page), { timeout: 15_000 }).toEqual(expected);
  }

  it('shows each earlier turn as it was live: tool status and duration, footers, a failed turn', async () => {
    const t = await startTestServer(ALLOW_ALL, { staticRoot: chromium.root, bearerToken: TOKEN });
    const sessionId = (await t.request('POST', '/sessions', {}, AUTH)).body.session_id as string;
    const hash = `#/sessions/${sessionId}`;
    const { page: live, errors } = await open(t, hash);

    // A turn with thinking, one with a tool, and one whose model call fails, each waited for.
    for (const [index, message] of ['think: what is metis', 'run: echo hi', 'fail: auth'].entries()) {
      await send(live, message);
      await expect.poll(() => turnStatuses(live), { timeout: 15_000 }).toHaveLength(index + 1);
      await expect.poll(() => turnStatuses(live), { timeout: 15_000 }).not.toContain('in_flight');
    }
    // Let the stored conversation (the tools' output, the user's words) settle on the live page.
    await expect.poll(() => live.locator('.message.user .text').count(), { timeout: 10_000 }).toBe(3);
    const before = await turnViews(live);
    expect(before).toHaveLength(3);
    expect(before[1]!.tools).toEqual([expect.stringMatching(/^shell completed \d/)]);
    expect(before[1]!.footer).toMatch(/routed to scripted:demo/);
    expect(before[1]!.footer).toMatch(/\d+ in \/ \d+ out tokens/);
    // A failed turn says failed, and only that.
    expect(before[2]!.footerBadges).toEqual(['failed']);
    expect(before[2]!.footer).toContain('model call failed (auth)');

    // The same session in a page opened afterwards, then the live page reloaded: the same turns.
    const { page: later } = await open(t, hash);
    await expectSame(later, before);
    await live.reload();
    await expectSame(live, before);
    await screenshot(live, 'reloaded');
    expect(errors).toEqual([]);
  });

  it('a tool running across the reload ends as it does live', async () => {
    const t = await startTestServer(ALLOW_ALL, { staticRoot: chromium.root, bearerToken: TOKEN });
    const sessionId = (await t.request('POST', '/sessions', {}, AUTH)).body.session_id as string;
    const hash = `#/sessions/${sessionId}`;
    const { page: live } = await open(t, hash);
    const { page: reloaded, errors } = await open(t, hash);

    await send(live, 'run: sleep 4; echo late');
    const running = (page: Page) => page.locator('details.tool .pill').allTextContents();
    await expect.poll(() => running(reloaded), { timeout: 10_000 }).toEqual(['running']);
    await reloaded.reload();
    await expect
      .poll(() => reloaded.getByTestId('link').textContent(), { timeout: 10_000 })
      .toContain('live');
    // Rebuilt from the store: still running (the shell sleeps on), not `requested`.
    await expect.poll(() => running(reloaded), { timeout: 3_000 }).toEqual(['running']);
    await expect.poll(() => turnStatuses(live), { timeout: 15_000 }).toEqual(['completed']);
    await expect
      .poll(() => live.locator('details.tool').textContent(), { timeout: 10_000 })
      .toContain('late');
    const after = await turnViews(live);
    expect(after[0]!.tools).toEqual([expect.stringMatching(/^shell completed \d/)]);
    await expectSame(reloaded, after);
    expect(errors).toEqual([]);
  });
});
