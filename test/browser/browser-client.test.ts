import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type BrowserPage, browserTestsRun, openPage } from '../helpers/browser.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 15 points 6 and 7: the client library's browser entry (`src/client/browser.ts`, bundled for
 * the browser platform: a Node built-in would fail the build) in a real Chromium, on the global
 * `WebSocket`, served from another origin than metis's: a turn with thinking and a tool, a dropped
 * socket resumed from the cursor, an approval and a cancel.
 * Chromium: test/helpers/browser.ts.
 */

declare const window: { follow: (...args: unknown[]) => Promise<any>; ready?: boolean };

const PAGE = `<!doctype html><meta charset="utf-8"><title>metis browser client</title>
<script type="module">
  import { MetisClient, initialState, reduce } from '/client.js';
  // Follows a session until \`until\` holds for the state; returns the state and what the client saw.
  window.follow = (url, sessionId, until, act) => new Promise(async (resolve, reject) => {
    const client = new MetisClient({ url, sessionId, filter: 'preset:chat', snapshot: true, backoff: { minMs: 50, maxMs: 200 } });
    let state = initialState;
    const seen = { ids: [], statuses: [], confirmations: [] };
    const timer = setTimeout(() => reject(new Error('timed out')), 20000);
    try {
      for await (const item of client) {
        if (item.kind === 'status') seen.statuses.push(item.status);
        if (item.kind !== 'frame') continue;
        state = reduce(state, item.frame);
        if (item.frame.type === 'event') {
          seen.ids.push(item.frame.event.id);
          await act(client, item.frame.event, seen);
        }
        if (until(state, seen)) break;
      }
      clearTimeout(timer);
      client.close();
      resolve({ state: JSON.parse(JSON.stringify(state)), seen });
    } catch (error) { reject(error); }
  });
  window.ready = true;
</script>`;

describe.runIf(browserTestsRun)('the browser client in Chromium', () => {
  let opened: BrowserPage;
  let page: Page;

  beforeAll(async () => {
    opened = await openPage('src/client/browser.ts', PAGE);
    page = opened.page;
    await page.waitForFunction(() => window.ready === true);
  }, 60_000);

  afterAll(async () => {
    await opened?.close();
  });

  it('renders a turn with thinking and a tool, and resumes after its socket drops, with nothing twice', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const result = page.evaluate(
      ([url, id]) =>
        window.follow(
          url,
          id,
          (state: any) =>
            state.messages.filter((m: any) => m.role === 'assistant' && m.status === 'complete').length >= 3,
          async (client: any, event: any, seen: any) => {
            // Drop the socket once, mid-answer: the client reconnects with its cursor.
            if (event.type === 'text.delta' && !seen.dropped) {
              seen.dropped = true;
              client.ws.close();
            }
          },
        ),
      [t.url, sessionId] as const,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await t.submit(sessionId, 'think: time');
    await new Promise((resolve) => setTimeout(resolve, 500));
    await t.submit(sessionId, 'slow: tides');
    const { state, seen } = await result;
    expect(seen.statuses.filter((s: string) => s === 'reconnecting').length).toBeGreaterThanOrEqual(1);
    expect(new Set(seen.ids).size).toBe(seen.ids.length);
    const assistant = state.messages.filter((m: any) => m.role === 'assistant');
    const text = JSON.stringify(assistant.map((m: any) => m.blocks));
    expect(text).toContain('The user asks: time');
    expect(text).toContain('The tool returned');
    // The slow answer arrived whole across the drop: equal to what the server stored.
    const stored = t.runtime.sessions
      .messages(sessionId)
      .filter((m) => m.role === 'assistant')
      .at(-1)!;
    const textOf = (blocks: any[]) =>
      blocks
        .filter((b) => b.type === 'text')
        .map((b) => b.text)
        .join('');
    expect(textOf(assistant.at(-1).blocks)).toBe(textOf(stored.content as any[]));
    expect(textOf(assistant.at(-1).blocks).length).toBeGreaterThan(100);
  }, 60_000);

  it('an approval answered from the page, and a cancel', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const sessionId = await t.createSession();
    const result = page.evaluate(
      ([url, id]) =>
        window.follow(
          url,
          id,
          (_state: any, seen: any) => seen.cancelled === true,
          async (client: any, event: any, seen: any) => {
            if (event.type === 'tool.confirmation_requested') {
              seen.confirmations.push(event.payload.confirmation_request_id);
              await client.confirm(event.payload.confirmation_request_id, 'allow');
            }
            if (event.type === 'turn.completed') seen.turnDone = true;
            if (event.type === 'text.delta' && seen.turnDone && !seen.cancelSent) {
              seen.cancelSent = true;
              await client.cancel(event.turn_id);
            }
            if (event.type === 'turn.cancelled') seen.cancelled = true;
          },
        ),
      [t.url, sessionId] as const,
    );
    onTestFinished(() => result.catch(() => undefined));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const first = await t.submit(sessionId, 'run: echo from-the-browser');
    await t.runtime.currentTurn(sessionId)?.done;
    await t.submit(sessionId, 'slow: never mind');
    const { seen } = await result;
    expect(seen.confirmations).toHaveLength(1);
    const output = t.runtime.sessions
      .messages(sessionId)
      .filter((m) => m.role === 'tool' && m.turn_id === first)
      .map((m) => JSON.stringify(m.content));
    expect(output.join('')).toContain('from-the-browser');
    await t.context.flush();
    const reasons = t.context.db
      .prepare("SELECT payload_json FROM events WHERE session_id = ? AND type = 'turn.cancelled'")
      .pluck()
      .all(sessionId) as string[];
    expect(reasons.map((r) => JSON.parse(r).reason)).toEqual(['user_cancel']);
  }, 60_000);
});
