import { describe, expect, it } from 'vitest';
import type { ServerOptions } from '../../src/core/app/metis-server.js';
import {
  closedWithin,
  ofType,
  strictlyIncreasing,
  subscribe,
  subscribeOn,
  subscribeReply,
  sync,
  waitForEvents,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient, type TestServer } from '../helpers/server.js';

/**
 * Issue 14 observations 5, 8 and 9: client frames are forward compatible (§9.2 both ways, §2.2 `ack`,
 * the bus spec's `session_ids`), a socket is never closed for subscribing late, and a WebSocket
 * protocol pong counts as liveness (§3.8).
 */

/** Stores `count` small catalog events in a session, committed in chunks as a busy session would. */
async function burst(t: TestServer, sessionId: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 1) {
    ids.push(
      t.context.bus.emit({
        type: 'feedback.implicit',
        session_id: sessionId,
        payload: { type: 'accept', confidence: 0.5, subject_turn_id: null, context: { i } },
      })!.id,
    );
    if (i % 250 === 249) await t.context.flush();
  }
  await t.context.flush();
  return ids;
}

/** Frames received after index `from` that are errors. */
const errorsSince = (client: TestClient, from: number) =>
  client.frames.slice(from).filter((f) => f.type === 'error' || f.type === 'subscribe_error');

