import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isGone } from '../helpers/processes.js';
import {
  eventually,
  ofType,
  reconstruct,
  shapeOf,
  strictlyIncreasing,
  subscribe,
  sync,
  waitForEvents,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient } from '../helpers/server.js';

/** Streaming spec §11.1 tests 7–10: cancellation as every connected client sees it (§6.2, §6.4, §6.5). */

const ended = (client: TestClient, turnId: string) =>
  waitForEvents(
    client,
    (e) => (e.type === 'turn.cancelled' || e.type === 'turn.completed') && e.turn_id === turnId,
  );

const cancelFrame = (turnId: string) => ({ type: 'cancel', turn_id: turnId, reason: 'user_cancel' });

describe('streaming protocol: cancellation (§6.2, §11.1)', () => {
  it('7. cancel mid-LLM over the WebSocket: partial message.complete, llm.call_failed, turn.cancelled', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const { client: other } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: the history of rivers');
    await waitForEvents(client, (e) => e.type === 'text.delta', 5);
    client.send(cancelFrame(turnId));
    await ended(client, turnId);
    await ended(other, turnId);

    const events = client.events();
    expect(shapeOf(events)).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'message.complete',
      'llm.call_failed',
      'turn.cancelled',
    ]);
    const complete = ofType(events, 'message.complete')[0].payload;
    expect(complete.stop_reason).toBe('cancelled');
    const deltas = ofType(events, 'text.delta');
    expect(deltas.length).toBeGreaterThanOrEqual(5);
    expect(deltas.length).toBeLessThan(400);
    expect(complete.final_content).toEqual(reconstruct(events, complete.message_id));
    expect(complete.final_content[0].text).toMatch(/^Slowly about the history of/);
    expect(ofType(events, 'llm.call_failed')[0].payload.error_class).toBe('cancelled');
    expect(ofType(events, 'turn.cancelled')[0].payload).toMatchObject({ reason: 'user_cancel' });
    expect(ofType(events, 'tool.failed')).toHaveLength(0);
    // The client that did not cancel sees the same sequence (§10.4).
    expect(other.events()).toEqual(events);
  });

  it('8. cancel during tool dispatch: tool.failed cancelled, turn.cancelled, no llm.call_failed', async () => {
    let toolStarting!: () => void;
    const starting = new Promise<void>((resolve) => {
      toolStarting = resolve;
    });
    const t = await startTestServer({}, { beforeToolExecute: async () => toolStarting() });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const pidFile = join(t.workspace, 'child.pid');
    const turnId = await t.submit(sessionId, `run: (sleep 30 & echo $! > ${pidFile}; wait)`);
    await starting;
    // The command is running once its child wrote its pid.
    expect(await eventually(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '')).toBe(
      true,
    );
    const childPid = Number(readFileSync(pidFile, 'utf8'));
    client.send(cancelFrame(turnId));
    await ended(client, turnId);

    const events = client.events();
    expect(shapeOf(events).slice(-5)).toEqual([
      'message.complete',
      'llm.call_completed',
      'tool.called',
      'tool.failed',
      'turn.cancelled',
    ]);
    const failed = ofType(events, 'tool.failed')[0].payload;
    expect(failed.error_class).toBe('cancelled');
    expect(failed.tool_use_id).toBe(ofType(events, 'tool.called')[0].payload.tool_use_id);
    expect(ofType(events, 'llm.call_failed')).toHaveLength(0);
    expect(ofType(events, 'message.complete')).toHaveLength(1);
    expect(ofType(events, 'message.complete')[0].payload.stop_reason).toBe('tool_use');
    expect(await eventually(() => isGone(childPid))).toBe(true);
  });

  it('8b. cancel at the seam: the pending tool fails as cancelled and never runs', async () => {
    let sessionId = '';
    const cancelReplies: any[] = [];
    const t = await startTestServer(
      {},
      {
        beforeToolExecute: async () => {
          // tool.called is out; execute() has not started. Cancel over HTTP as a client would.
          const turnId = t.runtime.currentTurn(sessionId)!.turnId;
          cancelReplies.push(await t.request('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {}));
        },
      },
    );
    sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const marker = join(t.workspace, 'ran.txt');
    const turnId = await t.submit(sessionId, `run: touch ${marker}`);
    await ended(client, turnId);

    expect(cancelReplies).toEqual([{ status: 202, body: { turn_id: turnId, status: 'cancelling' } }]);
    const events = client.events();
    expect(shapeOf(events).slice(-4)).toEqual([
      'llm.call_completed',
      'tool.called',
      'tool.failed',
      'turn.cancelled',
    ]);
    expect(ofType(events, 'tool.failed')[0].payload.error_class).toBe('cancelled');
    expect(ofType(events, 'llm.call_failed')).toHaveLength(0);
    expect(existsSync(marker)).toBe(false);
    const toolUseId = ofType(events, 'tool.called')[0].payload.tool_use_id;
    expect(t.runtime.sessions.toolCall(toolUseId)!.status).toBe('cancelled');
  });

  it('9. cancel during delegation: delegate.failed cancelled_by_user, tool.failed, then turn.cancelled', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client: planner } = await subscribe(t, sessionId);
    const { client: tracer } = await subscribe(t, sessionId, {
      filter: { event_types: null, actors: null, include_worker_sessions: true },
    });
    const turnId = await t.submit(sessionId, 'delegate: slow: the sea');
    await waitForEvents(planner, (e) => e.type === 'delegate.started');
    const workerId = ofType(planner.events(), 'delegate.started')[0].payload.worker_session_id;
    // The worker is mid-stream.
    await waitForEvents(tracer, (e) => e.type === 'text.delta' && e.session_id === workerId, 3);
    planner.send(cancelFrame(turnId));
    await ended(planner, turnId);
    await ended(tracer, turnId);

    const events = planner.events();
    expect(events.every((e) => e.session_id === sessionId)).toBe(true);
    expect(shapeOf(events).slice(-5)).toEqual([
      'tool.called',
      'delegate.started',
      'delegate.failed',
      'tool.failed',
      'turn.cancelled',
    ]);
    expect(ofType(events, 'delegate.failed')[0].payload).toMatchObject({
      worker_session_id: workerId,
      failure_mode: 'cancelled_by_user',
    });
    expect(ofType(events, 'tool.failed')[0].payload.error_class).toBe('cancelled');
    expect(ofType(events, 'llm.call_failed')).toHaveLength(0);
    // The worker's own cancellation (§6.2.1 in the worker session) precedes the planner's delegate.failed.
    const all = tracer.events();
    expect(strictlyIncreasing(all)).toBe(true);
    const worker = all.filter((e) => e.session_id === workerId);
    expect(shapeOf(worker).slice(-4)).toEqual([
      'message.complete',
      'llm.call_failed',
      'turn.cancelled',
      'session.ended',
    ]);
    expect(ofType(worker, 'llm.call_failed')[0].payload.error_class).toBe('cancelled');
    const delegateFailed = ofType(all, 'delegate.failed')[0];
    expect(ofType(worker, 'turn.cancelled')[0].id < delegateFailed.id).toBe(true);
  });

  it('10. idempotent cancel: repeated cancels, from two clients, end the turn once', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client: a } = await subscribe(t, sessionId);
    const { client: b } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: ctrl-c mashing');
    await waitForEvents(a, (e) => e.type === 'text.delta', 3);
    a.send(cancelFrame(turnId));
    a.send(cancelFrame(turnId));
    b.send(cancelFrame(turnId));
    await ended(a, turnId);
    // A later turn is a barrier: a second cancellation of the first turn would have arrived before it.
    const next = await t.submit(sessionId, 'hello again');
    await ended(a, next);
    await ended(b, next);
    expect(await sync(a)).toBe(true);

    for (const client of [a, b]) {
      const events = client.events();
      expect(ofType(events, 'turn.cancelled')).toHaveLength(1);
      expect(ofType(events, 'llm.call_failed')).toHaveLength(1);
      expect(
        ofType(events, 'message.complete').filter((e) => e.payload.stop_reason === 'cancelled'),
      ).toHaveLength(1);
      expect(ofType(events, 'turn.completed').map((e) => e.turn_id)).toEqual([next]);
      // A redundant cancel is not an error, even when the turn is already over by the time it lands.
      expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
    }
    expect(b.events()).toEqual(a.events());
    const stored = t.context.store.sessionEvents(sessionId);
    expect(stored.filter((e) => e.type === 'turn.cancelled')).toHaveLength(1);
  });
});
