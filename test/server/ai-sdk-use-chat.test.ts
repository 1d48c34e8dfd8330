import {
  AbstractChat,
  type ChatInit,
  type ChatState,
  type ChatStatus,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  type UIMessage,
} from 'ai';
import { describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 29, point 2: what a `useChat` UI shows and what metis does must not differ. Driven as a browser
 * app drives it: the `ai` package's own `Chat` machinery (`AbstractChat`, which `useChat` wraps, here
 * with plain in-memory state instead of React's) over `DefaultChatTransport`, against a real server.
 */

/** The chat state a UI framework would keep (React's `useChat` keeps the same in React state). */
class MemoryChatState implements ChatState<UIMessage> {
  status: ChatStatus = 'ready';
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (message: UIMessage) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index: number, message: UIMessage) => {
    this.messages = this.messages.map((old, at) => (at === index ? message : old));
  };
  snapshot = <T>(thing: T): T => structuredClone(thing);
}

class NodeChat extends AbstractChat<UIMessage> {
  constructor(init: ChatInit<UIMessage>) {
    super({ ...init, state: new MemoryChatState() });
  }
}

/** A chat as a page would open it: approvals answered in the UI are sent with the next request. */
function openChat(t: TestServer, id: string): NodeChat {
  return new NodeChat({
    id,
    transport: new DefaultChatTransport({ api: `${t.url}/api/chat` }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
}

async function until(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

type AnyPart = Record<string, any>;

function toolPart(chat: NodeChat, type: string): AnyPart | undefined {
  return chat.lastMessage?.parts.find((part) => part.type === type) as AnyPart | undefined;
}

function answerText(message: UIMessage | undefined): string {
  return (message?.parts ?? [])
    .filter((part) => part.type === 'text')
    .map((part) => (part as { text: string }).text)
    .join('');
}

/** Sends, without waiting for the answer: a turn that waits for an approval may not end on its own. */
function send(chat: NodeChat, text: string): void {
  void chat.sendMessage({ text });
}

/** The chat shows the approval, and its request is over: the UI may answer it. */
async function awaitingApproval(chat: NodeChat, toolType: string): Promise<string> {
  await until(
    () => toolPart(chat, toolType)?.state === 'approval-requested' && chat.status === 'ready',
    'the approval request, with the request ended',
  );
  return toolPart(chat, toolType)!.approval.id as string;
}

async function storedPayloads(t: TestServer, sessionId: string, type: string): Promise<any[]> {
  await t.runtime.currentTurn(sessionId)?.done;
  await t.context.flush();
  return (
    t.context.db
      .prepare('SELECT payload_json FROM events WHERE session_id = ? AND type = ? ORDER BY id')
      .pluck()
      .all(sessionId, type) as string[]
  ).map((payload) => JSON.parse(payload));
}

function userTexts(t: TestServer, sessionId: string): string[] {
  return t.runtime.sessions
    .messages(sessionId, { limit: 100 })
    .filter((message) => message.role === 'user')
    .map((message) =>
      (message.content as { type: string; text?: string }[]).map((block) => block.text ?? '').join(''),
    );
}

function diverged(chat: NodeChat): void {
  expect(chat.status).toBe('error');
  const body = JSON.parse(chat.error!.message) as { error: { code: string; message: string } };
  expect(body.error.code).toBe('METIS_ERR_CHAT_HISTORY_DIVERGED');
  expect(body.error.message).toMatch(/new chat/);
}

describe('useChat approvals: addToolApprovalResponse answers through the next POST /api/chat', () => {
  it('an approval given in the UI runs the tool, and the rest of the turn streams into the same message', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const chat = openChat(t, 'chat-allow');
    send(chat, 'run: echo approved-in-the-ui');
    const approvalId = await awaitingApproval(chat, 'tool-shell');
    expect(t.runtime.pendingConfirmations('chat-allow').map((c) => c.confirmation_request_id)).toEqual([
      approvalId,
    ]);

    await chat.addToolApprovalResponse({ id: approvalId, approved: true });
    await until(() => toolPart(chat, 'tool-shell')?.state === 'output-available', 'the tool output');
    await until(() => chat.status === 'ready', 'the continued answer to end');
    expect(chat.error).toBeUndefined();
    // One assistant message for the one turn: the continuation went into it.
    expect(chat.messages.map((message) => message.role)).toEqual(['user', 'assistant']);
    expect(JSON.stringify(toolPart(chat, 'tool-shell')!.output)).toContain('approved-in-the-ui');
    expect(answerText(chat.lastMessage)).toContain('The tool returned');
    await storedPayloads(t, 'chat-allow', 'turn.completed');
    const turnIds = t.context.db
      .prepare("SELECT turn_id FROM events WHERE session_id = 'chat-allow' AND type = 'turn.completed'")
      .pluck()
      .all();
    expect(turnIds).toEqual([chat.lastMessage!.id]);
    const resolved = await storedPayloads(t, 'chat-allow', 'tool.confirmation_resolved');
    expect(resolved).toMatchObject([{ confirmation_request_id: approvalId, decision: 'allow' }]);
    expect(t.runtime.getSession('chat-allow').turn_count).toBe(1);

    // The history the UI holds now is the one metis has: the next message is an ordinary turn.
    await chat.sendMessage({ text: 'hello again' });
    expect(chat.error).toBeUndefined();
    expect(answerText(chat.lastMessage)).toContain('You said: hello again');
    expect(t.runtime.getSession('chat-allow').turn_count).toBe(2);
  });

  it('a denial in the UI denies the tool, with its reason, and the model answers knowing why', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const chat = openChat(t, 'chat-deny');
    send(chat, 'run: echo never-runs');
    const approvalId = await awaitingApproval(chat, 'tool-shell');

    await chat.addToolApprovalResponse({ id: approvalId, approved: false, reason: 'not on this machine' });
    await until(() => toolPart(chat, 'tool-shell')?.state === 'output-denied', 'the denial');
    await until(() => chat.status === 'ready' && answerText(chat.lastMessage) !== '', 'the answer');
    expect(chat.messages.map((message) => message.role)).toEqual(['user', 'assistant']);
    expect(answerText(chat.lastMessage)).toContain('not on this machine');
    const resolved = await storedPayloads(t, 'chat-deny', 'tool.confirmation_resolved');
    expect(resolved).toMatchObject([{ confirmation_request_id: approvalId, decision: 'deny' }]);
    const failed = await storedPayloads(t, 'chat-deny', 'tool.failed');
    expect(failed).toMatchObject([{ error_class: 'user_denied' }]);
    expect(failed[0].error_message).toContain('not on this machine');
    expect(await storedPayloads(t, 'chat-deny', 'tool.completed')).toEqual([]);
  });

  it("metis's own confirmation route still answers it; resumeStream() then shows the rest of the turn", async () => {
    // The tool waits until the UI has reconnected: the resume finds the turn running.
    let release!: () => void;
    const reconnected = new Promise<void>((resolve) => (release = resolve));
    const t = await startTestServer(
      { tool_confirmation: { execute: 'ask' } },
      { beforeToolExecute: () => reconnected },
    );
    const chat = openChat(t, 'chat-route');
    send(chat, 'run: echo answered-elsewhere');
    const approvalId = await awaitingApproval(chat, 'tool-shell');
    const answer = await t.request('POST', `/sessions/chat-route/confirmations/${approvalId}`, {
      decision: 'allow',
    });
    expect(answer.status).toBe(200);

    const resuming = chat.resumeStream();
    await until(() => chat.status === 'streaming', 'the resumed stream');
    release();
    await resuming;
    expect(chat.error).toBeUndefined();
    expect(chat.messages.map((message) => message.role)).toEqual(['user', 'assistant']);
    expect(toolPart(chat, 'tool-shell')!.state).toBe('output-available');
    expect(answerText(chat.lastMessage)).toContain('answered-elsewhere');
    // Answered already: the UI's own answer now has nothing to apply, and says so.
    const late = await t.request('POST', '/api/chat', {
      id: 'chat-route',
      messages: [
        chat.messages[0],
        {
          id: 'late',
          role: 'assistant',
          parts: [
            { type: 'tool-shell', state: 'approval-responded', approval: { id: approvalId, approved: true } },
          ],
        },
      ],
    });
    expect(late).toMatchObject({
      status: 404,
      body: { error: { code: 'METIS_ERR_CONFIRMATION_NOT_FOUND' } },
    });
  });
});

describe('useChat history: what the UI changed in its history is refused with a reason it can show', () => {
  it('regenerate() is a 409 naming what to do; the turn is not run again', async () => {
    const t = await startTestServer();
    const chat = openChat(t, 'chat-regenerate');
    await chat.sendMessage({ text: 'hello' });
    expect(answerText(chat.lastMessage)).toContain('You said: hello');

    await chat.regenerate();
    diverged(chat);
    expect(JSON.parse(chat.error!.message).error.message).toMatch(/regenerate/);
    expect(t.runtime.getSession('chat-regenerate').turn_count).toBe(1);
    expect(userTexts(t, 'chat-regenerate')).toEqual(['hello']);
  });

  it('an edited message is a 409; put back, the history the server has goes on', async () => {
    const t = await startTestServer();
    const chat = openChat(t, 'chat-edit');
    await chat.sendMessage({ text: 'hello' });
    await chat.sendMessage({ text: 'second question' });
    const kept = chat.messages;

    await chat.sendMessage({ text: 'edited question', messageId: kept[0]!.id });
    diverged(chat);
    expect(userTexts(t, 'chat-edit')).toEqual(['hello', 'second question']);

    // The page puts its history back (what metis has) and carries on.
    chat.messages = kept;
    chat.clearError();
    await chat.sendMessage({ text: 'third question' });
    expect(chat.error).toBeUndefined();
    expect(answerText(chat.lastMessage)).toContain('You said: third question');
    expect(userTexts(t, 'chat-edit')).toEqual(['hello', 'second question', 'third question']);
  });

  it('a cleared history is a 409 on that chat id; a new chat id starts afresh', async () => {
    const t = await startTestServer();
    const chat = openChat(t, 'chat-clear');
    await chat.sendMessage({ text: 'hello' });

    chat.messages = [];
    await chat.sendMessage({ text: 'a fresh start' });
    diverged(chat);
    expect(userTexts(t, 'chat-clear')).toEqual(['hello']);

    const fresh = openChat(t, 'chat-clear-2');
    await fresh.sendMessage({ text: 'a fresh start' });
    expect(fresh.error).toBeUndefined();
    expect(userTexts(t, 'chat-clear-2')).toEqual(['a fresh start']);
  });
});
