import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { browserTestsRun } from '../helpers/browser.js';
import { collectPageErrors, dashboardInChromium, screenshot } from '../helpers/dashboard.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { send, turnStatuses } from './dashboard-helpers.js';

/**
 * Issue 16: the dashboard in a real Chromium against a real server (Chromium: test/helpers/browser.ts).
 * Each test drives the page as a person would (click, type, reload) and checks what it shows against
 * what the server stored; screenshots of each page land in test-results/dashboard/ for review.
 */

const TOKEN = 'dashboard-test-token-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };
const ASK_EXECUTE = { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } } as const;

describe.runIf(browserTestsRun)('the dashboard in Chromium', () => {
  const chromium = dashboardInChromium();

  async function serve(config: RuntimeConfigInput = {}): Promise<TestServer> {
    return startTestServer(config, { staticRoot: chromium.root, bearerToken: TOKEN });
  }

  /** A page signed in the way a person is: a sign-in link (a single-use code), traded for the access key. */
  async function open(t: TestServer, hash = ''): Promise<{ page: Page; errors: string[] }> {
    const context = await chromium.browser.newContext({ colorScheme: 'light' });
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const errors = collectPageErrors(page);
    await page.goto(`${t.server.signInLink()}${hash}`);
    return { page, errors };
  }

  async function session(t: TestServer): Promise<string> {
    return (await t.request('POST', '/sessions', {}, AUTH)).body.session_id;
  }

  async function storedMessages(t: TestServer, sessionId: string): Promise<any[]> {
    return (await t.request('GET', `/sessions/${sessionId}/messages?limit=500`, undefined, AUTH)).body
      .messages;
  }

  it('a page on another port of this host gets nothing to replay, and its calls are refused (issue 34, observation 2)', async () => {
    const t = await serve();
    const { page } = await open(t);
    await expect.poll(() => page.textContent('main'), { timeout: 10_000 }).toContain('No sessions yet');
    // Another listener on 127.0.0.1, in the same browser: what the browser sends it, and what its page can do.
    const seenCookies: string[] = [];
    const other = createServer((request, response) => {
      seenCookies.push(request.headers.cookie ?? '');
      response.setHeader('content-type', 'text/html');
      response.end('<!doctype html><title>another port</title>');
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => new Promise<void>((resolve) => other.close(() => resolve())));
    const elsewhere = await page.context().newPage();
    await elsewhere.goto(`http://127.0.0.1:${(other.address() as AddressInfo).port}/`);
    expect(seenCookies.join(';')).not.toContain('metis');
    // Any loopback page may read metis's answers (CORS), so what it may send must be worth nothing.
    const tried = await elsewhere.evaluate(async (base) => {
      const read = await fetch(`${base}/sessions`);
      const change = await fetch(`${base}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      return [read.status, change.status];
    }, t.url);
    expect(tried).toEqual([401, 401]);
    expect((await t.request('GET', '/sessions', undefined, AUTH)).body.sessions).toHaveLength(0);
  });

  it('a missing or wrong token shows how to get in, not a blank page', async () => {
    const t = await serve();
    const context = await chromium.browser.newContext();
    onTestFinished(() => context.close());
    const page = await context.newPage();
    await page.goto(`${t.url}/`);
    await expect.poll(() => page.getByTestId('sign-in').isVisible(), { timeout: 10_000 }).toBe(true);
    expect(await page.textContent('body')).toContain('metis dashboard');
    await screenshot(page, 'sign-in');
    await page.goto(`${t.url}/?token=wrong-token-wrong-token`);
    await expect.poll(() => page.getByTestId('sign-in').isVisible(), { timeout: 10_000 }).toBe(true);
  });

  it('trades a sign-in link for an access key, drops the code from the address, and lists sessions as they come', async () => {
    const t = await serve();
    const { page, errors } = await open(t);
    await expect.poll(() => page.textContent('main'), { timeout: 10_000 }).toContain('No sessions yet');
    expect(page.url()).not.toContain('login=');
    expect(await page.context().cookies()).toEqual([]);
    expect(await page.evaluate(() => (globalThis as any).localStorage.getItem('metis.access_key'))).toMatch(
      /^mdk_/,
    );
    const id = await session(t);
    await expect.poll(() => page.locator(`tr[data-session="${id}"]`).count(), { timeout: 10_000 }).toBe(1);
    await screenshot(page, 'sessions');
    expect(errors).toEqual([]);
    // The same page in dark mode: its own colours, not the light ones.
    const dark = await chromium.browser.newContext({ colorScheme: 'dark' });
    onTestFinished(() => dark.close());
    const night = await dark.newPage();
    await night.goto(t.server.signInLink());
    await expect.poll(() => night.locator(`tr[data-session="${id}"]`).count(), { timeout: 10_000 }).toBe(1);
    const background = (p: Page) =>
      p.locator('body').evaluate((body) => (globalThis as any).getComputedStyle(body).backgroundColor);
    expect(await background(page)).toBe('rgb(255, 255, 255)');
    expect(await background(night)).not.toBe(await background(page));
    await screenshot(night, 'sessions-dark');
  });

  it('sends a turn from the page and shows the answer as it streams, thinking folded, with tokens and cost', async () => {
    const t = await serve({ scripted: { token_delay_ms: 5 } });
    const { page, errors } = await open(t);
    await page.getByTestId('new-session').click();
    await page.waitForURL(/#\/sessions\/sess_/);
    const sessionId = decodeURIComponent(page.url().split('#/sessions/')[1]!);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    await send(page, 'think: what is metis');
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['completed']);
    const stored = await storedMessages(t, sessionId);
    const answer = stored.find((m: any) => m.role === 'assistant');
    const answerText = answer.content.find((b: any) => b.type === 'text').text;
    expect(answerText).toBe('You asked: what is metis');
    const shown = await page.locator(`[data-message="${answer.id}"] .text`).allTextContents();
    expect(shown).toEqual([answerText]);
    // The user's words, which the stream does not carry, come from the stored conversation.
    await expect
      .poll(() => page.locator('.message.user .text').allTextContents(), { timeout: 10_000 })
      .toEqual(['think: what is metis']);
    // Thinking is there, folded.
    const thinking = page.locator(`[data-message="${answer.id}"] details.thinking`);
    expect(await thinking.count()).toBe(1);
    expect(await thinking.evaluate((node) => (node as unknown as { open: boolean }).open)).toBe(false);
    const footer = await page.locator('.turn-footer').textContent();
    expect(footer).toMatch(/\d+ in \/ \d+ out tokens/);
    expect(footer).toContain('routed to scripted:demo');
    expect(footer).toMatch(/\$\d/);
    await screenshot(page, 'session');
    expect(errors).toEqual([]);
  });

  it('shows a waiting tool call with its whole input, and Allow runs it', async () => {
    const t = await serve(ASK_EXECUTE);
    const sessionId = await session(t);
    const { page } = await open(t, `#/sessions/${sessionId}`);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    await send(page, 'run: echo approved-from-the-page');
    const approval = page.locator('.approval');
    await expect.poll(() => approval.count(), { timeout: 10_000 }).toBe(1);
    expect(await approval.locator('pre').textContent()).toContain('"command": "echo approved-from-the-page"');
    await screenshot(page, 'approval');
    await approval.getByRole('button', { name: 'Allow', exact: true }).click();
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['completed']);
    expect(await approval.count()).toBe(0);
    const tool = page.locator('details.tool');
    expect(await tool.getAttribute('class')).toContain('completed');
    await tool.locator('summary').click();
    expect(await tool.textContent()).toContain('approved-from-the-page\n');
  });

  it('Deny refuses the tool call, and the model is told', async () => {
    const t = await serve(ASK_EXECUTE);
    const sessionId = await session(t);
    const { page } = await open(t, `#/sessions/${sessionId}`);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    // From the keyboard only: Ctrl+Enter sends, Enter on the focused button decides.
    await page.getByLabel('Message').fill('run: echo never-run');
    await page.getByLabel('Message').press('Control+Enter');
    await expect.poll(() => page.locator('.approval').count(), { timeout: 10_000 }).toBe(1);
    await page.getByRole('button', { name: 'Deny' }).focus();
    await page.keyboard.press('Enter');
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['completed']);
    const stored = await storedMessages(t, sessionId);
    const result = stored.flatMap((m: any) => m.content).find((b: any) => b.type === 'tool_result');
    expect(result.is_error).toBe(true);
  });

  it('Cancel stops a slow turn; the message stays cut short', async () => {
    const t = await serve({ scripted: { slow_token_delay_ms: 40, slow_tokens: 400 } });
    const sessionId = await session(t);
    const { page } = await open(t, `#/sessions/${sessionId}`);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    await send(page, 'slow: a long story');
    await expect
      .poll(() => page.locator('.message.assistant .text').textContent(), { timeout: 10_000 })
      .toContain('word3');
    await page.getByTestId('cancel').click();
    await expect.poll(() => turnStatuses(page), { timeout: 15_000 }).toEqual(['cancelled']);
    expect(await page.locator('.turn-footer').textContent()).toContain('cancelled: user cancel');
    expect(await page.getByTestId('cancel').count()).toBe(0);
    await screenshot(page, 'cancelled');
  });

  it('a reload mid-turn resumes from the snapshot: the answer once, whole, as stored', async () => {
    const t = await serve({ scripted: { slow_token_delay_ms: 15, slow_tokens: 200 } });
    const sessionId = await session(t);
    const { page, errors } = await open(t, `#/sessions/${sessionId}`);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    await send(page, 'slow: reload me');
    await expect
      .poll(() => page.locator('.message.assistant .text').textContent(), { timeout: 10_000 })
      .toContain('word5');
    await page.reload();
    await expect.poll(() => turnStatuses(page), { timeout: 20_000 }).toEqual(['completed']);
    const stored = await storedMessages(t, sessionId);
    const answer = stored.find((m: any) => m.role === 'assistant');
    const expected = answer.content.find((b: any) => b.type === 'text').text;
    expect(await page.locator('.message').count()).toBe(2);
    expect(await page.locator('.message.assistant .text').allTextContents()).toEqual([expected]);
    expect(await page.locator('.message.user .text').allTextContents()).toEqual(['slow: reload me']);
    expect(errors).toEqual([]);
  });

  it('opens the span tree of a delegated turn: the worker turn nests under the delegation', async () => {
    const t = await serve();
    const sessionId = await session(t);
    const { page, errors } = await open(t, `#/sessions/${sessionId}`);
    await expect.poll(() => page.getByTestId('link').textContent(), { timeout: 10_000 }).toContain('live');
    await send(page, 'delegate: count the files');
    await expect.poll(() => turnStatuses(page), { timeout: 20_000 }).toEqual(['completed']);
    await page.getByRole('link', { name: 'Trace' }).click();
    const delegation = page.locator('[data-testid="span-tree"] li[data-span-kind="delegate"]');
    await expect.poll(() => delegation.count(), { timeout: 10_000 }).toBe(1);
    // The worker's turn hangs below the delegation, marked as a worker's.
    const worker = delegation.locator('li[data-span-kind="turn"]');
    expect(await worker.count()).toBe(1);
    expect(await worker.locator('.span-label').first().textContent()).toContain('(worker)');
    await worker.locator('.span-label').first().click();
    await page.locator('[data-testid="span-detail"] summary').click();
    const detail = await page.getByTestId('event-detail').first().textContent();
    expect(detail).not.toContain(sessionId);
    await page.getByRole('tab', { name: 'Waterfall' }).click();
    expect(await page.locator('svg.timeline g.span').count()).toBeGreaterThanOrEqual(4);
    // From a span to its place in the conversation: the planner's turn.
    await page.getByRole('tab', { name: 'Span tree' }).click();
    await page.locator('[data-testid="span-tree"] > li > .span-row .span-label').click();
    await page
      .getByTestId('span-detail')
      .getByRole('link', { name: 'See it in the conversation' })
      .first()
      .click();
    await expect.poll(() => page.locator('.turn.focused').count(), { timeout: 10_000 }).toBe(1);
    expect(errors).toEqual([]);
  });

  it('shows the store: counts, sizes, retention and events per hour', async () => {
    const t = await serve();
    const sessionId = await session(t);
    await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'hello' }, AUTH);
    const { page } = await open(t, '#/store');
    const figures = page.getByTestId('store-figures');
    await expect.poll(() => figures.textContent(), { timeout: 10_000 }).toContain('Retention90 days');
    const events = Number((await figures.locator('dd').first().textContent())!.replace(/,/g, ''));
    expect(events).toBeGreaterThan(0);
    expect(await page.locator('svg.chart rect').count()).toBeGreaterThanOrEqual(1);
    await screenshot(page, 'store');
  });

  it('an unknown session id says "no such session"', async () => {
    const t = await serve();
    const { page } = await open(t, '#/sessions/sess_does_not_exist');
    await expect.poll(() => page.getByTestId('no-such-session').isVisible(), { timeout: 10_000 }).toBe(true);
  });
});
