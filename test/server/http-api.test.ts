import { describe, expect, it } from 'vitest';
import { startTestServer, type TestClient, type TestServer } from '../helpers/server.js';

const ERROR_SHAPE = { error: { code: expect.any(String), message: expect.any(String) } };

function expectError(response: { status: number; body: any }, status: number, code: string): void {
  expect(response.status).toBe(status);
  expect(response.body).toEqual(ERROR_SHAPE);
  expect(response.body.error.code).toBe(code);
}

async function fullClient(t: TestServer, sessionId: string): Promise<TestClient> {
  const client = await t.attach(sessionId);
  client.send({ type: 'subscribe', filter: 'preset:full', since: null, snapshot: false });
  await client.waitFor((f) => f.type === 'subscribe_ack');
  return client;
}

function eventOf(client: TestClient, type: string, turnId?: string): Promise<any> {
  return client
    .waitFor(
      (f) =>
        f.type === 'event' && f.event.type === type && (turnId === undefined || f.event.turn_id === turnId),
    )
    .then((f) => f.event);
}

/** Submits a turn and waits for the runtime to finish it. */
async function runTurn(t: TestServer, sessionId: string, message: string): Promise<string> {
  const turnId = await t.submit(sessionId, message);
  await t.runtime.currentTurn(sessionId)?.done;
  return turnId;
}

