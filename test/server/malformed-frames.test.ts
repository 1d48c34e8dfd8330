import { describe, expect, it } from 'vitest';
import { startTestServer, type TestClient, type TestServer } from '../helpers/server.js';

/** Attaches a client to a session and subscribes it with `preset:chat`. */
async function subscribedClient(t: TestServer, sessionId: string): Promise<TestClient> {
  const client = await t.attach(sessionId);
  client.send({ type: 'subscribe', filter: 'preset:chat', since: null, snapshot: false });
  await client.waitFor((f) => f.type === 'subscribe_ack');
  return client;
}

/** A session with two subscribed clients: the one that misbehaves and a bystander. */
async function twoClients(t: TestServer): Promise<{ sessionId: string; bad: TestClient; good: TestClient }> {
  const sessionId = await t.createSession();
  const bad = await subscribedClient(t, sessionId);
  const good = await subscribedClient(t, sessionId);
  return { sessionId, bad, good };
}

/** Runs a turn and waits until every client has received its `turn.completed` and its text. */
async function proveAlive(t: TestServer, sessionId: string, clients: TestClient[]): Promise<void> {
  const turnId = await t.submit(sessionId, 'are you there');
  for (const client of clients) {
    await client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'turn.completed' && f.event.turn_id === turnId,
    );
    const text = client
      .events()
      .filter((e) => e.type === 'text.delta' && e.turn_id === turnId)
      .map((e) => e.payload.text)
      .join('');
    expect(text).toBe('You said: are you there');
  }
}

async function nextError(client: TestClient): Promise<any> {
  const error = await client.waitFor((f) => f.type === 'error');
  expect(error).toEqual({ type: 'error', code: expect.any(String), message: expect.any(String) });
  return error;
}

function nested(depth: number): unknown {
  let value: unknown = 'leaf';
  for (let i = 0; i < depth; i += 1) value = { a: value };
  return value;
}

