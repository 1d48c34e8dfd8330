import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ofType, subscribe, sync, waitForEvents } from '../helpers/protocol.js';
import { startTestServer, type TestClient, type TestServer } from '../helpers/server.js';
import { serverOnFile } from '../helpers/server-on-file.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 14 observation 6: streaming §6.5 makes cancel idempotent, so a second cancel of a turn that
 * existed in the session gets the first one's success answer, whether the turn is still cancelling,
 * already cancelled, completed, or ended in an earlier server process. Only a turn the session never
 * had is an error (docs/decisions.md "Redundant cancel").
 */

const turnEnd = (client: TestClient, turnId: string) =>
  waitForEvents(
    client,
    (e) => (e.type === 'turn.cancelled' || e.type === 'turn.completed') && e.turn_id === turnId,
  );

async function cancelledTurn(t: TestServer, sessionId: string, client: TestClient): Promise<string> {
  const turnId = await t.submit(sessionId, 'slow: a long story');
  await waitForEvents(client, (e) => e.type === 'text.delta' && e.turn_id === turnId);
  client.send({ type: 'cancel', turn_id: turnId, reason: 'user_cancel' });
  await turnEnd(client, turnId);
  return turnId;
}

describe('a second cancel of the same turn is a no-op, not an error (§6.5)', () => {
  it('over the WebSocket: no error frame for a cancelled or a completed turn; the connection carries on', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const cancelled = await cancelledTurn(t, sessionId, client);
    const completed = await t.submit(sessionId, 'hello');
    await turnEnd(client, completed);

    for (const turnId of [cancelled, cancelled, completed]) {
      client.send({ type: 'cancel', turn_id: turnId, reason: 'user_cancel' });
    }
    expect(await sync(client)).toBe(true);
    expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
    const events = client.events();
    expect(ofType(events, 'turn.cancelled').map((e) => e.turn_id)).toEqual([cancelled]);
    expect(ofType(events, 'turn.completed').map((e) => e.turn_id)).toEqual([completed]);

    // A turn the session never had is still an error.
    client.send({ type: 'cancel', turn_id: 'turn_never_was', reason: 'user_cancel' });
    const error = await client.waitFor((f) => f.type === 'error');
    expect(error.code).toBe('turn_not_found');
  });

  it('over HTTP: 202 for a turn that is cancelling, cancelled or completed; 404 for one never seen', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const otherSession = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: a long story');
    await waitForEvents(client, (e) => e.type === 'text.delta' && e.turn_id === turnId);
    const path = `/sessions/${sessionId}/turns/${turnId}/cancel`;
    const first = await t.request('POST', path, { reason: 'user_cancel' });
    const second = await t.request('POST', path, { reason: 'user_cancel' });
    expect(first).toEqual({ status: 202, body: { turn_id: turnId, status: 'cancelling' } });
    expect(second.status).toBe(202);
    expect(['already_cancelling', 'already_ended']).toContain(second.body.status);
    await turnEnd(client, turnId);

    expect(await t.request('POST', path, {})).toEqual({
      status: 202,
      body: { turn_id: turnId, status: 'already_ended' },
    });
    const completed = await t.submit(sessionId, 'hello');
    await turnEnd(client, completed);
    expect(await t.request('POST', `/sessions/${sessionId}/turns/${completed}/cancel`, {})).toEqual({
      status: 202,
      body: { turn_id: completed, status: 'already_ended' },
    });

    const unknown = await t.request('POST', `/sessions/${sessionId}/turns/turn_never_was/cancel`, {});
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('METIS_ERR_TURN_NOT_FOUND');
    // A turn of another session is not this session's turn.
    const foreign = await t.request('POST', `/sessions/${otherSession}/turns/${turnId}/cancel`, {});
    expect(foreign.status).toBe(404);
    expect(ofType(client.events(), 'turn.cancelled')).toHaveLength(1);
  });

  it('a turn that ended before a restart is found in the store: 202 already_ended over HTTP and in the runtime', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const open = () => serverOnFile(dbPath);
    const before = await open();
    const session = before.runtime.createSession({ workspacePath: workspace });
    const { turnId, done } = before.runtime.submitTurn(session.id, 'hello');
    await done;
    await before.stop();

    const after = await open();
    const response = await fetch(`${after.server.url}/sessions/${session.id}/turns/${turnId}/cancel`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(response.status).toBe(202);
    expect(await response.json()).toEqual({ turn_id: turnId, status: 'already_ended' });
    expect(after.runtime.cancelTurn(session.id, turnId)).toBe('already_ended');
  });
});
