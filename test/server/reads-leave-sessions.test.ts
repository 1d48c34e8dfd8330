import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { subscribeOn, waitForEvents } from '../helpers/protocol.js';
import { openClient } from '../helpers/server.js';
import { serverOnFile } from '../helpers/server-on-file.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Reading a session is no reason to take it up (issue 35, store-port plan step 4: non-owner reads). A
 * session from an earlier process was resumed by the first read naming it (the attach handshake, its
 * messages, confirmations, budget, queue, trace, a stream's snapshot): `session.resumed` went into its
 * trace and its idle timer started, so looking at an old session in the dashboard ended it `abandoned`
 * a while later. Reads now answer from the store; only what acts on the session takes it up.
 */

async function serverOn(dbPath: string) {
  const running = await serverOnFile(dbPath);
  const request = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${running.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as any };
  };
  const typesOf = (sessionId: string) =>
    running.context.store.sessionEvents(sessionId).map((event) => event.type);
  return { ...running, request, typesOf };
}

const READS = ['', '/messages', '/confirmations', '/budget', '/queue', '/trace'];

describe('reads leave a stored session as it is', () => {
  it('after a restart, every read answers the stored session without resuming it; a turn does', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const before = await serverOn(dbPath);
    const sessionId = (await before.request('POST', '/sessions', { workspace_path: workspace })).body
      .session_id as string;
    const watcher = await openClient((await before.request('GET', `/sessions/${sessionId}`)).body.ws_url);
    await subscribeOn(watcher, { snapshot: false });
    for (const message of ['one', 'two']) {
      const turnId = (await before.request('POST', `/sessions/${sessionId}/turns`, { message })).body.turn_id;
      await waitForEvents(watcher, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
    }
    const reported = (await before.request('GET', `/sessions/${sessionId}`)).body.session;
    expect(reported).toMatchObject({ turn_count: 2, current_turn_id: null, status: 'active' });
    expect(reported.cost_so_far_usd).toBeGreaterThan(0);
    watcher.close();
    await before.stop();

    const after = await serverOn(dbPath);
    const stored = after.typesOf(sessionId);
    for (const path of READS) {
      const answer = await after.request('GET', `/sessions/${sessionId}${path}`);
      expect(answer.status, path).toBe(200);
    }
    const handshake = await after.request('GET', `/sessions/${sessionId}`);
    expect(handshake.body.session).toEqual(reported);
    expect((await after.request('GET', `/sessions/${sessionId}/confirmations`)).body.confirmations).toEqual(
      [],
    );
    const { snapshot } = await subscribeOn(await openClient(handshake.body.ws_url), { snapshot: true });
    expect(snapshot.session).toMatchObject({
      id: sessionId,
      turn_count: 2,
      current_turn_id: null,
      status: 'active',
      cost_so_far_usd: reported.cost_so_far_usd,
    });
    await after.context.flush();
    expect(after.typesOf(sessionId)).toEqual(stored);
    expect(stored).not.toContain('session.resumed');

    // Acting on it takes it up, once.
    const turn = await after.request('POST', `/sessions/${sessionId}/turns`, { message: 'three' });
    expect(turn.status).toBe(202);
    await after.context.flush();
    const resumed = after.typesOf(sessionId).slice(stored.length);
    expect(resumed.filter((type) => type === 'session.resumed')).toHaveLength(1);
    expect(resumed[0]).toBe('session.resumed');
  });

  it('a read naming no session answers 404, and `system` is no session', async () => {
    const t = await serverOn(join(tempDir(), 'metis.db'));
    for (const id of ['sess_nobody', 'system'])
      for (const path of READS) {
        const answer = await t.request('GET', `/sessions/${id}${path}`);
        expect([answer.status, answer.body.error?.code], `${id}${path}`).toEqual([
          404,
          'METIS_ERR_SESSION_NOT_FOUND',
        ]);
      }
  });

  it('after a restart, the session list and a title leave the stored session as it is', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const before = await serverOn(dbPath);
    const sessionId = (await before.request('POST', '/sessions', { workspace_path: tempDir('metis-ws-') }))
      .body.session_id as string;
    await before.stop();

    const after = await serverOn(dbPath);
    const stored = after.typesOf(sessionId);
    const listed = await after.request('GET', '/sessions');
    expect(listed.body.sessions.map((row: { id: string }) => row.id)).toEqual([sessionId]);
    expect(listed.body.sessions[0]).toMatchObject({ status: 'active', current_turn_id: null });
    const titled = await after.request('PATCH', `/sessions/${sessionId}`, { title: 'Left as it was' });
    expect(titled.status).toBe(200);
    expect(titled.body).toMatchObject({ title: 'Left as it was', current_turn_id: null });
    await after.context.flush();
    expect(after.typesOf(sessionId)).toEqual(stored);
    await after.stop();
  });
});
