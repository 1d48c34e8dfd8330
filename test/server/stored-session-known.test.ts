import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * A session an earlier process stored is known to every route that names it, though this process has
 * not taken it up: the check asks the store (asynchronously: docs/plans/store-port.md step 4), not only
 * the sessions this process holds. Each route answers as for a session of its own.
 */
describe('a session stored by an earlier process', () => {
  it('is known to the scores, the SSE stream, the AG-UI thread and the AI SDK reconnect', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const first = await startTestServer({}, { trace: { dbPath } });
    const sessionId = await first.createSession();
    await first.submit(sessionId, 'hello');
    await first.runtime.currentTurn(sessionId)?.done;
    await first.context.flush();
    await first.server.close();
    await first.runtime.close();
    first.context.close();

    const again = await startTestServer({}, { trace: { dbPath } });
    const scores = await again.request('GET', `/sessions/${sessionId}/scores`);
    expect(scores.status).toBe(200);
    expect(scores.body.session_id).toBe(sessionId);
    const controller = new AbortController();
    const sse = await fetch(`${again.url}/sessions/${sessionId}/events?snapshot=true`, {
      headers: { accept: 'text/event-stream' },
      signal: controller.signal,
    });
    expect(sse.status).toBe(200);
    expect(sse.headers.get('content-type')).toMatch(/^text\/event-stream/);
    controller.abort();
    // No turn runs: the AI SDK transport has nothing to reconnect to (204), rather than no such chat.
    const reconnect = await fetch(`${again.url}/api/chat/${sessionId}/stream`);
    expect(reconnect.status).toBe(204);
    // An AG-UI run with no messages reports the thread as stored.
    const thread = await fetch(`${again.url}/sessions/${sessionId}/ag-ui`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({
        threadId: sessionId,
        runId: 'run-1',
        messages: [],
        tools: [],
        context: [],
        state: {},
        forwardedProps: {},
      }),
    });
    expect(thread.status).toBe(200);
    expect(await thread.text()).toContain('hello');
    // An id nobody stored is still unknown to them.
    expect((await again.request('GET', '/sessions/sess_unknown/scores')).status).toBe(404);
    const unknownSse = await fetch(`${again.url}/sessions/sess_unknown/events`, {
      headers: { accept: 'text/event-stream' },
    });
    expect(unknownSse.status).toBe(404);
  });
});
