import { describe, expect, it } from 'vitest';
import { initialState, reduce } from '../../src/client/reducer.js';
import { renderItem } from '../../src/client/render-text.js';
import { subscribe, waitForType } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/** `run:` calls the shell tool (side effects: execute), which this config asks about. */
const ASK_EXECUTE = { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } } as const;

/** Submits `run: echo hi` and resolves with the `tool.confirmation_requested` event, once released. */
async function waitingTurn(t: TestServer, sessionId: string) {
  const watcher = await subscribe(t, sessionId, { snapshot: false });
  const turnId = await t.submit(sessionId, 'run: echo hi');
  await waitForType(watcher.client, 'tool.confirmation_requested');
  const requested = watcher.client.events().find((e) => e.type === 'tool.confirmation_requested')!;
  return { watcher, turnId, requested };
}

describe('snapshot: a confirmation still pending', () => {
  it('follows the snapshot as its tool.confirmation_requested event, so a spec-only client can answer it (issue 14 obs. 4)', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const sessionId = await t.createSession();
    const { watcher, turnId, requested } = await waitingTurn(t, sessionId);
    const requestId: string = requested.payload.confirmation_request_id;
    expect(t.runtime.confirmations.pendingIn(sessionId)).toEqual([requestId]);

    const late = await subscribe(t, sessionId, { snapshot: true });
    const { snapshot } = late;
    // The snapshot stops just before the question; the question is the first thing after it.
    expect(snapshot.snapshot_at_event_id < requested.id).toBe(true);
    expect(snapshot.session.current_turn_id).toBe(turnId);
    expect(snapshot).not.toHaveProperty('pending_confirmations');
    await waitForType(late.client, 'tool.confirmation_requested');
    const replayed = late.client.events();
    expect(replayed.find((e) => e.type === 'tool.confirmation_requested')).toEqual(requested);
    expect(replayed.every((e) => e.id > snapshot.snapshot_at_event_id)).toBe(true);
    expect(late.ack.replay_event_count).toBe(replayed.length);

    // The reducer loads it as pending from the event, and the human view prints the command.
    let state = reduce(initialState, snapshot);
    for (const event of replayed) state = reduce(state, { type: 'event', event });
    expect(state.confirmations[requestId]!.status).toBe('pending');
    const text = renderItem({ kind: 'frame', frame: { type: 'event', event: requested } }, state, sessionId, {
      color: false,
    });
    expect(text).toContain(`metis confirm ${sessionId} ${requestId} allow|deny\n`);

    // Answered with only what the event gave: the turn completes, and a new snapshot has nothing
    // pending and nothing to replay.
    const answered = await t.request('POST', `/sessions/${sessionId}/confirmations/${requestId}`, {
      decision: 'allow',
    });
    expect(answered.status).toBe(200);
    await waitForType(watcher.client, 'turn.completed');
    const after = await subscribe(t, sessionId, { snapshot: true });
    expect(after.snapshot).not.toHaveProperty('pending_confirmations');
    expect(after.snapshot.session.current_turn_id).toBeNull();
    expect(after.ack.replay_event_count).toBe(0);
  }, 30_000);

  it('is listed in pending_confirmations when the events after the question are too many to replay', async () => {
    const t = await startTestServer(ASK_EXECUTE, { stream: { replayCap: 0 } });
    const sessionId = await t.createSession();
    const { turnId, requested } = await waitingTurn(t, sessionId);
    const requestId: string = requested.payload.confirmation_request_id;
    const { snapshot, ack } = await subscribe(t, sessionId, { snapshot: true });
    expect(ack.replay_event_count).toBe(0);
    expect(snapshot.snapshot_at_event_id >= requested.id).toBe(true);
    expect(snapshot.pending_confirmations).toEqual([
      {
        session_id: sessionId,
        confirmation_request_id: requestId,
        tool_use_id: requested.payload.tool_use_id,
        tool_name: 'shell',
        side_effects: 'execute',
        summary: requested.payload.command_summary ?? requested.payload.input_summary,
        turn_id: turnId,
        requested_event_id: requested.id,
        requested_at: requested.timestamp,
        expires_at: requested.payload.expires_at,
      },
    ]);
    // The reducer loads it as pending, the same entry the live event would have made.
    const fromSnapshot = reduce(initialState, snapshot);
    const fromEvent = reduce(initialState, { type: 'event', event: requested });
    expect(fromSnapshot.confirmations).toEqual(fromEvent.confirmations);
    const text = renderItem({ kind: 'frame', frame: snapshot }, fromSnapshot, sessionId, { color: false });
    expect(text).toContain(
      `waiting for approval: confirm shell: ${snapshot.pending_confirmations[0].summary}\n`,
    );
  }, 30_000);

  it('leaves out a request its cancelled turn settled (no tool.confirmation_resolved was emitted)', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const sessionId = await t.createSession();
    const { watcher, turnId } = await waitingTurn(t, sessionId);
    const cancel = await t.request('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {
      reason: 'user_cancel',
    });
    expect(cancel.status).toBeLessThan(300);
    await waitForType(watcher.client, 'turn.cancelled');
    expect(watcher.client.events().some((e) => e.type === 'tool.confirmation_resolved')).toBe(false);
    expect(t.runtime.confirmations.pendingIn(sessionId)).toEqual([]);
    const { snapshot, ack } = await subscribe(t, sessionId, { snapshot: true });
    expect(snapshot).not.toHaveProperty('pending_confirmations');
    expect(ack.replay_event_count).toBe(0);
  }, 30_000);

  it('concerns only the attached session: another session waiting on its own confirmation is not in it', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const waiting = await t.createSession();
    const idle = await t.createSession();
    await waitingTurn(t, waiting);
    const other = await subscribe(t, idle, { snapshot: true });
    expect(other.snapshot).not.toHaveProperty('pending_confirmations');
    expect(other.ack.replay_event_count).toBe(0);
    const own = await subscribe(t, waiting, { snapshot: true });
    await waitForType(own.client, 'tool.confirmation_requested');
  }, 30_000);
});
