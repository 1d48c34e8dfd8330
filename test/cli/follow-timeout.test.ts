import { describe, expect, it } from 'vitest';
import { runCli, spawnCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 17, "Followers that end": `--timeout` bounds `send --follow` and `tail`. */

describe('--timeout on followers', () => {
  it('send --follow: stops following after the timeout, exit 124, says the turn goes on and how to stop it', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 10, slow_tokens: 3000 } });
    const sessionId = await t.createSession();
    const sent = await runCli(
      ['send', sessionId, 'slow: a long story', '--follow', '--timeout', '1', '--url', t.url],
      tempDir(),
    );
    expect(sent.exitCode).toBe(124);
    expect(sent.stderr).toContain('stopped following after 1 s (--timeout); turn turn_');
    expect(sent.stderr).toContain(`metis cancel ${sessionId}`);
    expect(sent.stdout.length).toBeGreaterThan(0); // what streamed before the timeout was shown
    const running = t.runtime.getSession(sessionId).current_turn_id;
    expect(running).not.toBeNull();
    t.runtime.cancelTurn(sessionId, running!);

    const asJson = await runCli(
      ['send', sessionId, 'slow: again', '--follow', '--timeout', '0.5s', '--json', '--url', t.url],
      tempDir(),
    );
    expect(asJson.exitCode).toBe(124);
    expect(JSON.parse(asJson.stderr.trim().split('\n').at(-1)!)).toMatchObject({
      error: { code: 'METIS_ERR_FOLLOW_TIMEOUT', exit_code: 124 },
    });
    t.runtime.cancelTurn(sessionId, t.runtime.getSession(sessionId).current_turn_id!);
  }, 40_000);

  it('send --follow: a turn that ends before the timeout exits as usual', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const sent = await runCli(
      ['send', sessionId, 'hello', '--follow', '--timeout', '30', '--url', t.url],
      tempDir(),
    );
    expect(sent.exitCode).toBe(0);
    expect(sent.stdout).toContain('You said: hello');
  }, 40_000);

  it('tail: shows the session, stops after the timeout, exit 0', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    // Submitted only once the tail printed its snapshot: a child slow to start under load would
    // otherwise attach after the turn and see it only as a count in the snapshot line.
    const tailing = spawnCli(['tail', sessionId, '--timeout', '6', '--url', t.url], tempDir());
    await tailing.waitForStdout((out) => out.includes(`session ${sessionId}`), 20_000);
    await t.submit(sessionId, 'hello');
    expect(await tailing.exited()).toBe(0);
    expect(tailing.stdout()).toContain('You said: hello');
    expect(tailing.stderr()).toContain('stopped after 6 s (--timeout)');
  }, 40_000);

  it('a wrong duration is refused naming the flag, exit 2, before anything is sent', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    for (const bad of ['0', '-1', 'soon', '2d', '90000000']) {
      const refused = await runCli(
        ['send', sessionId, 'hello', '--follow', '--timeout', bad, '--url', t.url],
        tempDir(),
      );
      expect({ bad, code: refused.exitCode }).toEqual({ bad, code: 2 });
      expect(refused.stderr).toContain('--timeout must be a duration');
    }
    expect(t.runtime.getSession(sessionId).turn_count).toBe(0);
  }, 60_000);
});
