import { describe, expect, it, onTestFinished } from 'vitest';
import { type ClientItem, MetisClient } from '../../src/client/client.js';
import { initialState, reduce } from '../../src/client/reducer.js';
import { conformanceRoutes } from '../../src/core/api/conformance-hooks.js';
import type { ServerOptions } from '../../src/core/app/metis-server.js';
import {
  eventually,
  ofType,
  reconstruct,
  shapeOf,
  strictlyIncreasing,
  subscribe,
  subscribeOn,
  subscribeReply,
  sync,
  waitForEvents,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient } from '../helpers/server.js';

/**
 * Streaming spec §11.1, over real WebSockets against the real server: the stream itself (tests 1, 2,
 * 6, 12, 13, 14, 16). Reconnect and replay are in protocol-replay, cancellation in protocol-cancel,
 * backpressure and heartbeats in protocol-transport.
 */

const turnDone = (client: TestClient, turnId: string) =>
  waitForEvents(client, (e) => e.type === 'turn.completed' && e.turn_id === turnId);

/** Checks every `message.complete` against the deltas that preceded it (§5.3). */
function expectDeltasMatchFinalContent(events: readonly any[]): void {
  const completes = ofType(events, 'message.complete');
  expect(completes.length).toBeGreaterThan(0);
  for (const complete of completes) {
    expect(reconstruct(events, complete.payload.message_id)).toEqual(complete.payload.final_content);
  }
}