describe('client frames are forward compatible (issue 14 obs. 5)', () => {
  it('unknown fields in subscribe, its filter, ping and cancel are ignored; ack is accepted silently', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await t.attach(sessionId);
    const ack = await subscribeReply(client, {
      filter: { event_types: null, actors: null, include_worker_sessions: false, colour: 'blue' },
      since: null,
      snapshot: false,
      client_version: '9.9',
    });
    expect(ack.type).toBe('subscribe_ack');
    // resolved_filter says what the server applied: the unknown filter key is not in it.
    expect(ack.resolved_filter).toEqual({
      event_types: null,
      actors: null,
      include_worker_sessions: false,
      session_ids: null,
    });
    const from = client.frames.length;
    client.send({ type: 'ping', nonce: 'p1', sent_at: 12 });
    expect(await client.waitFor((f) => f.type === 'pong' && f.nonce === 'p1')).toEqual({
      type: 'pong',
      nonce: 'p1',
    });
    client.send({ type: 'ack', event_id: 'evt_whatever', note: 'future field' });
    client.send({ type: 'ack' });
    client.send({ type: 'cancel', turn_id: 'turn_unknown', reason: 'user_cancel', origin: 'tui' });
    expect(await sync(client)).toBe(true);
    // The cancel of an unknown turn may be answered (turn_not_found), but never as an invalid frame.
    expect(errorsSince(client, from).filter((f) => f.code === 'invalid_frame')).toEqual([]);
    expect(errorsSince(client, from).filter((f) => f.code !== 'turn_not_found')).toEqual([]);
    // And the connection streams on.
    const turnId = await t.submit(sessionId, 'hello');
    await waitForEvents(client, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
  });

  it('the strictness that protects the server stays: types, sizes, required fields, unknown frame type', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId, { snapshot: false });
    for (const frame of [
      { type: 'ping' },
      { type: 'ping', nonce: 'x'.repeat(201) },
      { type: 'ack', event_id: 5 },
      { type: 'cancel', turn_id: 42 },
      { type: 'launch', nonce: 'n' },
    ]) {
      const from = client.frames.length;
      client.send(frame);
      const error = await client.waitFor((f) => f.type === 'error' && client.frames.indexOf(f) >= from);
      expect(error.code, JSON.stringify(frame)).toBe('invalid_frame');
    }
    const other = await t.attach(sessionId);
    const reply = await subscribeReply(other, {
      filter: { event_types: null, actors: null, session_ids: 'sess_x' },
      since: null,
      snapshot: false,
    });
    expect(reply).toMatchObject({ type: 'subscribe_error', code: 'invalid_filter' });
    expect(reply.message).toMatch(/^filter\.session_ids/);
  });

  it("session_ids (the bus spec's filter key): the attached session and its workers only, others refused", async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const otherSession = await t.createSession();
    const { client: control } = await subscribe(t, sessionId, {
      filter: { event_types: null, actors: null, include_worker_sessions: true },
      snapshot: false,
    });
    const turnId = await t.submit(sessionId, 'delegate: summarize the sea');
    await waitForEvents(control, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
    const workerId = ofType(control.events(), 'delegate.started')[0].payload.worker_session_id as string;
    const since = control.events()[0].id;
    const filter = (session_ids: unknown, include_worker_sessions = true) => ({
      filter: { event_types: null, actors: null, include_worker_sessions, session_ids },
      since,
      snapshot: false,
    });

    // Another session is not this stream's to carry.
    const refused = await subscribeReply(await t.attach(sessionId), filter([sessionId, otherSession]));
    expect(refused).toMatchObject({ type: 'subscribe_error', code: 'invalid_filter' });
    expect(refused.message).toContain(otherSession);
    // A worker without include_worker_sessions is a contradiction: said, not guessed.
    const contradiction = await subscribeReply(await t.attach(sessionId), filter([workerId], false));
    expect(contradiction).toMatchObject({ type: 'subscribe_error', code: 'invalid_filter' });
    expect(contradiction.message).toMatch(/include_worker_sessions/);

    // The worker alone: exactly the worker's events of the control stream after the cursor.
    const workerOnly = await t.attach(sessionId);
    const ack = await subscribeReply(workerOnly, filter([workerId]));
    expect(ack.type).toBe('subscribe_ack');
    expect(ack.resolved_filter.session_ids).toEqual([workerId]);
    expect(await sync(workerOnly)).toBe(true);
    const expectedWorker = control.events().filter((e) => e.id > since && e.session_id === workerId);
    expect(expectedWorker.length).toBeGreaterThan(0);
    expect(workerOnly.events()).toEqual(expectedWorker);

    // The attached session alone: the planner's events, none of the worker's.
    const plannerOnly = await t.attach(sessionId);
    expect((await subscribeReply(plannerOnly, filter([sessionId]))).type).toBe('subscribe_ack');
    expect(await sync(plannerOnly)).toBe(true);
    expect(plannerOnly.events()).toEqual(
      control.events().filter((e) => e.id > since && e.session_id === sessionId),
    );
    // Live too: a second turn reaches the planner-only client without worker events.
    const second = await t.submit(sessionId, 'delegate: again');
    await waitForEvents(plannerOnly, (e) => e.type === 'turn.completed' && e.turn_id === second);
    expect(plannerOnly.events().every((e) => e.session_id === sessionId)).toBe(true);
    expect(workerOnly.events().every((e) => e.session_id === workerId)).toBe(true);
  });
});

describe('a socket that has not subscribed yet is never closed for it (issue 14 obs. 8)', () => {
  it('a burst of 2,500 events before subscribe: no close; live, snapshot and cursor subscribes each get exactly their due', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const { client: control } = await subscribe(t, sessionId, { snapshot: false });
    const lastBefore = control.events().at(-1)?.id ?? null;
    const live = await t.attach(sessionId);
    const snapshot = await t.attach(sessionId);
    const cursor = await t.attach(sessionId);
    const ids = await burst(t, sessionId, 2_500);
    await waitForEvents(control, (e) => e.type === 'feedback.implicit', ids.length, 30_000);
    // Each early socket is still open and answers.
    for (const client of [live, snapshot, cursor]) expect(await sync(client)).toBe(true);

    await subscribeOn(live, { snapshot: false });
    expect(await sync(live)).toBe(true);
    const since = (events: any[], after: string | null) =>
      events.filter((e) => after === null || e.id > after);
    expect(live.events()).toEqual(since(control.events(), lastBefore));
    expect(ofType(live.events(), 'feedback.implicit').map((e) => e.id)).toEqual(ids);

    const snap = await subscribeOn(snapshot, { snapshot: true });
    expect(snap.snapshot.snapshot_at_event_id >= ids.at(-1)!).toBe(true);
    expect(await sync(snapshot)).toBe(true);
    expect(snapshot.events()).toEqual([]);

    const cursorAt = ids[999]!;
    const replayed = await subscribeOn(cursor, { since: cursorAt, snapshot: false });
    expect(await sync(cursor)).toBe(true);
    expect(cursor.events()).toEqual(since(control.events(), cursorAt));
    expect(replayed.ack.replay_event_count).toBe(1_500);

    // All three stream on live, in order.
    const turnId = await t.submit(sessionId, 'after the burst');
    for (const client of [control, live, snapshot, cursor]) {
      await waitForEvents(client, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
      expect(strictlyIncreasing(client.events())).toBe(true);
      expect(client.ws.readyState).toBe(client.ws.OPEN);
    }
  }, 60_000);
});

