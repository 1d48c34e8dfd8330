import { HttpAgent } from '@ag-ui/client';
import { DefaultChatTransport, type UIMessage } from 'ai';
import { describe, expect, it } from 'vitest';
import { runOnce, type SeenRun } from '../helpers/ag-ui.js';
import { eventually } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { readChatStream } from '../helpers/ui-message-stream.js';

/**
 * Issue 31 part 2 on the turn streams: a message sent while the thread's (chat's) turn runs, by the real
 * `@ag-ui/client` (`forwardedProps.multitask`) and the real `ai` transport (the request body's
 * `multitask`): `enqueue` streams the new turn once the running one ended, `interrupt` cancels it first.
 */

const server = () => startTestServer({ scripted: { slow_token_delay_ms: 15, slow_tokens: 150 } });

function agentWith(t: TestServer, threadId: string, texts: readonly string[]): HttpAgent {
  const agent = new HttpAgent({ url: `${t.url}/ag-ui`, threadId });
  for (const [index, content] of texts.entries())
    agent.addMessage({ id: `u_${index}_${threadId}`, role: 'user', content });
  return agent;
}

const textOf = (run: SeenRun) =>
  run.events
    .filter((e) => e.type === 'TEXT_MESSAGE_CONTENT')
    .map((e) => e.delta)
    .join('');

async function turnEnds(t: TestServer, sessionId: string): Promise<{ type: string; payload: any }[]> {
  await t.context.flush();
  const { body } = await t.request('GET', `/sessions/${sessionId}/trace`);
  return (body.events as any[]).filter((e) => e.type === 'turn.completed' || e.type === 'turn.cancelled');
}

function userMessage(text: string): UIMessage {
  return { id: `m_${Math.random().toString(36).slice(2)}`, role: 'user', parts: [{ type: 'text', text }] };
}

/** A chat request as useChat sends it, with extra body fields; resolves with its chunks and message. */
async function chatRequest(
  t: TestServer,
  chatId: string,
  messages: UIMessage[],
  body: object = {},
  abortSignal?: AbortSignal,
) {
  const transport = new DefaultChatTransport({ api: `${t.url}/api/chat` });
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal,
    body,
  });
  return readChatStream(stream);
}

const partsText = (message: UIMessage | undefined) =>
  (message?.parts ?? []).map((p) => (p.type === 'text' ? p.text : '')).join('');

describe('multitask on the AG-UI and AI SDK streams (issue 31)', () => {
  it('AG-UI enqueue: the second run waits, then streams its own turn after the first ended', async () => {
    const t = await server();
    const thread = 'thread-enqueue';
    let streaming = false;
    const first = runOnce(agentWith(t, thread, ['slow: the first']), {}, (e) => {
      if (e.type === 'TEXT_MESSAGE_CONTENT') streaming = true;
    });
    expect(await eventually(() => streaming)).toBe(true);
    const refused = await runOnce(agentWith(t, thread, ['slow: the first', 'refused']));
    expect(String(refused.error)).toContain('409');
    const second = await runOnce(agentWith(t, thread, ['slow: the first', 'and then']), {
      forwardedProps: { multitask: 'enqueue' },
    });
    const firstRun = await first;
    expect(firstRun.error).toBeNull();
    expect(second.error).toBeNull();
    expect(second.invalid).toEqual([]);
    expect(second.types[0]).toBe('RUN_STARTED');
    expect(second.types.at(-1)).toBe('RUN_FINISHED');
    expect(textOf(second)).toBe('You said: and then');
    expect(textOf(firstRun)).toContain('Slowly about the first');
    expect((await turnEnds(t, thread)).map((e) => e.type)).toEqual(['turn.completed', 'turn.completed']);
  }, 30_000);

  it('AG-UI interrupt: the running turn is cancelled (user_cancel), the new run streams the next turn', async () => {
    const t = await server();
    const thread = 'thread-interrupt';
    let streaming = false;
    const first = runOnce(agentWith(t, thread, ['slow: the first']), {}, (e) => {
      if (e.type === 'TEXT_MESSAGE_CONTENT') streaming = true;
    });
    expect(await eventually(() => streaming)).toBe(true);
    const second = await runOnce(agentWith(t, thread, ['slow: the first', 'instead this']), {
      forwardedProps: { multitask: 'interrupt' },
    });
    await first;
    expect(second.error).toBeNull();
    expect(textOf(second)).toBe('You said: instead this');
    const ends = await turnEnds(t, thread);
    expect(ends.map((e) => [e.type, e.payload.reason ?? null])).toEqual([
      ['turn.cancelled', 'user_cancel'],
      ['turn.completed', null],
    ]);
  }, 30_000);

  it('AI SDK enqueue and interrupt: the body field multitask', async () => {
    const t = await server();
    const chatId = 'chat-multitask';
    const firstSent = userMessage('slow: the first');
    const first = await chatRequest(t, chatId, [firstSent]);
    expect(await eventually(() => first.chunks.includes('text-delta'))).toBe(true);
    const queuedSent = userMessage('queued one');
    const queued = await chatRequest(t, chatId, [firstSent, queuedSent], { multitask: 'enqueue' });
    expect(partsText(await queued.done)).toBe('You said: queued one');
    expect(partsText(await first.done)).toContain('Slowly about the first');

    const slowSent = userMessage('slow: the third');
    const third = await chatRequest(t, chatId, [firstSent, queuedSent, slowSent]);
    expect(await eventually(() => third.chunks.includes('text-delta'))).toBe(true);
    const now = await chatRequest(t, chatId, [firstSent, queuedSent, slowSent, userMessage('right now')], {
      multitask: 'interrupt',
    });
    expect(partsText(await now.done)).toBe('You said: right now');
    await third.done.catch(() => undefined);
    const ends = await turnEnds(t, chatId);
    expect(ends.map((e) => [e.type, e.payload.reason ?? null])).toEqual([
      ['turn.completed', null],
      ['turn.completed', null],
      ['turn.cancelled', 'user_cancel'],
      ['turn.completed', null],
    ]);
    // A request closed while it waits for its turn takes its message out of the queue.
    const last = userMessage('slow: the last');
    const running = await chatRequest(t, 'chat-drop', [last]);
    expect(await eventually(() => running.chunks.includes('text-delta'))).toBe(true);
    const abort = new AbortController();
    const waiting = chatRequest(
      t,
      'chat-drop',
      [last, userMessage('never')],
      { multitask: 'enqueue' },
      abort.signal,
    );
    expect(await eventually(() => t.runtime.turnQueues.list('chat-drop').length === 1)).toBe(true);
    const runningTurn = t.runtime.currentTurn('chat-drop')!.turnId;
    abort.abort();
    await waiting.catch(() => undefined);
    // Dropped at once, while the turn it waited behind still runs.
    expect(await eventually(() => t.runtime.turnQueues.list('chat-drop').length === 0)).toBe(true);
    expect(t.runtime.currentTurn('chat-drop')?.turnId).toBe(runningTurn);
    await running.done;
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(t.runtime.currentTurn('chat-drop')).toBeNull();
    expect((await turnEnds(t, 'chat-drop')).length).toBe(1);

    const bad = await t.request('POST', '/api/chat', {
      id: 'chat-steer',
      messages: [{ id: 'x', role: 'user', parts: [{ type: 'text', text: 'x' }] }],
      multitask: 'steer',
    });
    expect(bad.status).toBe(400);
  }, 30_000);
});
