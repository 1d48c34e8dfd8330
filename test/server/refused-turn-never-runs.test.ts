import { describe, expect, it } from 'vitest';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { startTestServer } from '../helpers/server.js';

/**
 * `POST .../turns` answers 202 only once `turn.started` is stored, and 503 when storage does not take
 * it in time. A 503 must mean the turn did nothing: a client retries it, and a turn that had run behind
 * the refusal (its model call, its shell command) would then run twice.
 */
describe('a turn refused with 503 while storage is locked', () => {
  it('never calls the model: it ends cancelled (timeout) once storage takes its events', async () => {
    const t = await startTestServer({}, { commitWaitMs: 1000 });
    const sessionId = await t.createSession();
    await t.context.flush();
    const lock = await holdWriteLockInChild(t.context.dbPath, 3000);

    const refused = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'hello there' });
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe('METIS_ERR_STORAGE_BUSY');

    await lock.released;
    const deadline = Date.now() + 10_000;
    while (t.runtime.getSession(sessionId).current_turn_id !== null && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await t.context.flush();
    const events = t.context.db
      .prepare(
        'SELECT type, payload_json FROM events WHERE session_id = ? AND turn_id IS NOT NULL ORDER BY seq',
      )
      .all(sessionId) as { type: string; payload_json: string }[];
    expect(events.map((e) => e.type)).toEqual(['turn.started', 'turn.cancelled']);
    expect(JSON.parse(events[1]!.payload_json)).toMatchObject({ reason: 'timeout', partial_llm_calls: 0 });
    const assistant = t.context.db
      .prepare("SELECT count(*) FROM messages WHERE session_id = ? AND role = 'assistant'")
      .pluck()
      .get(sessionId);
    expect(assistant).toBe(0);

    // Storage is back: the session takes its next turn normally.
    const next = await t.request('POST', `/sessions/${sessionId}/turns`, { message: 'hello again' });
    expect(next.status).toBe(202);
  });
});
