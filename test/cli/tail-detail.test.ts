import { describe, expect, it } from 'vitest';
import { spawnCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

describe('tail shows the user and, with --preset full, more (issue 17 obs. 6)', () => {
  it('the same turn: both show the message and the command; full adds model calls, chat does not', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const full = spawnCli(['tail', sessionId, '--preset', 'full', '--url', t.url], tempDir());
    const chat = spawnCli(['tail', sessionId, '--url', t.url], tempDir());
    await full.waitForStdout((out) => out.includes('session '), 20_000);
    await chat.waitForStdout((out) => out.includes('session '), 20_000);
    await t.submit(sessionId, 'run: echo hi');
    for (const tail of [full, chat]) await tail.waitForStdout((out) => out.includes('■ turn done'), 20_000);
    expect(await full.stop('SIGINT')).toBe(0);
    expect(await chat.stop('SIGINT')).toBe(0);

    for (const out of [full.stdout(), chat.stdout()]) {
      expect(out).toContain('you: run: echo hi\n');
      expect(out).toMatch(/shell running: echo hi\n/);
    }
    expect(full.stdout()).toMatch(/model call → scripted:demo \(~\d+ tokens in\)/);
    expect(full.stdout()).toMatch(/model call done: \d+ in, \d+ out, \d+ ms/);
    expect(chat.stdout()).not.toMatch(/model call (→|done)/);
    expect(full.stdout()).not.toEqual(chat.stdout());
  }, 60_000);
});
