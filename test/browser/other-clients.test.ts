import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BrowserPage, browserTestsRun, openPage } from '../helpers/browser.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 15, "Done when": in a real browser page on another origin, the browser's own EventSource,
 * `@ag-ui/client` (what CopilotKit runs on) and the `ai` package's chat transport (what useChat runs
 * on) each drive a turn with thinking, a tool call and an approval, then a cancel, against metis
 * (test/browser/page-clients.ts is the page's script).
 */

declare const window: Record<
  string,
  (...args: unknown[]) => Promise<{ seen: string[]; approvals: number }>
> & {
  clientsReady?: boolean;
};

const PAGE = `<!doctype html><meta charset="utf-8"><script type="module" src="/client.js"></script>`;

describe.runIf(browserTestsRun)('other clients in Chromium', () => {
  let opened: BrowserPage;

  beforeAll(async () => {
    opened = await openPage('test/browser/page-clients.ts', PAGE);
    await opened.page.waitForFunction(() => window.clientsReady === true);
  }, 60_000);

  afterAll(async () => {
    await opened?.close();
  });

  async function cancelReasons(t: Awaited<ReturnType<typeof startTestServer>>, sessionId: string) {
    await t.runtime.currentTurn(sessionId)?.done;
    await t.context.flush();
    return (
      t.context.db
        .prepare("SELECT payload_json FROM events WHERE session_id = ? AND type = 'turn.cancelled'")
        .pluck()
        .all(sessionId) as string[]
    ).map((p) => JSON.parse(p).reason);
  }

  const run = (flow: string, url: string, id: string) =>
    opened.page.evaluate(([name, u, i]) => window[name!]!(u, i), [flow, url, id] as const);

  it('EventSource: thinking, a tool and its approval, then a cancel', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const sessionId = await t.createSession();
    const { seen, approvals } = await run('eventSourceFlow', t.url, sessionId);
    expect(approvals).toBe(1);
    for (const type of ['thinking.delta', 'tool.confirmation_requested', 'tool.completed', 'text.delta'])
      expect(seen).toContain(type);
    expect(seen.filter((s) => s.startsWith('end:'))).toEqual(['end:turn.completed', 'end:turn.cancelled']);
    expect(await cancelReasons(t, sessionId)).toEqual(['user_cancel']);
  }, 60_000);

  it('@ag-ui/client: thinking, a tool and its approval, then abortRun', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const { seen, approvals } = await run('agUiFlow', t.url, 'page-thread');
    expect(approvals).toBe(1);
    for (const type of ['REASONING_MESSAGE_CONTENT', 'TOOL_CALL_START', 'TOOL_CALL_RESULT', 'RUN_FINISHED'])
      expect(seen).toContain(type);
    expect(await cancelReasons(t, 'page-thread')).toEqual(['client_disconnect']);
  }, 60_000);

  it('the ai chat transport: reasoning, a tool part and its approval, then an abort', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const { seen, approvals } = await run('aiSdkFlow', t.url, 'page-chat');
    expect(approvals).toBe(1);
    for (const type of [
      'reasoning-delta',
      'tool-approval-request',
      'tool-output-available',
      'finish',
      'part:tool-shell',
    ])
      expect(seen).toContain(type);
    expect(await cancelReasons(t, 'page-chat')).toEqual(['client_disconnect']);
  }, 60_000);
});
