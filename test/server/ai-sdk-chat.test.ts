import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai';
import { describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { readChatStream } from '../helpers/ui-message-stream.js';

/**
 * Issue 15 point 5: `POST /api/chat` read by the real `ai` package (6), the transport and reader that
 * `useChat` runs on: text, reasoning, a tool call, an approval and a cancel. (`ai-sdk-use-chat.test.ts`
 * drives the whole `Chat`: approvals answered in the UI, a history changed in the UI.)
 */

function user(text: string): UIMessage {
  return { id: `m_${Math.random().toString(36).slice(2)}`, role: 'user', parts: [{ type: 'text', text }] };
}

/** Sends `text` after `history` (what the chat shows, which must be what metis ran). */
async function chat(
  t: TestServer,
  chatId: string,
  text: string,
  options: { abortSignal?: AbortSignal; history?: UIMessage[] } = {},
) {
  const transport = new DefaultChatTransport({ api: `${t.url}/api/chat` });
  const sent = user(text);
  const abortSignal = options.abortSignal;
  const stream = await transport.sendMessages({
    chatId,
    messages: [...(options.history ?? []), sent],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal,
  });
  const { chunks, done } = readChatStream(stream);
  return {
    sent,
    chunks,
    done: done.then((last) => last!),
  };
}

describe('AI SDK UI message stream (POST /api/chat)', () => {
  it('thinking, a tool call and the answer arrive as the parts useChat renders; the chat id is the session', async () => {
    const t = await startTestServer();
    const { sent, chunks, done } = await chat(t, 'chat-one', 'think: time');
    const message = await done;
    expect(chunks[0]).toBe('start');
    expect(chunks.at(-1)).toBe('finish');
    expect(chunks).toEqual(
      expect.arrayContaining(['start-step', 'reasoning-start', 'text-delta', 'finish-step']),
    );
    expect(message.role).toBe('assistant');
    const reasoning = message.parts.find((p) => p.type === 'reasoning') as { text: string };
    expect(reasoning.text).toContain('The user asks: time');
    const tool = message.parts.find((p) => p.type === 'tool-current_time') as Record<string, any>;
    expect(tool).toMatchObject({ state: 'output-available', input: {} });
    expect(tool.output).not.toBeNull();
    const texts = message.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text);
    expect(texts.join('')).toContain('The tool returned');
    // The chat id named a new session; the next message continues it.
    expect(t.runtime.getSession('chat-one').turn_count).toBe(1);
    await (await chat(t, 'chat-one', 'hello', { history: [sent, message] })).done;
    expect(t.runtime.getSession('chat-one').turn_count).toBe(2);
  });

  it('an approval request ends the stream; answered through the confirmation route, the resume shows the rest; abort cancels the turn', async () => {
    // The tool waits until the transport has reconnected: the resume finds the turn running.
    let release!: () => void;
    const reconnected = new Promise<void>((resolve) => (release = resolve));
    const t = await startTestServer(
      { tool_confirmation: { execute: 'ask' } },
      { beforeToolExecute: () => reconnected },
    );
    const { sent, chunks, done } = await chat(t, 'chat-approve', 'run: echo approved');
    const asked = await done;
    // The request is over while the turn waits, as the AI SDK's own approvals go.
    expect(chunks.slice(-2)).toEqual(['tool-approval-request', 'finish']);
    const requested = asked.parts.find((p) => p.type === 'tool-shell') as Record<string, any>;
    expect(requested.state).toBe('approval-requested');
    expect(t.runtime.currentTurn('chat-approve')?.turnId).toBe(asked.id);
    const answer = await t.request('POST', `/sessions/chat-approve/confirmations/${requested.approval.id}`, {
      decision: 'allow',
    });
    expect(answer.status).toBe(200);
    // The turn went on; the transport's reconnect replays it, past the answered approval, to its end.
    const transport = new DefaultChatTransport({ api: `${t.url}/api/chat` });
    const resumed = await transport.reconnectToStream({ chatId: 'chat-approve' });
    release();
    let message: UIMessage | undefined;
    for await (const update of readUIMessageStream({ stream: resumed! })) message = update;
    const tool = message!.parts.find((p) => p.type === 'tool-shell') as Record<string, any>;
    expect(tool.state).toBe('output-available');
    expect(JSON.stringify(tool.output)).toContain('approved');

    const controller = new AbortController();
    const slow = await chat(t, 'chat-approve', 'slow: a long answer', {
      abortSignal: controller.signal,
      history: [sent, message!],
    });
    for (let i = 0; i < 500 && !slow.chunks.includes('text-delta'); i += 1)
      await new Promise((resolve) => setTimeout(resolve, 10));
    controller.abort();
    await slow.done.catch(() => undefined);
    await t.runtime.currentTurn('chat-approve')?.done;
    await t.context.flush();
    const cancelled = t.context.db
      .prepare(
        "SELECT payload_json FROM events WHERE session_id = 'chat-approve' AND type = 'turn.cancelled'",
      )
      .pluck()
      .all() as string[];
    expect(cancelled.map((p) => JSON.parse(p).reason)).toEqual(['client_disconnect']);
  });

  it('bad input is a named 400; a chat whose turn is running is a 409; other methods a 405 with Allow', async () => {
    const t = await startTestServer();
    const post = (body: unknown) => t.request('POST', '/api/chat', body);
    expect(await post({ id: 'x y', messages: [user('hi')] })).toMatchObject({
      status: 400,
      body: { error: { code: 'METIS_ERR_INVALID_ARGUMENT', message: expect.stringContaining('id:') } },
    });
    expect(await post({ id: 'c', messages: [] })).toMatchObject({ status: 400 });
    expect(
      await post({
        id: 'c',
        messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'hi' }] }],
      }),
    ).toMatchObject({ status: 400, body: { error: { message: expect.stringContaining('last message') } } });
    const get = await fetch(`${t.url}/api/chat`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    const busy = await chat(t, 'chat-busy', 'slow: busy');
    // The server closes under it when the test ends.
    busy.done.catch(() => undefined);
    for (let i = 0; i < 500 && !busy.chunks.includes('text-delta'); i += 1)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await post({ id: 'chat-busy', messages: [busy.sent, user('again')] })).toMatchObject({
      status: 409,
      body: { error: { code: 'METIS_ERR_TURN_IN_FLIGHT' } },
    });
  });
});