describe('streaming protocol: the stream (§11.1)', () => {
  it('1. happy path: canonical order, deltas equal final_content, ids strictly increasing', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const { client, snapshot } = await subscribe(t, sessionId);

    const toolTurn = await t.submit(sessionId, 'time');
    await turnDone(client, toolTurn);
    const thinkTurn = await t.submit(sessionId, 'think: why is the sky blue');
    await turnDone(client, thinkTurn);

    const events = client.events();
    expect(events.every((e) => e.session_id === sessionId)).toBe(true);
    expect(events.every((e) => e.id > snapshot.snapshot_at_event_id)).toBe(true);
    expect(strictlyIncreasing(events)).toBe(true);
    expect(shapeOf(events.filter((e) => e.turn_id === toolTurn))).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_end',
      'message.complete',
      'llm.call_completed',
      'tool.called',
      'tool.completed',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expect(shapeOf(events.filter((e) => e.turn_id === thinkTurn))).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'thinking.delta*',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expectDeltasMatchFinalContent(events);
    const thinking = ofType(events, 'message.complete').at(-1).payload.final_content;
    expect(thinking[0]).toMatchObject({ type: 'thinking', signature: expect.stringMatching(/^sig_/) });
    expect(thinking[1]).toEqual({ type: 'text', text: 'You asked: why is the sky blue' });
    // Persisted events carry a per-session seq with no holes (DESIGN.md invariant 4); streaming ones none.
    const seqs = events.filter((e) => e.seq !== null).map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0] + i));
    expect(ofType(events, 'text.delta').every((e) => e.seq === null)).toBe(true);
  });

  it('2. snapshot mid-session reflects the first turn and the turn in flight; later events follow it', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 3, slow_tokens: 4000 } });
    const sessionId = await t.createSession();
    const { client: observer } = await subscribe(t, sessionId);
    const first = await t.submit(sessionId, 'first question');
    await turnDone(observer, first);
    const second = await t.submit(sessionId, 'slow: rivers');
    await waitForEvents(observer, (e) => e.type === 'text.delta' && e.turn_id === second, 10);

    const late = await subscribe(t, sessionId);
    const snap = late.snapshot;
    // A few live deltas after the snapshot, then end the (long) turn so the test stays short.
    await waitForEvents(late.client, (e) => e.type === 'text.delta', 5);
    t.runtime.cancelTurn(sessionId, second);
    const over = (client: TestClient) =>
      waitForEvents(client, (e) => e.type === 'turn.cancelled' && e.turn_id === second);
    await over(late.client);
    await over(observer);

    expect(snap.session).toMatchObject({
      id: sessionId,
      turn_count: 2,
      current_turn_id: second,
      current_turn_status: 'in_flight',
    });
    const firstAnswer = ofType(observer.events(), 'message.complete')[0].payload;
    expect(snap.messages.slice(0, 3)).toMatchObject([
      {
        role: 'user',
        turn_id: first,
        content: [{ type: 'text', text: 'first question' }],
        status: 'complete',
      },
      { role: 'assistant', turn_id: first, id: firstAnswer.message_id, content: firstAnswer.final_content },
      { role: 'user', turn_id: second, content: [{ type: 'text', text: 'slow: rivers' }] },
    ]);
    // The snapshot is as of snapshot_at_event_id: the turn had started by then.
    const at = snap.snapshot_at_event_id;
    const observed = observer.events();
    expect(observed.some((e) => e.type === 'turn.started' && e.turn_id === second && e.id <= at)).toBe(true);
    // Everything after it arrives, nothing at or before it, with no gap.
    const events = late.client.events();
    expect(events.every((e) => e.id > at)).toBe(true);
    expect(events).toEqual(observed.filter((e) => e.id > at));
    // The message in flight follows the snapshot from its start, as events (docs/decisions.md
    // "Snapshot point"): a client reading only spec fields rebuilds it whole, and the snapshot holds
    // nothing of it.
    expect(snap.in_flight_events).toEqual([]);
    const complete = ofType(events, 'message.complete')[0].payload;
    expect(snap.messages.some((m: { id: string }) => m.id === complete.message_id)).toBe(false);
    expect(events.find((e) => e.payload.message_id === complete.message_id)?.type).toBe('message.start');
    expect(
      ofType(events, 'text.delta').filter((e) => e.payload.message_id === complete.message_id).length,
    ).toBeGreaterThanOrEqual(10);
    expect(reconstruct(events, complete.message_id)).toEqual(complete.final_content);
  });

  it('2b. snapshot: more than 50 messages → the newest 50 in order; cost_so_far_usd = Σ llm.call_completed cost_usd', async () => {
    const price = {
      input_per_mtok: 3,
      output_per_mtok: 15,
      cached_input_per_mtok: 0,
      cache_creation_per_mtok: 0,
    };
    const t = await startTestServer({ pricing: { 'scripted:*': price } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    // A tool turn (user, assistant tool_use, tool result, assistant) then 24 plain turns: 52 messages,
    // so the cap of 50 cuts through the first turn.
    const script = ['time', ...Array.from({ length: 24 }, (_, i) => `hello ${i} ${'la '.repeat(i)}`)];
    const turnIds: string[] = [];
    for (const message of script) {
      const turnId = await t.submit(sessionId, message);
      await turnDone(client, turnId);
      turnIds.push(turnId);
    }
    // Another session's spend must not count.
    const other = await t.createSession();
    const { client: otherClient } = await subscribe(t, other);
    await turnDone(otherClient, await t.submit(other, 'time'));

    // The conversation as the stream told it, in order.
    const events = client.events();
    const expected: Record<string, unknown>[] = [];
    script.forEach((message, i) => {
      const turnId = turnIds[i]!;
      expected.push({ role: 'user', turn_id: turnId, content: [{ type: 'text', text: message }] });
      let results: { type: string; tool_use_id: string }[] = [];
      for (const e of events.filter((event) => event.turn_id === turnId)) {
        if (e.type === 'message.complete') {
          const { message_id: id, final_content: content } = e.payload;
          expected.push({ id, role: 'assistant', turn_id: turnId, content, status: 'complete' });
        } else if (e.type === 'tool.completed') {
          results.push({ type: 'tool_result', tool_use_id: e.payload.tool_use_id });
        } else if (e.type === 'llm.call_started' && results.length > 0) {
          expected.push({ role: 'tool', turn_id: turnId, content: results });
          results = [];
        }
      }
    });
    expect(expected).toHaveLength(52);

    const { snapshot } = await subscribe(t, sessionId);
    expect(snapshot.messages).toHaveLength(50);
    expect(snapshot.messages).toMatchObject(expected.slice(-50));
    expect(snapshot.messages[0]).toMatchObject({ role: 'tool', turn_id: turnIds[0] });
    const ids: string[] = snapshot.messages.map((m: any) => m.id);
    expect(new Set(ids).size).toBe(50);
    expect(snapshot.session.turn_count).toBe(script.length);

    // The cost is the session's own spend as the server recorded it.
    await t.context.flush();
    const calls = t.context.store
      .sessionEvents(sessionId)
      .filter((e) => e.type === 'llm.call_completed')
      .map((e) => ({ payload: { cost_usd: Number(e.payload.cost_usd) } }));
    expect(calls).toHaveLength(script.length + 1); // the tool turn calls the model twice
    const spent = calls.reduce((sum, e) => sum + e.payload.cost_usd, 0);
    expect(spent).toBeGreaterThan(0);
    expect(snapshot.session.cost_so_far_usd).toBeCloseTo(spent, 7);
    expect(ofType(events, 'llm.call_completed').map((e) => e.payload.cost_usd)).toEqual(
      calls.map((e) => e.payload.cost_usd),
    );
  });

  it('6. two clients with the same filter receive identical event sequences', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const a = await subscribe(t, sessionId, { filter: 'preset:chat' });
    const b = await subscribe(t, sessionId, { filter: 'preset:chat' });
    for (const message of ['time', 'think: ducks', 'hello']) {
      const turnId = await t.submit(sessionId, message);
      await turnDone(a.client, turnId);
      await turnDone(b.client, turnId);
    }
    const events = a.client.events();
    expect(events.length).toBeGreaterThan(30);
    expect(ofType(events, 'turn.completed')).toHaveLength(3);
    expect(b.client.events()).toEqual(events);
    expect(strictlyIncreasing(events)).toBe(true);
    // preset:chat has the model calls (§10.1) and leaves out what a chat view does not render.
    expect(ofType(events, 'llm.call_started').length).toBe(ofType(events, 'llm.call_completed').length);
    expect(ofType(events, 'llm.call_started').length).toBeGreaterThanOrEqual(4);
    const resolved: string[] = a.ack.resolved_filter.event_types;
    expect(resolved).toEqual(
      expect.arrayContaining(['llm.call_started', 'llm.call_completed', 'text.delta']),
    );
    expect(resolved.filter((type) => /^(session|bus|trace|eval|gateway)\./.test(type))).toEqual([]);
  });

  it('12. worker events: hidden by default, included on request, and attachable directly afterwards', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const filter = (include: boolean) => ({
      event_types: null,
      actors: null,
      include_worker_sessions: include,
    });
    const hidden = await subscribe(t, sessionId, { filter: filter(false) });
    const included = await subscribe(t, sessionId, { filter: filter(true) });
    expect(included.ack.resolved_filter.include_worker_sessions).toBe(true);
    const turnId = await t.submit(sessionId, 'delegate: summarize the sea');
    await turnDone(hidden.client, turnId);
    await turnDone(included.client, turnId);

    const started = ofType(hidden.client.events(), 'delegate.started')[0];
    const workerId = started.payload.worker_session_id as string;
    expect(workerId).toMatch(/^sess_/);
    expect(ofType(hidden.client.events(), 'delegate.completed')).toHaveLength(1);
    expect(hidden.client.events().every((e) => e.session_id === sessionId)).toBe(true);

    const all = included.client.events();
    const workerEvents = all.filter((e) => e.session_id === workerId);
    expect(all.filter((e) => e.session_id === sessionId)).toEqual(hidden.client.events());
    expect(workerEvents.map((e) => e.type)).toEqual(
      expect.arrayContaining(['session.created', 'turn.started', 'text.delta', 'turn.completed']),
    );
    expect(ofType(workerEvents, 'llm.call_started')[0].actor).toBe('worker');
    expect(strictlyIncreasing(all)).toBe(true);
    const completed = ofType(all, 'delegate.completed')[0];
    expect(
      workerEvents.every((e) => e.id > started.id && (e.id < completed.id || e.type === 'session.ended')),
    ).toBe(true);
    expectDeltasMatchFinalContent(workerEvents);

    // Direct attach to the worker after the fact (§7.3): a snapshot, and a replay equal to what the
    // include_worker_sessions client saw.
    const direct = await subscribe(t, workerId);
    expect(direct.snapshot.session).toMatchObject({ id: workerId, parent_session_id: sessionId });
    expect(direct.snapshot.messages).toMatchObject([
      { role: 'user', content: [{ type: 'text', text: 'summarize the sea' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'You said: summarize the sea' }] },
    ]);
    const replay = await subscribe(t, workerId, { since: started.id, snapshot: false });
    expect(replay.ack.replay_event_count).toBe(workerEvents.length);
    expect(await sync(replay.client)).toBe(true);
    expect(replay.client.events()).toEqual(workerEvents);
  });

  it('13. filter validation: an unknown type is refused by name; streaming-only types are valid', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await t.attach(sessionId);
    const refused = await subscribeReply(client, {
      filter: { event_types: ['text.delta', 'made.up.thing'], actors: null, include_worker_sessions: false },
      since: null,
      snapshot: true,
    });
    expect(refused).toMatchObject({ type: 'subscribe_error', code: 'invalid_filter' });
    expect(refused.message).toContain('made.up.thing');
    expect(refused.message).not.toContain('text.delta');

    // The client fixes its filter and subscribes again on the same connection.
    const types = ['text.delta', 'message.complete', 'route.decided', 'turn.completed'];
    const { ack } = await subscribeOn(client, {
      filter: { event_types: types, actors: null, include_worker_sessions: false },
    });
    expect(ack.resolved_filter.event_types).toEqual(types);
    const turnId = await t.submit(sessionId, 'hello filters');
    await turnDone(client, turnId);
    const seen = new Set(client.events().map((e) => e.type));
    expect([...seen].sort()).toEqual([...types].sort());
  });

  it('14. forward compatibility: the server streams an unknown event type; the client library skips and counts it, the stream goes on', async () => {
    // The `--conformance` hook (POST /_conformance/unknown) makes the server stream an event of a type
    // no catalog has, through the server's hub, as a newer server would send a type this client lacks.
    const hooks: ServerOptions['extraRoutes'] = ({ hub, trace }) =>
      conformanceRoutes(
        trace,
        { heartbeatIntervalMs: 30_000, maxQueueEvents: 1000, replayCap: 10_000, faults: [] },
        hub,
      );
    const t = await startTestServer(
      { scripted: { slow_token_delay_ms: 3, slow_tokens: 60 } },
      { extraRoutes: hooks },
    );
    const sessionId = await t.createSession();
    // An explicit filter with every type: a preset lists this server's types, which a future one is not.
    const client = new MetisClient({
      url: t.url,
      sessionId,
      filter: { event_types: null, actors: null, include_worker_sessions: false },
      snapshot: true,
      backoff: { minMs: 10, maxMs: 100 },
    });
    onTestFinished(() => client.close());
    const items: ClientItem[] = [];
    let state = initialState;
    let thrown: unknown = null;
    const iterating = (async () => {
      try {
        for await (const item of client) {
          items.push(item);
          if (item.kind === 'frame') state = reduce(state, item.frame);
        }
      } catch (error) {
        thrown = error;
      }
    })();
    const events = () =>
      items.flatMap((i) => (i.kind === 'frame' && i.frame.type === 'event' ? [i.frame.event as any] : []));
    const received = (predicate: (e: any) => boolean, count = 1) =>
      eventually(() => events().filter(predicate).length >= count, 15_000);

    expect(await eventually(() => items.some((i) => i.kind === 'frame' && i.frame.type === 'snapshot'))).toBe(
      true,
    );
    // Mid-message: the unknown event lands between text deltas of a streaming assistant message.
    const slowTurn = await t.submit(sessionId, 'slow: comets');
    expect(await received((e) => e.type === 'text.delta' && e.turn_id === slowTurn, 5)).toBe(true);
    const injected = await t.request('POST', '/_conformance/unknown', { session_id: sessionId });
    expect(injected.status).toBe(200);
    const unknownId: string = injected.body.event_id;
    expect(await received((e) => e.type === 'turn.completed' && e.turn_id === slowTurn)).toBe(true);
    const nextTurn = await t.submit(sessionId, 'hello after the future');
    expect(await received((e) => e.type === 'turn.completed' && e.turn_id === nextTurn)).toBe(true);

    // The server did send it, as an ordinary event frame, once.
    const all = events();
    const unknown = all.filter((e) => e.type === 'conformance.future_type');
    expect(unknown).toHaveLength(1);
    expect(unknown[0]).toMatchObject({ id: unknownId, session_id: sessionId });
    const at = all.indexOf(unknown[0]);
    const slowDeltas = (list: any[]) => list.filter((e) => e.type === 'text.delta' && e.turn_id === slowTurn);
    expect(slowDeltas(all.slice(0, at)).length).toBeGreaterThanOrEqual(5);
    expect(slowDeltas(all.slice(at + 1)).length).toBeGreaterThan(0);
    expect(all.slice(at + 1).some((e) => e.type === 'message.complete' && e.turn_id === slowTurn)).toBe(true);

    // The client skipped and counted it, did not raise, and stayed on the same connection.
    expect(thrown).toBeNull();
    expect(state.unknownSkipped).toBe(1);
    expect(client.failure).toBeNull();
    const statuses = items.flatMap((i) => (i.kind === 'status' ? [i.status] : []));
    expect(statuses).toEqual(['connecting', 'connected']);
    // Everything after it still applied: the slow message rebuilt from deltas on both sides of the
    // unknown event equals final_content, and the next turn's messages are there.
    expect(state.mismatches).toBe(0);
    expect(state.lastEventId).toBe(all.at(-1).id);
    expect(state.turns[slowTurn]?.status).toBe('completed');
    expect(state.turns[nextTurn]?.status).toBe('completed');
    const answers = state.messages.filter((m) => m.role === 'assistant');
    expect(answers.map((m) => [m.turn_id, m.status])).toEqual([
      [slowTurn, 'complete'],
      [nextTurn, 'complete'],
    ]);
    expect(answers[1]!.blocks).toEqual([{ type: 'text', text: 'You said: hello after the future' }]);
    // Skipping is all it did: the same frames without it reduce to the same state.
    const frames = items.flatMap((i) => (i.kind === 'frame' ? [i.frame] : []));
    const without = frames
      .filter((f) => f.type !== 'event' || f.event.id !== unknownId)
      .reduce(reduce, initialState);
    expect(without).toEqual({ ...state, unknownSkipped: 0 });

    client.close();
    await iterating;
  });

  it('16. the snapshot/replay seam: events arriving around subscribe appear exactly once', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const { client: control } = await subscribe(t, sessionId);
    for (let round = 0; round < 20; round += 1) {
      // The server buffers this connection's events from accept on, before it has subscribed.
      const client = await t.attach(sessionId);
      const cursor = control.events().at(-1)?.id ?? null;
      const replay = round % 2 === 1 && cursor !== null;
      const options = replay ? { since: cursor, snapshot: false } : { snapshot: true };
      const message = round % 3 === 0 ? 'time' : `hello round ${round}`;
      let turnId: string;
      let subscribed: Awaited<ReturnType<typeof subscribeOn>>;
      if (round % 4 === 0) {
        // Subscribe in the same tick as the submit.
        [turnId, subscribed] = await Promise.all([
          t.submit(sessionId, message),
          subscribeOn(client, options),
        ]);
      } else {
        turnId = await t.submit(sessionId, message);
        // Let a varying number of events land in the connection's buffer first.
        await waitForEvents(control, (e) => e.turn_id === turnId, round % 7);
        subscribed = await subscribeOn(client, options);
      }
      await turnDone(control, turnId);
      expect(await sync(client)).toBe(true);

      const from = replay ? cursor! : subscribed.snapshot.snapshot_at_event_id;
      const events = client.events();
      expect(events, `round ${round}`).toEqual(control.events().filter((e) => e.id > from));
      if (replay) expect(subscribed.ack.replay_event_count).toBeLessThanOrEqual(events.length);
      else {
        // Deltas of a message caught mid-stream: in the snapshot up to its id, then live.
        const inFlight: any[] = subscribed.snapshot.in_flight_events;
        for (const messageId of new Set(inFlight.map((e) => e.payload.message_id))) {
          const ofMessage = (list: readonly any[]) => list.filter((e) => e.payload.message_id === messageId);
          expect([...ofMessage(inFlight), ...ofMessage(events)]).toEqual(ofMessage(control.events()));
        }
      }
      client.close();
    }
    expect(ofType(control.events(), 'turn.completed')).toHaveLength(20);
  });

  it('16b. a replay after a long wait before subscribe keeps id order, with no gap and no duplicate', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const { client: control } = await subscribe(t, sessionId);
    // Attached but not subscribed while more messages finish than the server keeps deltas for in
    // memory: the connection's own buffer holds deltas the replay no longer has.
    const late = await t.attach(sessionId);
    const turns = 7;
    let since: string | null = null;
    for (let i = 0; i < turns; i += 1) {
      const turnId = await t.submit(sessionId, `hello ${i}`);
      await turnDone(control, turnId);
      since ??= ofType(control.events(), 'turn.started')[0].id;
    }
    const { ack } = await subscribeOn(late, { since, snapshot: false });
    expect(await sync(late)).toBe(true);
    const events = late.events();
    const expected = control.events().filter((e) => e.id > since!);
    expect(shapeOf(events)).toEqual(shapeOf(expected));
    expect(events).toEqual(expected);
    expect(strictlyIncreasing(events)).toBe(true);
    expect(ack.replay_event_count).toBe(expected.length);
  });
});
