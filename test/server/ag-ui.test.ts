import { HttpAgent } from '@ag-ui/client';
import { describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 15 point 4: `POST /ag-ui` driven by the real `@ag-ui/client` `HttpAgent` (what CopilotKit
 * runs on): its own event verifier checks the order of every event metis sends.
 */

function agent(t: TestServer, threadId: string, text: string, url = `${t.url}/ag-ui`): HttpAgent {
  const a = new HttpAgent({ url, threadId });
  a.addMessage({ id: `u_${Math.random().toString(36).slice(2)}`, role: 'user', content: text });
  return a;
}

interface Seen {
  types: string[];
  text: string;
  reasoning: string;
  customs: { name: string; value: any }[];
  toolResults: string[];
}

function subscriber(seen: Seen) {
  return {
    onEvent: ({ event }: { event: { type: string } }) => {
      seen.types.push(event.type);
    },
    onTextMessageContentEvent: ({ event }: { event: { delta: string } }) => {
      seen.text += event.delta;
    },
    onReasoningMessageContentEvent: ({ event }: { event: { delta: string } }) => {
      seen.reasoning += event.delta;
    },
    onCustomEvent: ({ event }: { event: { name: string; value: any } }) => {
      seen.customs.push({ name: event.name, value: event.value });
    },
    onToolCallResultEvent: ({ event }: { event: { content: unknown } }) => {
      seen.toolResults.push(String(event.content));
    },
  };
}

const fresh = (): Seen => ({ types: [], text: '', reasoning: '', customs: [], toolResults: [] });

describe('AG-UI (POST /ag-ui)', () => {
  it('a run with thinking and a tool call passes the client verifier and ends with the thread as stored', async () => {
    const t = await startTestServer();
    const a = agent(t, 'thread-one', 'think: time');
    const seen = fresh();
    const { newMessages } = await a.runAgent({ runId: 'run-1' }, subscriber(seen));
    expect(seen.types[0]).toBe('RUN_STARTED');
    expect(seen.types.at(-1)).toBe('RUN_FINISHED');
    for (const type of [
      'STEP_STARTED',
      'REASONING_START',
      'REASONING_MESSAGE_CONTENT',
      'TEXT_MESSAGE_START',
      'TOOL_CALL_START',
      'TOOL_CALL_ARGS',
      'TOOL_CALL_END',
      'TOOL_CALL_RESULT',
      'MESSAGES_SNAPSHOT',
    ])
      expect(seen.types).toContain(type);
    // One message open at a time: the text block ends before the tool call starts.
    const textEnd = seen.types.indexOf('TEXT_MESSAGE_END');
    expect(textEnd).toBeGreaterThan(-1);
    expect(textEnd).toBeLessThan(seen.types.indexOf('TOOL_CALL_START'));
    expect(seen.types.indexOf('REASONING_END')).toBeLessThan(seen.types.indexOf('TEXT_MESSAGE_START'));
    expect(seen.reasoning).toContain('The user asks: time');
    expect(seen.text).toContain('The tool returned');
    expect(seen.toolResults).toHaveLength(1);
    expect(seen.customs.map((c) => c.name)).toEqual(['metis.route_decided', 'metis.cost']);
    // The thread is the session; its messages after the run are what metis stored.
    expect(t.runtime.getSession('thread-one').turn_count).toBe(1);
    // The snapshot holds every message the run streamed (reasoning, tool result) under the same id.
    const ids = a.messages.map((m) => m.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(a.messages.map((m) => m.role).sort()).toEqual([
      'assistant',
      'assistant',
      'reasoning',
      'tool',
      'user',
    ]);
    expect(newMessages.length).toBeGreaterThan(0);
  });

  it('an approval is a CUSTOM event and an interrupt the next run resumes; abortRun cancels the turn', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const a = agent(t, 'thread-approve', 'run: echo from-ag-ui');
    const seen = fresh();
    await a.runAgent({ runId: 'run-approve' }, subscriber(seen));
    expect(seen.customs.map((c) => c.name)).toContain('metis.confirmation_requested');
    expect(seen.types.at(-1)).toBe('RUN_FINISHED');
    const [interrupt] = a.pendingInterrupts;
    const requested = seen.customs.find((c) => c.name === 'metis.confirmation_requested')!.value;
    expect(interrupt!.id).toBe(requested.confirmation_request_id);
    const resumed = fresh();
    await a.runAgent(
      {
        runId: 'run-approved',
        resume: [{ interruptId: interrupt!.id, status: 'resolved', payload: { approved: true } }],
      },
      subscriber(resumed),
    );
    expect(resumed.customs.map((c) => c.name)).toContain('metis.confirmation_resolved');
    expect(resumed.toolResults.join('')).toContain('from-ag-ui');

    const slow = agent(t, 'thread-approve', 'slow: long');
    const slowSeen = fresh();
    const aborted = slow.runAgent({ runId: 'run-slow' }, subscriber(slowSeen)).catch(() => undefined);
    for (let i = 0; i < 500 && !slowSeen.types.includes('TEXT_MESSAGE_CONTENT'); i += 1)
      await new Promise((resolve) => setTimeout(resolve, 10));
    slow.abortRun();
    await aborted;
    await t.runtime.currentTurn('thread-approve')?.done;
    await t.context.flush();
    const reasons = t.context.db
      .prepare(
        "SELECT payload_json FROM events WHERE session_id = 'thread-approve' AND type = 'turn.cancelled'",
      )
      .pluck()
      .all() as string[];
    expect(reasons.map((r) => JSON.parse(r).reason)).toEqual(['client_disconnect']);
  });

  it('a failed model call is RUN_ERROR; bad input and an unknown thread are named HTTP errors', async () => {
    const t = await startTestServer();
    const seen = fresh();
    const failing = agent(t, 'thread-fail', 'fail: server_error');
    await failing.runAgent({ runId: 'run-fail' }, subscriber(seen)).catch(() => undefined);
    expect(seen.types.at(-1)).toBe('RUN_ERROR');

    const post = (path: string, body: unknown) => t.request('POST', path, body);
    const valid = {
      threadId: 'th',
      runId: 'r',
      messages: [{ id: 'm', role: 'user', content: 'hi' }],
      tools: [],
      context: [],
    };
    expect(await post('/ag-ui', { ...valid, runId: undefined })).toMatchObject({
      status: 400,
      body: { error: { code: 'METIS_ERR_INVALID_ARGUMENT', message: expect.stringContaining('runId') } },
    });
    expect(
      await post('/ag-ui', { ...valid, messages: [{ id: 'm', role: 'assistant', content: 'hi' }] }),
    ).toMatchObject({
      status: 400,
      body: { error: { message: expect.stringContaining('last message must be a user message') } },
    });
    expect(await post('/sessions/sess_nope/ag-ui', { ...valid, threadId: 'sess_nope' })).toMatchObject({
      status: 404,
      body: {
        error: { code: 'METIS_ERR_SESSION_NOT_FOUND', message: expect.stringContaining('unknown thread') },
      },
    });
    const get = await fetch(`${t.url}/ag-ui`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    // The per-session route runs in an existing session.
    const sessionId = await t.createSession();
    const own = agent(t, sessionId, 'hello', `${t.url}/sessions/${sessionId}/ag-ui`);
    const ownSeen = fresh();
    await own.runAgent({ runId: 'run-own' }, subscriber(ownSeen));
    expect(ownSeen.text).toBe('You said: hello');
  });
});