describe('an early socket that subscribes after many messages', () => {
  const earlySocketAfterSixTurns = async (options: ServerOptions) => {
    const t = await startTestServer({}, { stream: { maxQueueEvents: 20 }, ...options });
    const sessionId = await t.createSession();
    const { client: control } = await subscribe(t, sessionId, { snapshot: false });
    const early = await t.attach(sessionId);
    // More finished messages than memory keeps deltas for (4), and more events than the early bound.
    for (let i = 0; i < 6; i += 1) {
      const turnId = await t.submit(sessionId, `turn ${i}`);
      await waitForEvents(control, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
    }
    const reply = await subscribeReply(early, { filter: 'preset:full', since: null, snapshot: false });
    return { control, early, reply };
  };

  it('a live subscribe replays everything since accept, deltas from the stream archive included', async () => {
    const { control, early, reply } = await earlySocketAfterSixTurns({});
    expect(reply).toMatchObject({ type: 'subscribe_ack', replay_event_count: control.events().length });
    expect(await sync(early)).toBe(true);
    expect(early.events()).toEqual(control.events());
  });

  it('memory only (fault short-stream-window): a subscribe_error cursor_expired the client acts on, not a close; snapshot: true then works', async () => {
    const { early, reply } = await earlySocketAfterSixTurns({ faults: { shortStreamWindow: true } });
    expect(reply).toMatchObject({ type: 'subscribe_error', code: 'cursor_expired' });
    expect(reply.message).toMatch(/snapshot: true/);
    const { snapshot } = await subscribeOn(early, { snapshot: true });
    expect(snapshot.messages.length).toBeGreaterThanOrEqual(12);
    expect(early.ws.readyState).toBe(early.ws.OPEN);
  });
});

describe('a WebSocket protocol pong counts as liveness (issue 14 obs. 9)', () => {
  it('a client that answers only protocol pings stays across many intervals; one that answers neither is closed', async () => {
    const t = await startTestServer({}, { stream: { heartbeatIntervalMs: 50 } });
    const sessionId = await t.createSession();
    // Both never send a JSON pong; only the first one's library answers protocol pings (as wscat does).
    const generic = await t.attach(sessionId);
    const deaf = await t.attach(sessionId, { autoPong: false });
    let protocolPings = 0;
    generic.ws.on('ping', () => {
      protocolPings += 1;
    });
    for (const client of [generic, deaf]) await subscribeOn(client, { snapshot: false });
    const closed = await closedWithin(deaf);
    expect(closed.code).toBe(4408);
    // Twenty JSON pings unanswered, and still open: the protocol pongs kept it alive.
    await generic.waitFor(() => generic.frames.filter((f) => f.type === 'ping').length >= 20, 15_000);
    expect(protocolPings).toBeGreaterThanOrEqual(20);
    expect(generic.ws.readyState).toBe(generic.ws.OPEN);
    expect(await sync(generic)).toBe(true);
  }, 30_000);
});
