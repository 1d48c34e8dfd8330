import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 18 point 3: a user's rating reaches the trace as feedback.explicit (bus §6.9). */

function stored(t: TestServer, id: string) {
  const row = t.context.db
    .prepare('SELECT turn_id, parent_event_id, actor, sensitivity, payload_json FROM events WHERE id = ?')
    .get(id) as {
    turn_id: string | null;
    parent_event_id: string | null;
    actor: string;
    sensitivity: string;
    payload_json: string;
  };
  return { ...row, payload: JSON.parse(row.payload_json) };
}

async function endedTurn(t: TestServer, sessionId: string, message = 'hello'): Promise<string> {
  const turnId = await t.submit(sessionId, message);
  for (let i = 0; i < 200 && t.runtime.getSession(sessionId).current_turn_id !== null; i += 1)
    await new Promise((resolve) => setTimeout(resolve, 10));
  return turnId;
}

describe('POST /sessions/{id}/feedback', () => {
  it('rates an ended turn: parent is its turn.completed, actor user, aggregatable without a comment', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const turnId = await endedTurn(t, sessionId);
    const answer = await t.request('POST', `/sessions/${sessionId}/feedback`, {
      rating: 'thumbs_up',
      turn_id: turnId,
    });
    expect(answer).toMatchObject({ status: 201, body: { scope: 'turn', rating: 'thumbs_up' } });
    const event = stored(t, answer.body.event_id);
    const completed = t.context.db
      .prepare("SELECT id FROM events WHERE turn_id = ? AND type = 'turn.completed'")
      .pluck()
      .get(turnId);
    expect(event).toMatchObject({
      turn_id: turnId,
      parent_event_id: completed,
      actor: 'user',
      sensitivity: 'aggregatable',
      payload: {
        scope: 'turn',
        rating: 'thumbs_up',
        comment: null,
        subject_turn_id: turnId,
        subject_session_id: sessionId,
      },
    });
  });

  it('rates the session, with a comment recorded private; after session.ended, that is the parent', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    await endedTurn(t, sessionId);
    const open = await t.request('POST', `/sessions/${sessionId}/feedback`, {
      rating: 'thumbs_down',
      comment: 'too long',
    });
    expect(open.status).toBe(201);
    expect(stored(t, open.body.event_id)).toMatchObject({
      turn_id: null,
      parent_event_id: null,
      sensitivity: 'private',
      payload: { scope: 'session', rating: 'thumbs_down', comment: 'too long', subject_turn_id: null },
    });
    t.runtime.endSession(sessionId);
    const ended = await t.request('POST', `/sessions/${sessionId}/feedback`, { rating: 'thumbs_up' });
    const endedId = t.context.db
      .prepare("SELECT id FROM events WHERE session_id = ? AND type = 'session.ended'")
      .pluck()
      .get(sessionId);
    expect(stored(t, ended.body.event_id).parent_event_id).toBe(endedId);
  });

  it('refuses what cannot be rated, naming why, and records nothing', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 10, slow_tokens: 2000 } });
    const sessionId = await t.createSession();
    const running = await t.submit(sessionId, 'slow: a long story');
    const post = (body: unknown, session = sessionId) =>
      t.request('POST', `/sessions/${session}/feedback`, body);
    expect(await post({ rating: 'thumbs_up', turn_id: running })).toMatchObject({
      status: 409,
      body: { error: { code: 'METIS_ERR_TURN_IN_FLIGHT' } },
    });
    expect(await post({ rating: 'thumbs_up', turn_id: 'turn_nope' })).toMatchObject({
      status: 404,
      body: { error: { code: 'METIS_ERR_TURN_NOT_FOUND' } },
    });
    expect(await post({ rating: 'thumbs_up' }, 'sess_nope')).toMatchObject({ status: 404 });
    const bad = await post({ rating: 'great' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/rating/);
    t.runtime.cancelTurn(sessionId, running);
    await t.context.flush();
    const count = t.context.db
      .prepare("SELECT count(*) FROM events WHERE type = 'feedback.explicit'")
      .pluck()
      .get();
    expect(count).toBe(0);
  });
});

describe('metis feedback', () => {
  it('up --turn and down --comment record feedback; a wrong rating is a usage error', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const turnId = await endedTurn(t, sessionId);
    const home = tempDir();
    const up = await runCli(['feedback', sessionId, 'up', '--turn', turnId, '--url', t.url], home);
    expect(up.exitCode).toBe(0);
    expect(up.stdout).toContain(`recorded for turn ${turnId}`);
    const down = await runCli(
      ['feedback', sessionId, 'down', '--comment', 'wrong tool', '--json', '--url', t.url],
      home,
    );
    expect(down.exitCode).toBe(0);
    expect(JSON.parse(down.stdout)).toMatchObject({ scope: 'session', rating: 'thumbs_down' });
    const wrong = await runCli(['feedback', sessionId, 'meh', '--url', t.url], home);
    expect(wrong.exitCode).toBe(2);
    expect(wrong.stderr).toMatch(/rating|meh/);
    await t.context.flush();
    const ratings = t.context.db
      .prepare(
        "SELECT json_extract(payload_json, '$.rating') FROM events WHERE type = 'feedback.explicit' ORDER BY id",
      )
      .pluck()
      .all();
    expect(ratings).toEqual(['thumbs_up', 'thumbs_down']);
  }, 30_000);
});
