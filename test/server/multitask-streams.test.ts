import { EventSource } from 'eventsource';
import { describe, expect, it, onTestFinished } from 'vitest';
import { eventually, ofType, subscribe, waitForEvents, waitForType } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 31 part 2: a message sent while a turn runs (`multitask` on POST /sessions/{id}/turns), seen by
 * a WebSocket client and an SSE client of the session: the queue in their snapshots, the turns as they
 * run, and the steered message in the running turn's history.
 */

interface SseClient {
  readonly events: any[];
  readonly snapshots: any[];
}

function followSse(t: TestServer, sessionId: string): SseClient {
  const source = new EventSource(`${t.url}/sessions/${sessionId}/events?filter=preset:full`);
  const client: SseClient = { events: [], snapshots: [] };
  source.onmessage = (message) => client.events.push(JSON.parse(message.data).event);
  source.addEventListener('snapshot', (message) => client.snapshots.push(JSON.parse(message.data)));
  onTestFinished(() => source.close());
  return client;
}

async function server(config: Parameters<typeof startTestServer>[0] = {}) {
  return startTestServer({
    scripted: { slow_token_delay_ms: 15, slow_tokens: 100 },
    tool_confirmation: { execute: 'ask', write: 'allow', network: 'allow' },
    ...config,
  });
}

/**
 * A turn that runs until released: its shell call waits for approval. No timing: the queue is looked
 * at while it surely runs.
 */
async function gatedTurn(t: TestServer, id: string, ws: Awaited<ReturnType<typeof subscribe>>['client']) {
  const turnId = await t.submit(id, 'run: echo gate');
  await waitForEvents(ws, (e) => e.type === 'tool.confirmation_requested' && e.turn_id === turnId);
  const asked = ws.events().find((e) => e.type === 'tool.confirmation_requested' && e.turn_id === turnId);
  return {
    turnId,
    release: async () => {
      const path = `/sessions/${id}/confirmations/${asked.payload.confirmation_request_id}`;
      expect((await t.request('POST', path, { decision: 'allow' })).status).toBe(200);
    },
  };
}

const submit = (t: TestServer, id: string, body: Record<string, unknown>) =>
  t.request('POST', `/sessions/${id}/turns`, body);

/** The user messages stored in the session, by turn, in order. */
async function userMessages(t: TestServer, id: string): Promise<{ turn_id: string; text: string }[]> {
  const { body } = await t.request('GET', `/sessions/${id}/messages?limit=100`);
  return (body.messages as any[])
    .filter((m) => m.role === 'user')
    .map((m) => ({ turn_id: m.turn_id, text: m.content.map((b: any) => b.text ?? '').join('') }));
}

