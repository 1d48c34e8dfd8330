import { describe, expect, it } from 'vitest';
import { eventually, ofType, subscribe, waitForEvents } from '../helpers/protocol.js';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 31 part 3: `metis budget <session>` shows a turn paused at a cap and raises the cap. */
describe('metis budget', () => {
  it('shows the pause, raises the token cap (--tokens, --json) and the turn goes on', async () => {
    const t = await startTestServer();
    const home = tempDir();
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    // `time` makes two model calls: the first spends past a 1-token cap, the second waits.
    const submitted = await t.request('POST', `/sessions/${id}/turns`, {
      message: 'time',
      budget: { tokens: 1 },
    });
    expect(submitted.body.turn_id).toMatch(/^turn_/);
    expect(await eventually(() => t.runtime.budgets.view(id).paused.length === 1)).toBe(true);

    const shown = await runCli(['budget', id, '--url', t.url], home);
    expect(shown.exitCode).toBe(0);
    expect(shown.stdout).toContain(`session ${id}: `);
    expect(shown.stdout).toMatch(/of 1 tokens/);
    expect(shown.stdout).toContain(`at the session tokens cap`);
    expect(shown.stdout).toContain(`raise it with: metis budget ${id} --tokens <more>`);
    expect(ofType(ws.events(), 'llm.call_started').length).toBe(1);

    const raised = await runCli(['budget', id, '--tokens', '100000', '--json', '--url', t.url], home);
    expect(raised.exitCode).toBe(0);
    const answer = JSON.parse(raised.stdout);
    expect(answer).toMatchObject({
      session_id: id,
      session: { caps: { tokens: 100000, usd: null } },
      paused: [],
    });
    await waitForEvents(ws, (e) => e.type === 'turn.completed');
    expect(ofType(ws.events(), 'llm.call_started').length).toBe(2);
  }, 30_000);

  it('refuses an amount that is not one, with exit 2 and what to give', async () => {
    const result = await runCli(
      ['budget', 'sess_x', '--usd', 'lots', '--url', 'http://127.0.0.1:9'],
      tempDir(),
    );
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('--usd: "lots" is not a number');
  }, 30_000);
});
