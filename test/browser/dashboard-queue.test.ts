import type { Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { dashboardInChromium } from '../helpers/dashboard.js';
import { openSignedIn, send, sharedDashboardServer, turnStatuses } from './dashboard-helpers.js';

/**
 * Issue 31 parts 2 and 3 on the dashboard, in a real Chromium: typing while a turn runs queues the
 * message (listed, with Drop) or interrupts the turn, and a turn paused at its budget says why and how
 * much and goes on after a raise from the page. A dollar a token makes each call cost its token count.
 */
const DOLLAR_A_TOKEN = {
  pricing: { 'scripted:*': { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } },
  // A slow turn outlasts the page's steps before its cancel however loaded the machine (100 s, not the
  // default 10 s): every slow turn here is cut short by the test.
  scripted: { slow_tokens: 4000 },
};

describe.runIf(browserTestsRun)('the dashboard while a turn runs (issue 31)', () => {
  const chromium = dashboardInChromium();
  const t = sharedDashboardServer(() => chromium.root, DOLLAR_A_TOKEN);

  async function sessionPage(
    body: object = {},
  ): Promise<{ page: Page; sessionId: string; errors: string[] }> {
    const created = await t.request('POST', '/sessions', body);
    expect(created.status).toBe(201);
    const sessionId = created.body.session_id as string;
    const opened = await openSignedIn(chromium.browser, t, `#/sessions/${encodeURIComponent(sessionId)}`);
    onTestFinished(opened.close);
    await expect
      .poll(() => opened.page.getByTestId('link').textContent(), { timeout: 10_000 })
      .toContain('live');
    return { page: opened.page, sessionId, errors: opened.errors };
  }

  const userMessages = async (sessionId: string): Promise<string[]> =>
    (await t.request('GET', `/sessions/${sessionId}/messages?limit=500`)).body.messages
      .filter((m: any) => m.role === 'user')
      .map((m: any) => m.content.find((b: any) => b.type === 'text').text);

  it('queues a message typed while a turn runs, lists it with Drop, and runs what is left after the turn', async () => {
    const { page, sessionId, errors } = await sessionPage();
    await send(page, 'slow: the tides');
    await expect.poll(() => turnStatuses(page)).toEqual(['in_flight']);
    expect(await page.getByTestId('multitask').inputValue()).toBe('enqueue');
    await send(page, 'dropped before it ran');
    await send(page, 'asked after the tides');
    const queued = page.getByTestId('queue').locator('li');
    await expect
      .poll(() => queued.locator('.queued-text').allTextContents())
      .toEqual(['dropped before it ran', 'asked after the tides']);
    const server = (await t.request('GET', `/sessions/${sessionId}/queue`)).body.queue;
    expect(server.map((q: any) => [q.mode, q.position])).toEqual([
      ['enqueue', 1],
      ['enqueue', 2],
    ]);
    await queued.first().getByRole('button', { name: 'Drop' }).click();
    await expect
      .poll(() => queued.locator('.queued-text').allTextContents())
      .toEqual(['asked after the tides']);
    expect((await t.request('GET', `/sessions/${sessionId}/queue`)).body.queue).toHaveLength(1);
    // Cut the slow turn short: the queued message starts once it has ended.
    await page.getByTestId('cancel').click();
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['cancelled', 'completed']);
    await expect.poll(() => page.getByTestId('queue').count()).toBe(0);
    expect(await userMessages(sessionId)).toEqual(['slow: the tides', 'asked after the tides']);
    expect(errors).toEqual([]);
  });

  it('keeps Send where it is while the reply streams in above it and the waiting list opens', async () => {
    const { page, errors } = await sessionPage();
    const send = page.getByRole('button', { name: 'Send' });
    await page.getByLabel('Message').fill('slow: the reef');
    const before = await send.boundingBox();
    await send.click();
    await expect.poll(() => turnStatuses(page)).toEqual(['in_flight']);
    // The reply grows by a few lines (a slow turn streams for 100 s), then a message waits.
    const reply = page.locator('[data-turn-status]').first().locator('..');
    const heightAtStart = (await reply.boundingBox())!.height;
    await expect
      .poll(async () => (await reply.boundingBox())!.height, { timeout: 15_000 })
      .toBeGreaterThan(heightAtStart + 40);
    await page.getByLabel('Message').fill('waits its turn');
    await send.click();
    await expect.poll(() => page.getByTestId('queue').locator('li').count()).toBe(1);
    expect(await send.boundingBox()).toEqual(before);
    await page.getByTestId('cancel').click();
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['cancelled', 'completed']);
    expect(errors).toEqual([]);
  });

  it('a turn the page does not show yet: the next message waits behind it, and what was typed meanwhile stays', async () => {
    const created = await t.request('POST', '/sessions', {});
    const sessionId = created.body.session_id as string;
    // The stream's frames reach the page only while `held` is null: a stream that lags the answers.
    let held: (() => void)[] | null = null;
    const opened = await openSignedIn(chromium.browser, t, `#/sessions/${encodeURIComponent(sessionId)}`, {
      prepare: (page) =>
        page.routeWebSocket(
          () => true,
          (socket) => {
            const server = socket.connectToServer();
            server.onMessage((message) => {
              if (held === null) socket.send(message);
              else held.push(() => socket.send(message));
            });
          },
        ),
    });
    onTestFinished(opened.close);
    const { page, errors } = opened;
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    held = [];
    const started = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'slow: the stars' });
    expect(started.status).toBe(202);
    // The answer to the page's send is held back too, while the user types on.
    let answered = false;
    await page.route('**/turns', async (route) => {
      const response = await route.fetch();
      await new Promise((resolve) => setTimeout(resolve, 500));
      await route.fulfill({ response });
      answered = true;
    });
    await send(page, 'asked while it ran');
    await page.getByLabel('Message').fill('typed meanwhile');
    await expect.poll(() => answered).toBe(true);
    const queue = await t.request('GET', `/sessions/${sessionId}/queue`);
    expect(queue.body.queue.map((q: any) => [q.mode, q.message])).toEqual([
      ['enqueue', 'asked while it ran'],
    ]);
    await expect.poll(() => page.getByRole('button', { name: 'Send' }).isEnabled()).toBe(true);
    expect(await page.getByLabel('Message').inputValue()).toBe('typed meanwhile');
    for (const deliver of held.splice(0)) deliver();
    held = null;
    const cancel = await t.request('POST', `/sessions/${sessionId}/turns/${started.body.turn_id}/cancel`, {
      reason: 'user_cancel',
    });
    expect(cancel.status).toBe(202);
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['cancelled', 'completed']);
    expect(await userMessages(sessionId)).toEqual(['slow: the stars', 'asked while it ran']);
    expect(errors).toEqual([]);
  });

  it('"Stop this turn and send it" cancels the running turn and starts the new message', async () => {
    const { page, sessionId, errors } = await sessionPage();
    await send(page, 'slow: the moon');
    await expect.poll(() => turnStatuses(page)).toEqual(['in_flight']);
    await page.getByTestId('multitask').selectOption('interrupt');
    await send(page, 'never mind, the sun');
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['cancelled', 'completed']);
    const trace = (await t.request('GET', `/sessions/${sessionId}/trace?limit=5000`)).body.events;
    const cancelled = trace.find((e: any) => e.type === 'turn.cancelled');
    expect(cancelled.payload.reason).toBe('user_cancel');
    expect(await userMessages(sessionId)).toEqual(['slow: the moon', 'never mind, the sun']);
    expect(errors).toEqual([]);
  });

  it('a turn paused at its budget says why and how much, and a raise from the page lets it finish', async () => {
    const { page, sessionId, errors } = await sessionPage({ budget: { usd: 1 } });
    // Two model calls (the tool between them): the first spends past the $1 cap, the second waits.
    await send(page, 'think: time');
    const paused = page.locator('[data-paused]');
    await expect.poll(() => paused.count(), { timeout: 15_000 }).toBe(1);
    const said = (await paused.textContent()) ?? '';
    const budget = (await t.request('GET', `/sessions/${sessionId}/budget`)).body;
    expect(budget.paused).toHaveLength(1);
    expect(said).toContain('this session spent');
    expect(said).toContain(`$${budget.paused[0].spent.toFixed(2)}`);
    expect(said).toContain('$1.00 cap');
    expect(await turnStatuses(page)).toEqual(['in_flight']);
    await paused.getByRole('spinbutton').fill('1000000');
    await paused.getByRole('button', { name: 'Raise and go on' }).click();
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['completed']);
    await expect.poll(() => paused.count()).toBe(0);
    const after = (await t.request('GET', `/sessions/${sessionId}/budget`)).body;
    expect(after.session.caps.usd).toBe(1_000_000);
    expect(after.paused).toEqual([]);
    expect(errors).toEqual([]);
  });
});