describe('POST /sessions', () => {
  it('creates a session: 201 with its id and summary', async () => {
    const t = await startTestServer();
    const response = await t.request('POST', '/sessions', {
      workspace_path: t.workspace,
      model: 'scripted:x',
    });
    expect(response.status).toBe(201);
    expect(response.body).toMatchObject({
      session_id: expect.stringMatching(/^sess_/),
      workspace_path: t.workspace,
      parent_session_id: null,
      active_model: 'scripted:x',
      turn_count: 0,
      current_turn_id: null,
      status: 'active',
    });
    expect(response.body.id).toBe(response.body.session_id);
    // An empty body is allowed (every field is optional); the default model applies.
    const bare = await t.request('POST', '/sessions', {});
    expect(bare.status).toBe(201);
    expect(bare.body.active_model).toBe('scripted:demo');
  });

  it('refuses a bad model with 400 naming model, and creates nothing', async () => {
    const t = await startTestServer();
    const response = await t.request('POST', '/sessions', { model: 'Claude Sonnet' });
    expectError(response, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(response.body.error.message).toMatch(/^model: /);
    const wrongType = await t.request('POST', '/sessions', { model: 42 });
    expectError(wrongType, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(wrongType.body.error.message).toMatch(/^model: /);
    const emptyPath = await t.request('POST', '/sessions', { workspace_path: '' });
    expect(emptyPath.body.error.message).toMatch(/^workspace_path: /);
    // Well formed, but no provider "nope": every turn would run elsewhere.
    const unservable = await t.request('POST', '/sessions', { model: 'nope:x' });
    expectError(unservable, 400, 'METIS_ERR_INVALID_MODEL');
    expect(unservable.body.error.message).toMatch(
      /^model: "nope:x" cannot serve turns: no provider "nope" in the config \(providers: .*scripted.*\)$/,
    );
    expect((await t.request('GET', '/sessions')).body.sessions).toEqual([]);
  });

  it('refuses an unknown field with 400 naming it', async () => {
    const t = await startTestServer();
    const response = await t.request('POST', '/sessions', { workspace_path: t.workspace, colour: 'blue' });
    expectError(response, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(response.body.error.message).toContain('colour');
    const notAnObject = await t.request('POST', '/sessions', [1, 2]);
    expectError(notAnObject, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect((await t.request('GET', '/sessions')).body.sessions).toEqual([]);
  });

  it('refuses a POST without a JSON content type with 415, even with no body', async () => {
    const t = await startTestServer();
    const bare = await fetch(`${t.url}/sessions`, { method: 'POST' });
    expectError({ status: bare.status, body: await bare.json() }, 415, 'METIS_ERR_UNSUPPORTED_MEDIA_TYPE');
  });
});

describe('GET /sessions', () => {
  it('lists the sessions, newest first', async () => {
    const t = await startTestServer();
    expect(await t.request('GET', '/sessions')).toEqual({
      status: 200,
      body: { sessions: [], next_cursor: null },
    });
    const a = await t.createSession();
    const b = await t.createSession();
    const response = await t.request('GET', '/sessions');
    expect(response.status).toBe(200);
    const ids = response.body.sessions.map((s: any) => s.id);
    expect(ids).toHaveLength(2);
    expect(new Set(ids)).toEqual(new Set([a, b]));
    expect(response.body.sessions[0]).toMatchObject({
      id: expect.any(String),
      workspace_path: t.workspace,
      active_model: 'scripted:demo',
      status: 'active',
    });
    expect(ids).not.toContain('system');
  });
});

describe('GET /sessions/{id} (attach handshake)', () => {
  it('answers 200 with session_id, active_model, attach_token and ws_url', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const response = await t.request('GET', `/sessions/${sessionId}`);
    expect(response.status).toBe(200);
    const { session_id, active_model, attach_token, ws_url, session } = response.body;
    expect(session_id).toBe(sessionId);
    expect(active_model).toBe('scripted:demo');
    expect(attach_token).toMatch(/^atk_[A-Za-z0-9_-]+$/);
    expect(ws_url).toBe(
      `ws://127.0.0.1:${t.server.port}/sessions/${sessionId}/stream?attach=${encodeURIComponent(attach_token)}`,
    );
    expect(session).toMatchObject({ id: sessionId, status: 'active', current_turn_id: null });
    // Every handshake issues a fresh token.
    const again = await t.request('GET', `/sessions/${sessionId}`);
    expect(again.body.attach_token).not.toBe(attach_token);
  });

  it('answers 404 for an unknown session', async () => {
    const t = await startTestServer();
    const response = await t.request('GET', '/sessions/sess_nope');
    expectError(response, 404, 'METIS_ERR_SESSION_NOT_FOUND');
    expect(response.body.error.message).toContain('sess_nope');
    // The reserved system session is not a user session.
    expectError(await t.request('GET', '/sessions/system'), 404, 'METIS_ERR_SESSION_NOT_FOUND');
  });
});

describe('POST /sessions/{id}/turns', () => {
  it('answers 202 with the turn id, and the turn runs', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await fullClient(t, sessionId);
    const response = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'hi there' });
    expect(response.status).toBe(202);
    expect(response.body).toEqual({ turn_id: expect.stringMatching(/^turn_/) });
    const completed = await eventOf(client, 'turn.completed', response.body.turn_id);
    expect(completed.session_id).toBe(sessionId);
  });

  it('answers 409 while a turn is in flight', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const first = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'slow: a long one' });
    expect(first.status).toBe(202);
    const second = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'me too' });
    expectError(second, 409, 'METIS_ERR_TURN_IN_FLIGHT');
    expect(second.body.error.message).toContain(first.body.turn_id);
    expect(t.runtime.currentTurn(sessionId)?.turnId).toBe(first.body.turn_id);
    await t.request('POST', `/sessions/${sessionId}/turns/${first.body.turn_id}/cancel`, {});
    await t.runtime.currentTurn(sessionId)?.done;
  });

  it('refuses an empty or missing message with 400 naming message, and starts nothing', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const empty = await t.request('POST', `/sessions/${sessionId}/turns`, { message: '' });
    expectError(empty, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(empty.body.error.message).toMatch(/^message: /);
    const missing = await t.request('POST', `/sessions/${sessionId}/turns`, {});
    expectError(missing, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(missing.body.error.message).toMatch(/^message: /);
    const badModel = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'x', model: 'nope' });
    expect(badModel.body.error.message).toMatch(/^model: /);
    expect(t.runtime.currentTurn(sessionId)).toBeNull();
    expect((await t.request('GET', `/sessions/${sessionId}/messages`)).body.messages).toEqual([]);
  });

  it('answers 404 for an unknown session', async () => {
    const t = await startTestServer();
    expectError(
      await t.request('POST', '/sessions/sess_nope/turns', { message: 'hi' }),
      404,
      'METIS_ERR_SESSION_NOT_FOUND',
    );
  });
});

