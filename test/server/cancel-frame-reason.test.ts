import { describe, expect, it } from 'vitest';
import { ofType, subscribe, sync, waitForEvents } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Streaming §3.3: the cancel frame's `reason` is "propagated to turn.cancelled.payload.reason". The
 * conformance tests all send `user_cancel`, the default, so a server ignoring the field would pass them.
 */
describe('the WebSocket cancel frame carries its reason into turn.cancelled', () => {
  it.each([
    ['timeout', 'timeout'],
    ['client_disconnect', 'client_disconnect'],
    ['user_cancel', 'user_cancel'],
  ])('reason %j ends the turn with reason %j', async (sent, recorded) => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: the history of rivers');
    await waitForEvents(client, (e) => e.type === 'text.delta', 3);
    client.send({ type: 'cancel', turn_id: turnId, reason: sent });
    await waitForEvents(client, (e) => e.type === 'turn.cancelled' && e.turn_id === turnId);
    expect(ofType(client.events(), 'turn.cancelled')[0].payload.reason).toBe(recorded);
  });
});

/**
 * Issue 14 observation 7: a reason outside the catalog's closed `turn.cancelled.reason` enum used to
 * become `user_cancel` silently. It cannot be "propagated to turn.cancelled.payload.reason", so the
 * cancel is refused with an error naming the allowed values, on both transports alike, and the turn
 * goes on (docs/decisions.md "The cancel reason").
 */
describe('a cancel reason outside the catalog enum is refused, naming the allowed values', () => {
  it('over the WebSocket: error invalid_frame, the turn is not cancelled; a valid cancel then works', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: the history of rivers');
    await waitForEvents(client, (e) => e.type === 'text.delta', 3);
    client.send({ type: 'cancel', turn_id: turnId, reason: 'because I said so' });
    const error = await client.waitFor((f) => f.type === 'error');
    expect(error.code).toBe('invalid_frame');
    expect(error.message).toMatch(/^reason: must be one of user_cancel, client_disconnect, timeout/);
    expect(error.message).toContain(`turn ${turnId} was not cancelled`);
    expect(await sync(client)).toBe(true);
    expect(ofType(client.events(), 'turn.cancelled')).toEqual([]);
    expect(t.runtime.currentTurn(sessionId)?.turnId).toBe(turnId);

    client.send({ type: 'cancel', turn_id: turnId });
    await waitForEvents(client, (e) => e.type === 'turn.cancelled' && e.turn_id === turnId);
    expect(ofType(client.events(), 'turn.cancelled')[0].payload.reason).toBe('user_cancel');
  });

  it('over HTTP: 400 naming the allowed values, the turn is not cancelled', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: the history of rivers');
    await waitForEvents(client, (e) => e.type === 'text.delta', 3);
    const refused = await t.request('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {
      reason: 'because I said so',
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('METIS_ERR_INVALID_ARGUMENT');
    for (const value of ['user_cancel', 'client_disconnect', 'timeout'])
      expect(refused.body.error.message).toContain(value);
    expect(t.runtime.currentTurn(sessionId)?.turnId).toBe(turnId);
    t.runtime.cancelTurn(sessionId, turnId);
  });
});
