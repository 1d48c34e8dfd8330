import { describe, expect, it } from 'vitest';
import { spawnCli } from '../helpers/run-cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** A long answer, so Ctrl-C lands mid-turn. */
async function slowServer() {
  const t = await startTestServer({ scripted: { slow_token_delay_ms: 10, slow_tokens: 3000 } });
  return { t, sessionId: await t.createSession() };
}

function storedTypes(t: TestServer, sessionId: string): string[] {
  return t.context.db
    .prepare("SELECT type FROM events WHERE session_id = ? AND type LIKE 'turn.%' ORDER BY id")
    .pluck()
    .all(sessionId) as string[];
}

describe('Ctrl-C on `metis send --follow` (issue 17 obs. 2)', () => {
  it('cancels the turn, shows its end, and exits 3 (cancelled)', async () => {
    const { t, sessionId } = await slowServer();
    const send = spawnCli(['send', sessionId, 'slow: a long story', '--follow', '--url', t.url], tempDir());
    await send.waitForStdout((out) => out.length > 40, 20_000);
    expect(await send.stop('SIGINT')).toBe(3);
    expect(send.stderr()).toContain('cancelling turn');
    expect(send.stdout()).toMatch(/cancel/);
    await t.context.flush();
    expect(storedTypes(t, sessionId)).toEqual(['turn.started', 'turn.cancelled']);
    const reason = t.context.db
      .prepare(
        "SELECT json_extract(payload_json, '$.reason') FROM events WHERE type = 'turn.cancelled' AND session_id = ?",
      )
      .pluck()
      .get(sessionId);
    expect(reason).toBe('user_cancel');
  }, 40_000);

  it('with --detach stops following, says the turn goes on and how to stop it, and exits 130', async () => {
    const { t, sessionId } = await slowServer();
    const send = spawnCli(
      ['send', sessionId, 'slow: a long story', '--follow', '--detach', '--url', t.url],
      tempDir(),
    );
    await send.waitForStdout((out) => out.length > 40, 20_000);
    expect(await send.stop('SIGINT')).toBe(130);
    expect(send.stderr()).toContain('goes on on the server');
    expect(send.stderr()).toContain(`metis cancel ${sessionId}`);
    const running = t.runtime.getSession(sessionId).current_turn_id;
    expect(running).not.toBeNull();
    t.runtime.cancelTurn(sessionId, running!);
  }, 40_000);
});