describe('POST /sessions/{id}/turns/{turn_id}/cancel', () => {
  it('answers 202 and the turn is cancelled', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await fullClient(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: cancel me');
    await eventOf(client, 'text.delta', turnId);
    const response = await t.request('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {
      reason: 'user_cancel',
    });
    expect(response).toEqual({ status: 202, body: { turn_id: turnId, status: 'cancelling' } });
    const cancelled = await eventOf(client, 'turn.cancelled', turnId);
    expect(cancelled.payload.reason).toBe('user_cancel');
  });

  it('answers 404 for an unknown turn and 400 for a bad reason', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    expectError(
      await t.request('POST', `/sessions/${sessionId}/turns/turn_nope/cancel`, {}),
      404,
      'METIS_ERR_TURN_NOT_FOUND',
    );
    const turnId = await runTurn(t, sessionId, 'done quickly');
    // A finished turn: cancel is idempotent (§6.5), a no-op answered like the first cancel.
    expect(await t.request('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {})).toEqual({
      status: 202,
      body: { turn_id: turnId, status: 'already_ended' },
    });
    const badReason = await t.request('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {
      reason: 'bored',
    });
    expectError(badReason, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(badReason.body.error.message).toMatch(/^reason: /);
    expectError(
      await t.request('POST', `/sessions/sess_nope/turns/${turnId}/cancel`, {}),
      404,
      'METIS_ERR_SESSION_NOT_FOUND',
    );
  });
});

describe('GET /sessions/{id}/messages', () => {
  it('pages back through every message with before= and limit=', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    for (const word of ['one', 'two', 'three']) await runTurn(t, sessionId, word);

    const all = await t.request('GET', `/sessions/${sessionId}/messages`);
    expect(all.status).toBe(200);
    expect(all.body.has_more).toBe(false);
    const messages = all.body.messages;
    expect(messages).toHaveLength(6);
    expect(messages.map((m: any) => m.role)).toEqual([
      'user',
      'assistant',
      'user',
      'assistant',
      'user',
      'assistant',
    ]);
    expect(messages[0]).toMatchObject({
      session_id: sessionId,
      turn_id: expect.stringMatching(/^turn_/),
      status: 'complete',
      content: [{ type: 'text', text: 'one' }],
    });
    expect(messages[5].content).toEqual([{ type: 'text', text: 'You said: three' }]);

    // Walk back four at a time: each page is oldest-first and ends just before the previous one.
    const walked: any[] = [];
    let before: string | null = null;
    let pages = 0;
    for (;;) {
      const query: string = before === null ? '?limit=4' : `?limit=4&before=${before}`;
      const page = await t.request('GET', `/sessions/${sessionId}/messages${query}`);
      expect(page.status).toBe(200);
      pages += 1;
      walked.unshift(...page.body.messages);
      if (!page.body.has_more || page.body.messages.length === 0) break;
      before = page.body.messages[0].id;
    }
    expect(pages).toBe(2);
    expect(walked).toEqual(messages);

    // A page size that divides the total: the last full page says has_more, the next one is empty.
    const firstOfThree = await t.request('GET', `/sessions/${sessionId}/messages?limit=3`);
    expect(firstOfThree.body.has_more).toBe(true);
    const second = await t.request(
      'GET',
      `/sessions/${sessionId}/messages?limit=3&before=${firstOfThree.body.messages[0].id}`,
    );
    expect(second.body.messages).toEqual(messages.slice(0, 3));
    const third = await t.request('GET', `/sessions/${sessionId}/messages?limit=3&before=${messages[0].id}`);
    expect(third.body).toEqual({ messages: [], has_more: false });
  });

  it('refuses a bad limit or an unknown parameter with 400 naming it, and 404 for an unknown session', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    for (const query of ['limit=0', 'limit=-1', 'limit=abc', 'limit=2.5', 'limit=501']) {
      const response = await t.request('GET', `/sessions/${sessionId}/messages?${query}`);
      expectError(response, 400, 'METIS_ERR_INVALID_ARGUMENT');
      expect(response.body.error.message, query).toMatch(/^limit: /);
    }
    const before = await t.request('GET', `/sessions/${sessionId}/messages?before=`);
    expect(before.body.error.message).toMatch(/^before: /);
    // A cursor that names no message of this session is refused, not read as "from the newest".
    const other = await t.createSession();
    await runTurn(t, other, 'elsewhere');
    const foreign = (await t.request('GET', `/sessions/${other}/messages`)).body.messages[0].id;
    for (const cursor of ['msg_nope', foreign]) {
      const response = await t.request('GET', `/sessions/${sessionId}/messages?before=${cursor}`);
      expectError(response, 400, 'METIS_ERR_INVALID_ARGUMENT');
      expect(response.body.error.message).toBe(`before: ${cursor} is not a message of session ${sessionId}`);
    }
    const unknown = await t.request('GET', `/sessions/${sessionId}/messages?after=x`);
    expectError(unknown, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(unknown.body.error.message).toContain('after');
    expectError(await t.request('GET', '/sessions/sess_nope/messages'), 404, 'METIS_ERR_SESSION_NOT_FOUND');
  });
});

