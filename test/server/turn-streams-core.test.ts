import { request as httpRequest, type IncomingMessage } from 'node:http';
import { HttpAgent } from '@ag-ui/client';
import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { subscribe, waitForEvents } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 28: the AI SDK's and AG-UI's turn streams on the one subscription core of WebSocket and SSE:
 * the heartbeat (an SSE comment both clients skip), the queue bound and the close of a reader that
 * stopped reading (while the turn and the other clients go on), and the AI SDK's resume.
 */

type Protocol = 'ai-sdk' | 'ag-ui';

/** The request that runs `text` in the session, per protocol. */
function runRequest(protocol: Protocol, sessionId: string, text: string): { path: string; body: unknown } {
  return protocol === 'ai-sdk'
    ? {
        path: '/api/chat',
        body: { id: sessionId, messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text }] }] },
      }
    : {
        path: '/ag-ui',
        body: { threadId: sessionId, runId: 'run-1', messages: [{ id: 'u1', role: 'user', content: text }] },
      };
}

/** A raw POST whose response is handed over as soon as its head arrived, read by nobody yet. */
function post(t: TestServer, path: string, body: unknown): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${t.url}${path}`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (response) => {
        response.setEncoding('utf8');
        resolve(response);
      },
    );
    req.on('error', reject);
    onTestFinished(() => {
      req.destroy();
    });
    req.end(JSON.stringify(body));
  });
}

/** Everything the response sends from now until it ends. */
function readToEnd(response: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    response.on('data', (chunk: string) => (text += chunk));
    response.on('end', () => resolve(text));
    response.on('error', reject);
    response.resume();
  });
}

/** Reads until `seen` holds for what arrived; resolves with it. */
function readUntil(response: IncomingMessage, seen: (text: string) => boolean, ms = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(
      () => reject(new Error(`not seen within ${ms} ms; got ${text.slice(0, 300)}`)),
      ms,
    );
    response.on('data', (chunk: string) => {
      text += chunk;
      if (seen(text)) {
        clearTimeout(timer);
        resolve(text);
      }
    });
  });
}

async function until(condition: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function storedTypes(t: TestServer, sessionId: string, turnId: string): string[] {
  return t.context.db
    .prepare('SELECT type FROM events WHERE session_id = ? AND turn_id = ? ORDER BY id')
    .pluck()
    .all(sessionId, turnId) as string[];
}

async function closesForTooSlow(t: TestServer): Promise<number> {
  const text = await t.server.metrics.registry.getSingleMetricAsString('metis_stream_closes_total');
  return Number(/reason="client_too_slow"\} (\d+)/.exec(text)?.[1] ?? 0);
}

/**
 * A turn that keeps its stream open with nothing to send for a while. An AI SDK stream ends at an
 * approval request (its answer comes with the next request), so it idles between slow tokens instead.
 */
function idleTurn(protocol: Protocol): { config: RuntimeConfigInput; text: string; seen: RegExp } {
  return protocol === 'ai-sdk'
    ? {
        config: { scripted: { slow_token_delay_ms: 400, slow_tokens: 3 } },
        text: 'slow: idle',
        seen: /text-delta/,
      }
    : { config: { tool_confirmation: { execute: 'ask' } }, text: 'run: echo idle', seen: /confirmation/ };
}

describe.each(['ai-sdk', 'ag-ui'] as const)('%s turn stream on the subscription core', (protocol) => {
  it('an idle stream gets heartbeats (SSE comments) at server.heartbeat_interval_ms', async () => {
    const idle = idleTurn(protocol);
    const t = await startTestServer(idle.config, { stream: { heartbeatIntervalMs: 20 } });
    const sessionId = await t.createSession();
    // Nothing to send for a while but the heartbeat.
    const { path, body } = runRequest(protocol, sessionId, idle.text);
    const response = await post(t, path, body);
    const text = await readUntil(response, (got) => idle.seen.test(got) && got.endsWith(': ping\n\n'));
    expect(text.lastIndexOf(': ping\n\n')).toBeGreaterThan(text.search(idle.seen));
    const ending = readToEnd(response);
    const [pending] = t.runtime.pendingConfirmations(sessionId);
    if (pending)
      await t.request('POST', `/sessions/${sessionId}/confirmations/${pending.confirmation_request_id}`, {
        decision: 'allow',
      });
    const rest = await ending;
    expect(rest).toContain(protocol === 'ai-sdk' ? 'data: [DONE]\n\n' : '"type":"RUN_FINISHED"');
  });

  it("is counted among the open streams, and a server shutdown ends it with the protocol's error", async () => {
    const idle = idleTurn(protocol);
    const t = await startTestServer(idle.config);
    const sessionId = await t.createSession();
    const { path, body } = runRequest(protocol, sessionId, idle.text);
    const response = await post(t, path, body);
    await readUntil(response, (got) => idle.seen.test(got));
    const gauge = await t.server.metrics.registry.getSingleMetricAsString('metis_stream_connections');
    expect(gauge).toMatch(/^metis_stream_connections 1$/m);
    const ending = readToEnd(response);
    await t.server.close();
    const last = (await ending).trimEnd().split('\n\n').at(-1)!;
    expect(JSON.parse(last.slice('data: '.length))).toEqual(
      protocol === 'ai-sdk'
        ? { type: 'error', errorText: 'shutdown: server shutting down' }
        : { type: 'RUN_ERROR', message: 'server shutting down', code: 'shutdown' },
    );
  });

  it('a reader that stops reading is closed once its queue passes the bound; the turn and the other clients go on', async () => {
    const t = await startTestServer(
      // Enough text to fill the kernel's socket buffers of the stalled reader (a few MB), at full speed.
      { scripted: { slow_token_delay_ms: 0, slow_tokens: 80_000 } },
      { stream: { maxQueueEvents: 50, maxQueueBytes: 256 * 1024 * 1024, socketHighWaterMark: 1024 } },
    );
    const sessionId = await t.createSession();
    const { client: other } = await subscribe(t, sessionId, { snapshot: false });
    const { path, body } = runRequest(protocol, sessionId, 'slow: flood');
    const stalled = await post(t, path, body);
    stalled.pause();
    const isEnd = (e: any) =>
      (e.type === 'turn.completed' || e.type === 'turn.cancelled') && e.session_id === sessionId;
    await waitForEvents(other, isEnd, 1, 60_000);
    const end = other.events().find(isEnd);
    const turnId = end.turn_id as string;
    // The turn ran to its end, untouched by the reader that stopped.
    expect(end.type).toBe('turn.completed');
    expect(storedTypes(t, sessionId, turnId)).not.toContain('turn.cancelled');
    // The other client got the whole answer.
    const deltas = other.events().filter((e) => e.type === 'text.delta' && e.turn_id === turnId);
    const complete = other.events().find((e) => e.type === 'message.complete' && e.turn_id === turnId);
    expect(deltas.map((e) => e.payload.text).join('')).toBe(complete.payload.final_content[0].text);
    // The stalled reader was closed: what it got ends with the protocol's error, not the turn's end.
    await until(() => t.server.hub.connectionCount() === 1, 'the stalled stream to be dropped');
    expect(await closesForTooSlow(t)).toBe(1);
    const got = await readToEnd(stalled);
    const last = got.trimEnd().split('\n\n').at(-1)!;
    if (protocol === 'ai-sdk') {
      expect(JSON.parse(last.slice('data: '.length))).toEqual({
        type: 'error',
        errorText: 'client_too_slow: Outbound queue overflowed; reconnect with replay.',
      });
      expect(got).not.toContain('"type":"finish"');
    } else {
      expect(JSON.parse(last.slice('data: '.length))).toEqual({
        type: 'RUN_ERROR',
        message: 'Outbound queue overflowed; reconnect with replay.',
        code: 'client_too_slow',
      });
      expect(got).not.toContain('"type":"RUN_FINISHED"');
    }
  }, 120_000);
});

describe('the real clients read the heartbeat', () => {
  const slow = { scripted: { slow_token_delay_ms: 15, slow_tokens: 30 } };
  const often = { stream: { heartbeatIntervalMs: 5 } };

  it('useChat (DefaultChatTransport, readUIMessageStream) gets the whole answer with comments between chunks', async () => {
    const t = await startTestServer(slow, often);
    const transport = new DefaultChatTransport({ api: `${t.url}/api/chat` });
    const stream = await transport.sendMessages({
      chatId: 'beat',
      messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'slow: beats' }] }],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
    let last: UIMessage | undefined;
    for await (const message of readUIMessageStream({ stream })) last = message;
    const text = last!.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text);
    expect(text.join('')).toMatch(/^Slowly about beats: word1 .* word29$/);
  });

  it('HttpAgent (its verifier checks every event) gets the whole run with comments between events', async () => {
    const t = await startTestServer(slow, often);
    const agent = new HttpAgent({ url: `${t.url}/ag-ui`, threadId: 'beat' });
    agent.addMessage({ id: 'u1', role: 'user', content: 'slow: beats' });
    let text = '';
    const types: string[] = [];
    await agent.runAgent(
      { runId: 'run-1' },
      {
        onEvent: ({ event }) => void types.push(event.type),
        onTextMessageContentEvent: ({ event }) => {
          text += event.delta;
        },
      },
    );
    expect(types.at(-1)).toBe('RUN_FINISHED');
    expect(text).toMatch(/^Slowly about beats: word1 .* word29$/);
  });
});

describe('AI SDK resume (GET /api/chat/{id}/stream)', () => {
  it("rejoins the chat's turn in flight from its start, ends with it, and leaves it running when closed", async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 120 } });
    const transport = new DefaultChatTransport({ api: `${t.url}/api/chat` });
    expect(await transport.reconnectToStream({ chatId: 'nothing-yet' })).toBeNull();

    const first = await post(t, '/api/chat', runRequest('ai-sdk', 'resumed', 'slow: again').body);
    const full = readToEnd(first);
    await until(() => t.runtime.currentTurn('resumed') !== null, 'the turn to start');
    await new Promise((resolve) => setTimeout(resolve, 100)); // some of it has streamed already
    // A reader that gives up early does not cancel the turn (only the request that runs it does).
    const quitter = await fetch(`${t.url}/api/chat/resumed/stream`);
    expect(quitter.status).toBe(200);
    await quitter.body!.cancel();

    const stream = await transport.reconnectToStream({ chatId: 'resumed' });
    let last: UIMessage | undefined;
    for await (const message of readUIMessageStream({ stream: stream! })) last = message;
    const resumedText = last!.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text);
    expect(resumedText.join('')).toMatch(/^Slowly about again: word1 .* word119$/);
    // The same chunks as the request that ran the turn, from `start` on.
    const body = await full;
    expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(body).toContain(`"type":"start","messageId":"${last!.id}"`);
    expect(t.runtime.getSession('resumed').turn_count).toBe(1);
    const ended = t.context.db
      .prepare("SELECT type FROM events WHERE session_id = 'resumed' AND type LIKE 'turn.%' ORDER BY id")
      .pluck()
      .all();
    expect(ended).toEqual(['turn.started', 'turn.completed']);
    expect(await transport.reconnectToStream({ chatId: 'resumed' })).toBeNull();
  });
});