describe('malformed client frames on a subscribed connection', () => {
  it('bad JSON → error invalid_json; both clients keep working', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.ws.send('{"type": "ping", ');
    const error = await nextError(bad);
    expect(error.code).toBe('invalid_json');
    await proveAlive(t, sessionId, [bad, good]);
    expect(good.frames.some((f) => f.type === 'error')).toBe(false);
  });

  it('valid JSON with wrong types → error invalid_frame naming the field', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.send({ type: 'subscribe', filter: 5 });
    const error = await nextError(bad);
    expect(error.code).toBe('invalid_frame');
    expect(error.message).toMatch(/^filter: must be "preset:chat", "preset:full" or /);
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('names the nested field of a bad explicit filter (subscribe_error invalid_filter, §3.2) and of a bad cancel', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await t.attach(sessionId);
    for (const [filter, field] of [
      [{ event_types: ['turn.completed'], actors: ['robot'] }, /^filter\.actors\.0: /],
      ['preset:nope', /^filter: must be "preset:chat", "preset:full" or /],
      [{ event_types: 'text.delta' }, /^filter\.event_types: /],
    ] as const) {
      client.send({ type: 'subscribe', filter, since: null, snapshot: false });
      const reply = await client.waitFor((f) => f.type === 'subscribe_error');
      expect(reply, JSON.stringify(filter)).toMatchObject({
        code: 'invalid_filter',
        message: expect.stringMatching(field),
      });
      client.frames.length = 0;
    }
    client.frames.length = 0;
    client.send({ type: 'cancel', turn_id: 42 });
    const cancelError = await nextError(client);
    expect(cancelError.code).toBe('invalid_frame');
    expect(cancelError.message).toMatch(/^turn_id\b/);
    // Unknown fields are ignored (§9.2, issue 14 obs. 5), even thousands of them: the frame's size
    // bound, not a key count, protects the server. test/server/client-frames.test.ts covers the rest.
    client.frames.length = 0;
    client.send({
      type: 'ping',
      nonce: 'n',
      ...Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`k${i}`, i])),
    });
    expect(await client.waitFor((f) => f.type === 'pong')).toEqual({ type: 'pong', nonce: 'n' });
    expect(client.frames.some((f) => f.type === 'error')).toBe(false);
    // None of it subscribed the connection or broke it: a valid subscribe still works.
    client.send({ type: 'subscribe', filter: 'preset:chat', since: null, snapshot: false });
    await client.waitFor((f) => f.type === 'subscribe_ack');
    await proveAlive(t, sessionId, [client]);
  });

  it('unknown type → error invalid_frame naming type', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.send({ type: 'launch' });
    const error = await nextError(bad);
    expect(error.code).toBe('invalid_frame');
    expect(error.message).toMatch(/^type\b/);
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('JSON that is not an object (number, string, null, array) → error invalid_frame', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    for (const text of ['42', '"subscribe"', 'null', '[]']) {
      bad.frames.length = 0;
      bad.ws.send(text);
      const error = await nextError(bad);
      expect(error.code, text).toBe('invalid_frame');
    }
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('a frame nested 100 levels deep → error invalid_frame', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.send({ type: 'ping', nonce: nested(100) });
    const error = await nextError(bad);
    expect(error.code).toBe('invalid_frame');
    expect(error.message).toMatch(/deeper than 32/);
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('a frame nested 500,000 levels deep (under 1 MiB) → error invalid_frame, no crash', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.ws.send(`${'['.repeat(500_000)}${']'.repeat(500_000)}`);
    const error = await nextError(bad);
    expect(error.code).toBe('invalid_frame');
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('a binary frame closes that connection with 1003; the other client keeps working', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.ws.send(Buffer.from(JSON.stringify({ type: 'ping', nonce: 'b' })), { binary: true });
    const closed = await bad.closed;
    expect(closed.code).toBe(1003);
    await proveAlive(t, sessionId, [good]);
    // The session itself is fine: a new client can attach and subscribe.
    const again = await subscribedClient(t, sessionId);
    await proveAlive(t, sessionId, [again, good]);
  });

  it('cancel of a turn of another session → error turn_not_found; that turn is not cancelled', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    const otherSession = await t.createSession();
    const watcher = await subscribedClient(t, otherSession);
    const otherTurn = await t.submit(otherSession, 'slow: a long answer');
    await watcher.waitFor((f) => f.type === 'event' && f.event.type === 'text.delta');

    bad.send({ type: 'cancel', turn_id: otherTurn, reason: 'user_cancel' });
    const error = await nextError(bad);
    expect(error.code).toBe('turn_not_found');
    expect(error.message).toContain(otherTurn);

    // The other session's turn is still in flight and was never marked as cancelling: a real cancel
    // from its own session is the first one.
    expect(t.runtime.currentTurn(otherSession)?.turnId).toBe(otherTurn);
    expect(watcher.events().some((e) => e.type === 'turn.cancelled')).toBe(false);
    const cancel = await t.request('POST', `/sessions/${otherSession}/turns/${otherTurn}/cancel`, {});
    expect(cancel).toEqual({ status: 202, body: { turn_id: otherTurn, status: 'cancelling' } });
    await watcher.waitFor((f) => f.type === 'event' && f.event.type === 'turn.cancelled');

    await proveAlive(t, sessionId, [bad, good]);
    expect(good.frames.some((f) => f.type === 'error')).toBe(false);
  });

  it('cancel of an unknown turn in its own session → error turn_not_found', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.send({ type: 'cancel', turn_id: 'turn_nope' });
    expect((await nextError(bad)).code).toBe('turn_not_found');
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('a second subscribe on a live connection → error already_subscribed; the first filter stays', async () => {
    const t = await startTestServer();
    const { sessionId, bad, good } = await twoClients(t);
    bad.send({
      type: 'subscribe',
      filter: { event_types: ['turn.completed'], actors: null, include_worker_sessions: false },
      since: null,
      snapshot: true,
    });
    const error = await nextError(bad);
    expect(error.code).toBe('already_subscribed');
    expect(bad.frames.filter((f) => f.type === 'subscribe_ack')).toHaveLength(1);
    expect(bad.frames.some((f) => f.type === 'snapshot')).toBe(false);
    // proveAlive checks text.delta, which only the original preset:chat filter lets through.
    await proveAlive(t, sessionId, [bad, good]);
  });

  it('a session that does not exist has no handshake: GET /sessions/nope → 404 with the error shape', async () => {
    const t = await startTestServer();
    const response = await t.request('GET', '/sessions/nope');
    expect(response.status).toBe(404);
    expect(response.body).toEqual({
      error: { code: 'METIS_ERR_SESSION_NOT_FOUND', message: expect.stringContaining('nope') },
    });
  });

  it('answers a ping with the same nonce after errors, before and after subscribe', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await t.attach(sessionId);
    client.ws.send('nonsense');
    expect((await nextError(client)).code).toBe('invalid_json');
    client.send({ type: 'ping', nonce: 'before' });
    await client.waitFor((f) => f.type === 'pong' && f.nonce === 'before');
    client.send({ type: 'subscribe', filter: 'preset:full', since: null, snapshot: false });
    await client.waitFor((f) => f.type === 'subscribe_ack');
    client.send({ type: 'ping', nonce: 'after' });
    await client.waitFor((f) => f.type === 'pong' && f.nonce === 'after');
  });
});