describe('POST /sessions/{id}/confirmations/{request_id}', () => {
  it('answers a pending confirmation: 400 for a bad decision, 200 for allow, 404 the second time', async () => {
    const t = await startTestServer({
      tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
    });
    const sessionId = await t.createSession();
    const otherSession = await t.createSession();
    const client = await fullClient(t, sessionId);
    const turnId = await t.submit(sessionId, 'run: echo hi');
    const requested = await eventOf(client, 'tool.confirmation_requested', turnId);
    expect(requested.payload).toMatchObject({ tool_name: 'shell', side_effects: 'execute' });
    const requestId: string = requested.payload.confirmation_request_id;
    const path = `/sessions/${sessionId}/confirmations/${requestId}`;

    const maybe = await t.request('POST', path, { decision: 'maybe' });
    expectError(maybe, 400, 'METIS_ERR_INVALID_ARGUMENT');
    expect(maybe.body.error.message).toMatch(/^decision: /);
    const badScope = await t.request('POST', path, { decision: 'allow', scope: 'forever' });
    expect(badScope.body.error.message).toMatch(/^scope: /);
    // The request belongs to its session: another session's route does not know it.
    expectError(
      await t.request('POST', `/sessions/${otherSession}/confirmations/${requestId}`, { decision: 'allow' }),
      404,
      'METIS_ERR_CONFIRMATION_NOT_FOUND',
    );
    // None of that answered it.
    expect(t.runtime.confirmations.pendingIn(sessionId)).toEqual([requestId]);

    const allow = await t.request('POST', path, { decision: 'allow' });
    expect(allow).toEqual({ status: 200, body: { confirmation_request_id: requestId, decision: 'allow' } });
    const resolved = await eventOf(client, 'tool.confirmation_resolved', turnId);
    expect(resolved.payload).toMatchObject({ confirmation_request_id: requestId, decision: 'allow' });
    const completed = await eventOf(client, 'tool.completed', turnId);
    expect(completed.payload.success).toBe(true);
    await eventOf(client, 'turn.completed', turnId);
    const messages = (await t.request('GET', `/sessions/${sessionId}/messages`)).body.messages;
    expect(JSON.stringify(messages)).toContain('hi');

    expectError(
      await t.request('POST', path, { decision: 'allow' }),
      404,
      'METIS_ERR_CONFIRMATION_NOT_FOUND',
    );
    expectError(
      await t.request('POST', `/sessions/${sessionId}/confirmations/conf_nope`, { decision: 'deny' }),
      404,
      'METIS_ERR_CONFIRMATION_NOT_FOUND',
    );
  });
});

