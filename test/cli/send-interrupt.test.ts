import { describe, expect, it, onTestFinished } from 'vitest';
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

async function waitFor(check: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
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

  it('a second Ctrl-C while the turn is being cancelled stops following and exits 3 (cancelled), not 130 (issue 29 obs. A)', async () => {
    // The tool waits on this gate, so the cancelled turn cannot end before the second Ctrl-C.
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    const t = await startTestServer({}, { beforeToolExecute: () => gate });
    onTestFinished(() => openGate()); // registered after the server's own hook, so it runs before it
    const sessionId = await t.createSession();
    const send = spawnCli(['send', sessionId, 'time', '--follow', '--url', t.url], tempDir());
    await send.waitForStdout((out) => out.includes('current_time'), 20_000);
    send.process.kill('SIGINT');
    await waitFor(() => send.stderr().includes('cancelling turn'));
    expect(await send.stop('SIGINT')).toBe(3);
    expect(send.stderr()).toContain('is being cancelled on the server');
    expect(send.stderr()).not.toContain('goes on');
    openGate();
    await t.runtime.currentTurn(sessionId)?.done;
    await t.context.flush();
    expect(storedTypes(t, sessionId).at(-1)).toBe('turn.cancelled');
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
