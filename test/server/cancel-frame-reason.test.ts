import { describe, expect, it } from 'vitest';
import { ofType, subscribe, waitForEvents } from '../helpers/protocol.js';
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
    // Not a catalog reason (turn.cancelled.reason is a closed enum): recorded as a user's cancel.
    ['because I said so', 'user_cancel'],
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