describe('PUT /sessions/{id}/model', () => {
  it('sets the sticky model: 200, and the next turn routes to it via manual_sticky', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await fullClient(t, sessionId);
    const response = await t.request('PUT', `/sessions/${sessionId}/model`, { model: 'scripted:sticky' });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ id: sessionId, active_model: 'scripted:sticky' });
    expect((await t.request('GET', `/sessions/${sessionId}`)).body.active_model).toBe('scripted:sticky');

    const turnId = await t.submit(sessionId, 'which model');
    const decided = await eventOf(client, 'route.decided', turnId);
    expect(decided.payload.chosen_model).toBe('scripted:sticky');
    expect(decided.payload.chain[decided.payload.winner_index]).toMatchObject({
      policy: 'manual_sticky',
      verdict: 'chose',
      candidate_model: 'scripted:sticky',
    });
    await eventOf(client, 'turn.completed', turnId);
  });

  it('refuses a bad or missing model with 400 naming model, and changes nothing', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    for (const body of [{ model: 'no colon' }, {}, { model: 'scripted:x', extra: 1 }]) {
      const response = await t.request('PUT', `/sessions/${sessionId}/model`, body);
      expectError(response, 400, 'METIS_ERR_INVALID_ARGUMENT');
    }
    const missing = await t.request('PUT', `/sessions/${sessionId}/model`, {});
    expect(missing.body.error.message).toMatch(/^model: /);
    const unservable = await t.request('PUT', `/sessions/${sessionId}/model`, { model: 'nope:x' });
    expectError(unservable, 400, 'METIS_ERR_INVALID_MODEL');
    expect((await t.request('GET', `/sessions/${sessionId}`)).body.active_model).toBe('scripted:demo');
    expectError(
      await t.request('PUT', '/sessions/sess_nope/model', { model: 'scripted:x' }),
      404,
      'METIS_ERR_SESSION_NOT_FOUND',
    );
  });
});

describe('health, unknown routes and methods', () => {
  it('GET /healthz answers 200', async () => {
    const t = await startTestServer();
    expect(await t.request('GET', '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
  });

  it('answers 404 for an unknown route', async () => {
    const t = await startTestServer();
    expectError(await t.request('GET', '/nope'), 404, 'METIS_ERR_NOT_FOUND');
    expectError(await t.request('GET', '/sessions/a/b/c/d/e'), 404, 'METIS_ERR_NOT_FOUND');
    expectError(await t.request('POST', '/healthz/x', {}), 404, 'METIS_ERR_NOT_FOUND');
  });

  it('answers 405 for a known route with the wrong method', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    expectError(await t.request('DELETE', '/sessions'), 405, 'METIS_ERR_METHOD_NOT_ALLOWED');
    expectError(await t.request('POST', '/healthz', {}), 405, 'METIS_ERR_METHOD_NOT_ALLOWED');
    expectError(await t.request('GET', `/sessions/${sessionId}/turns`), 405, 'METIS_ERR_METHOD_NOT_ALLOWED');
    expectError(
      await t.request('POST', `/sessions/${sessionId}/model`, { model: 'scripted:x' }),
      405,
      'METIS_ERR_METHOD_NOT_ALLOWED',
    );
    // The 405 happens before the body is read: nothing changed.
    expect((await t.request('GET', `/sessions/${sessionId}`)).body.active_model).toBe('scripted:demo');
  });

  it('a 405 names the methods the path takes in Allow (RFC 9110 §15.5.6)', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const allow = async (method: string, path: string) => {
      const response = await fetch(`${t.url}${path}`, { method });
      expect(response.status).toBe(405);
      return response.headers.get('allow');
    };
    expect(await allow('DELETE', '/sessions')).toBe('GET, POST');
    expect(await allow('POST', '/healthz')).toBe('GET');
    expect(await allow('GET', `/sessions/${sessionId}/model`)).toBe('PUT');
    expect(await allow('PUT', '/metrics')).toBe('GET, HEAD');
  });

  it('a route without a body still wants JSON, or an Authorization header: a form cannot send either (issue 34)', async () => {
    const t = await startTestServer();
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const post = (path: string, headers: Record<string, string>, body = '') =>
      fetch(`${t.url}${path}`, { method: 'POST', headers, body });
    expect((await post('/patterns/clear', form)).status).toBe(415);
    expect((await post('/patterns/clear', { 'content-type': 'application/json' })).status).toBe(200);
    expect((await post('/patterns/clear', { authorization: 'Bearer any' })).status).toBe(200);
    // A route with a body wants JSON whatever else is sent.
    expect((await post('/sessions', { ...form, authorization: 'Bearer any' }, 'a=b')).status).toBe(415);
  });

  it('sends JSON with no-store and nosniff on every answer', async () => {
    const t = await startTestServer();
    const response = await fetch(`${t.url}/healthz`);
    expect(response.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
  });
});