describe('multitask: input while a turn runs (issue 31)', () => {
  it('enqueue: queued in order, seen in every snapshot, run one after another; reject stays 409', async () => {
    const t = await server();
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    const sse = followSse(t, id);
    await eventually(() => sse.snapshots.length === 1);
    const gate = await gatedTurn(t, id, ws);
    const first = gate.turnId;

    const second = await submit(t, id, { message: 'second', multitask: 'enqueue' });
    const third = await submit(t, id, { message: 'third', multitask: 'enqueue' });
    expect(second).toMatchObject({ status: 202, body: { status: 'queued', position: 1 } });
    expect(third).toMatchObject({ status: 202, body: { status: 'queued', position: 2 } });
    const refused = await submit(t, id, { message: 'refused' });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('METIS_ERR_TURN_IN_FLIGHT');

    const queue = (await t.request('GET', `/sessions/${id}/queue`)).body.queue;
    expect(queue.map((q: any) => [q.message, q.mode, q.position])).toEqual([
      ['second', 'enqueue', 1],
      ['third', 'enqueue', 2],
    ]);
    // A client that comes now sees the queue in its snapshot, over either transport.
    const late = await subscribe(t, id);
    expect(late.snapshot.queue.map((q: any) => q.queued_id)).toEqual(queue.map((q: any) => q.queued_id));
    const lateSse = followSse(t, id);
    await eventually(() => lateSse.snapshots.length === 1);
    expect(lateSse.snapshots[0].queue.map((q: any) => q.message)).toEqual(['second', 'third']);

    await gate.release();
    await waitForType(ws, 'turn.completed', 3);
    await eventually(() => ofType(sse.events, 'turn.completed').length === 3);
    for (const events of [ws.events(), sse.events]) {
      const starts = ofType(events, 'turn.started');
      const ends = ofType(events, 'turn.completed');
      expect(starts.length).toBe(3);
      expect(starts[0].turn_id).toBe(first);
      // Each queued turn starts only once the one before has ended.
      expect(starts[1].id > ends[0].id).toBe(true);
      expect(starts[2].id > ends[1].id).toBe(true);
    }
    expect((await userMessages(t, id)).map((m) => m.text)).toEqual(['run: echo gate', 'second', 'third']);
    expect((await t.request('GET', `/sessions/${id}/queue`)).body.queue).toEqual([]);
  }, 30_000);

  it('interrupt: the running turn ends by the §6 cancel sequence (user_cancel), then the new one starts', async () => {
    const t = await server();
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    const sse = followSse(t, id);
    const first = await t.submit(id, 'slow: a long tale');
    await waitForType(ws, 'text.delta');

    const answer = await submit(t, id, { message: 'stop, this instead', multitask: 'interrupt' });
    expect(answer.status).toBe(202);
    expect(answer.body).toMatchObject({ status: 'started', interrupted_turn_id: first });
    const next = answer.body.turn_id as string;
    expect(next).not.toBe(first);

    await waitForEvents(ws, (e) => e.type === 'turn.completed' && e.turn_id === next);
    await eventually(() => sse.events.some((e) => e.type === 'turn.completed' && e.turn_id === next));
    for (const events of [ws.events(), sse.events]) {
      const cut = events.filter((e) => e.turn_id === first);
      const tail = cut
        .filter((e) => ['message.complete', 'llm.call_failed', 'turn.cancelled'].includes(e.type))
        .map((e) => e.type);
      expect(tail).toEqual(['message.complete', 'llm.call_failed', 'turn.cancelled']);
      expect(ofType(cut, 'message.complete')[0].payload.stop_reason).toBe('cancelled');
      expect(ofType(cut, 'llm.call_failed')[0].payload.error_class).toBe('cancelled');
      const cancelled = ofType(cut, 'turn.cancelled')[0];
      expect(cancelled.payload.reason).toBe('user_cancel');
      const started = events.find((e) => e.type === 'turn.started' && e.turn_id === next);
      expect(started.id > cancelled.id).toBe(true);
    }
    expect((await userMessages(t, id)).map((m) => m.text)).toEqual([
      'slow: a long tale',
      'stop, this instead',
    ]);
  }, 30_000);

  it('steer: the message joins the running turn at its next model call, as a user message of that turn', async () => {
    const t = await server();
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    const sse = followSse(t, id);
    const turnId = await t.submit(id, 'run: echo steering-test');
    const asked = await waitForType(ws, 'tool.confirmation_requested').then(
      () => ofType(ws.events(), 'tool.confirmation_requested')[0],
    );

    const steered = await submit(t, id, { message: 'now say steered words', multitask: 'steer' });
    expect(steered).toMatchObject({ status: 202, body: { status: 'steered', turn_id: turnId } });
    const late = await subscribe(t, id);
    expect(late.snapshot.queue).toMatchObject([
      { mode: 'steer', message: 'now say steered words', position: 0, turn_id: turnId },
    ]);
    const lateSse = followSse(t, id);
    await eventually(() => lateSse.snapshots.length === 1);
    expect(lateSse.snapshots[0].queue[0]).toMatchObject({ mode: 'steer', turn_id: turnId });

    const decided = await t.request(
      'POST',
      `/sessions/${id}/confirmations/${asked.payload.confirmation_request_id}`,
      {
        decision: 'allow',
      },
    );
    expect(decided.status).toBe(200);
    await waitForEvents(ws, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
    await eventually(() => sse.events.some((e) => e.type === 'turn.completed'));

    // One turn: no second turn.started; the steer is a user message of it, after the tool's result.
    for (const events of [ws.events(), sse.events]) expect(ofType(events, 'turn.started').length).toBe(1);
    const { body } = await t.request('GET', `/sessions/${id}/messages?limit=100`);
    const roles = (body.messages as any[]).map((m) => `${m.role}:${m.turn_id === turnId}`);
    expect(roles).toEqual(['user:true', 'assistant:true', 'tool:true', 'user:true', 'assistant:true']);
    const last = (body.messages as any[]).at(-1);
    expect(last.content.map((b: any) => b.text ?? '').join('')).toBe('You said: now say steered words');
    expect((await t.request('GET', `/sessions/${id}/queue`)).body.queue).toEqual([]);
  }, 30_000);

  it('a steer the turn had no model call left for becomes the next turn', async () => {
    const t = await server();
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    await t.submit(id, 'slow: one call only');
    await waitForType(ws, 'text.delta');
    const steered = await submit(t, id, { message: 'late words', multitask: 'steer' });
    expect(steered.body.status).toBe('steered');
    await waitForType(ws, 'turn.completed', 2);
    expect((await userMessages(t, id)).map((m) => m.text)).toEqual(['slow: one call only', 'late words']);
  }, 30_000);

  it('drop: DELETE /sessions/{id}/queue/{queued_id} takes a message out; it never runs', async () => {
    const t = await server();
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    const gate = await gatedTurn(t, id, ws);
    const dropped = (await submit(t, id, { message: 'never mind', multitask: 'enqueue' })).body;
    const kept = (await submit(t, id, { message: 'kept', multitask: 'enqueue' })).body;
    const gone = await t.request('DELETE', `/sessions/${id}/queue/${dropped.queued_id}`);
    expect(gone.status).toBe(200);
    expect(gone.body.queue).toMatchObject([{ queued_id: kept.queued_id, position: 1 }]);
    const again = await t.request('DELETE', `/sessions/${id}/queue/${dropped.queued_id}`);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('METIS_ERR_TURN_NOT_FOUND');
    const late = await subscribe(t, id);
    expect(late.snapshot.queue.map((q: any) => q.message)).toEqual(['kept']);

    await gate.release();
    await waitForType(ws, 'turn.completed', 2);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(ofType(ws.events(), 'turn.started').length).toBe(2);
    expect((await userMessages(t, id)).map((m) => m.text)).toEqual(['run: echo gate', 'kept']);
  }, 30_000);

  it('with no turn running every strategy starts one; an unknown strategy is refused', async () => {
    const t = await server();
    const id = await t.createSession();
    for (const multitask of ['enqueue', 'interrupt', 'steer']) {
      const answer = await submit(t, id, { message: `hello ${multitask}`, multitask });
      expect(answer).toMatchObject({ status: 202, body: { status: 'started' } });
      await t.runtime.currentTurn(id)?.done;
    }
    const bad = await submit(t, id, { message: 'x', multitask: 'later' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain('multitask');
  }, 30_000);
});
