import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BrowserPage, browserTestsRun, openPage } from '../helpers/browser.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 15, "Done when": in a real browser page on another origin, the browser's own EventSource,
 * `@ag-ui/client` (what CopilotKit runs on) and the `ai` package's `Chat` over its chat transport (what
 * useChat runs on) each drive a turn with thinking, a tool call and an approval, then a cancel, against
 * metis (test/browser/page-clients.ts is the page's script). The last two show the conversation in the
 * page with an Approve button, which the test clicks; it then reads what the page shows.
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

  /**
   * Runs a flow whose page shows an Approve button for the approval and clicks it, as its user would;
   * `shown(part)` is then the text of the flow's section, line by line, of one kind of part.
   */
  async function runApproving(flow: string, section: string, url: string, id: string) {
    const clicking = opened.page.locator(`#${section} button`, { hasText: 'Approve' }).click();
    const [result] = await Promise.all([run(flow, url, id), clicking]);
    const shown = (part: string) => opened.page.locator(`#${section} [data-part="${part}"]`).allInnerTexts();
    const buttons = await opened.page.locator(`#${section} button`).count();
    return { ...result, shown, buttons };
  }

  it('@ag-ui/client: thinking, a tool, its approval as an interrupt the page resumes, then abortRun', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const { seen, approvals, shown, buttons } = await runApproving('agUiFlow', 'ag-ui', t.url, 'page-thread');
    expect(approvals).toBe(1);
    for (const type of ['REASONING_MESSAGE_CONTENT', 'TOOL_CALL_START', 'TOOL_CALL_RESULT', 'RUN_FINISHED'])
      expect(seen).toContain(type);
    // The first run ended at the approval as an interrupt; the resumed run finished it, nothing left open.
    expect(seen.filter((s) => s.startsWith('outcome:'))).toEqual(['outcome:interrupt', 'outcome:success']);
    expect(seen).toContain('pending:0');
    expect(buttons).toBe(0);
    // What the user sees: both questions, the tool's output, and the answer that follows it.
    expect(await shown('user')).toEqual(['think: run: echo from-ag-ui', 'slow: cancel me']);
    expect((await shown('tool')).join('\n')).toContain('from-ag-ui');
    expect((await shown('text')).join('\n')).toMatch(/The tool returned .*from-ag-ui/);
    // The cancelled answer stays as far as it had come.
    expect((await shown('text')).at(-1)).toMatch(/^Slowly/);
    // Nothing twice (what streamed and the run's closing messages are the same messages).
    expect(await shown('reasoning')).toHaveLength(1);
    expect(await shown('tool')).toHaveLength(1);
    expect(await shown('text')).toHaveLength(3);
    expect(await cancelReasons(t, 'page-thread')).toEqual(['client_disconnect']);
  }, 60_000);

  it('the ai Chat: reasoning, a tool part, its approval answered in the page and sent with the history, then stop()', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const { seen, approvals, shown, buttons } = await runApproving('aiSdkFlow', 'ai-sdk', t.url, 'page-chat');
    expect(approvals).toBe(1);
    for (const type of [
      'reasoning-delta',
      'tool-approval-request',
      'tool-output-available',
      'finish',
      'part:tool-shell',
      'aborted',
    ])
      expect(seen).toContain(type);
    // The first response ended at the approval request; the answer went in the next request, with the
    // whole history, and the rest of the turn came into the same assistant message.
    const posts = seen.filter((s) => s.startsWith('post:'));
    expect(posts).toEqual(['post:user', 'post:user,assistant', 'post:user,assistant,user']);
    const asked = seen.indexOf('tool-approval-request');
    const answered = seen.indexOf('post:user,assistant');
    expect(seen.slice(asked, answered)).toContain('finish');
    expect(seen.indexOf('tool-output-available')).toBeGreaterThan(answered);
    expect(seen).toContain('roles:user,assistant');
    expect(buttons).toBe(0);
    // What the user sees: both questions, the tool's output, and the answer that follows it.
    expect(await shown('user')).toEqual(['think: run: echo from-ai-sdk', 'slow: cancel me']);
    expect((await shown('tool')).join('\n')).toContain('from-ai-sdk');
    expect((await shown('text')).join('\n')).toMatch(/The tool returned .*from-ai-sdk/);
    // The cancelled answer stays as far as it had come.
    expect((await shown('text')).at(-1)).toMatch(/^Slowly/);
    // Nothing twice (what streamed and the run's closing messages are the same messages).
    expect(await shown('reasoning')).toHaveLength(1);
    expect(await shown('tool')).toHaveLength(1);
    expect(await shown('text')).toHaveLength(3);
    expect(await cancelReasons(t, 'page-chat')).toEqual(['client_disconnect']);
  }, 60_000);
});
