import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually } from '../helpers/protocol.js';
import { runCli, spawnCli } from '../helpers/run-cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const ASK_EXECUTE = { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } } as const;

/** Control characters of issue 13: clear screen, carriage return, right-to-left override. */
const CLEAR = '\u001b[2J';
const CR = '\r';
const RLO = '\u202e';
// biome-ignore lint/suspicious/noControlCharactersInRegex: the test looks for raw control characters
const RAW_CONTROLS = /[\u001b\r\u202e]/;

/** Submits `message` and resolves once its confirmation waits in the broker. */
async function waitingRequest(t: TestServer, sessionId: string, message: string): Promise<string> {
  await t.submit(sessionId, message);
  expect(await eventually(() => t.runtime.confirmations.pendingIn(sessionId).length === 1, 20_000)).toBe(
    true,
  );
  return t.runtime.confirmations.pendingIn(sessionId)[0]!;
}

describe('metis confirm: shows the whole input, then answers with its hash (issue 13, obs. 3)', () => {
  it('prints the whole 286-character command and the decision succeeds', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const sessionId = await t.createSession();
    const head = 'echo visible-head';
    const tail = ' && echo hidden-tail-ran > tail-marker.txt';
    const command = `${head} ${'a'.repeat(286 - head.length - tail.length - 1)}${tail}`;
    expect(command).toHaveLength(286);
    const requestId = await waitingRequest(t, sessionId, `run: ${command}`);
    const home = tempDir();

    // Listing only: the whole command, nothing decided.
    const shown = await runCli(['confirm', sessionId, '--url', t.url], home);
    expect(shown.exitCode).toBe(0);
    expect(shown.stdout.split('\n')).toContain(`    ${command}`);
    expect(shown.stdout).toContain(requestId);
    expect(shown.stdout).toContain('286 characters');
    const listedJson = await runCli(['confirm', sessionId, '--json', '--url', t.url], home);
    expect(JSON.parse(listedJson.stdout)).toMatchObject([{ input: { command } }]);
    expect(t.runtime.confirmations.pendingIn(sessionId)).toEqual([requestId]);

    // An unknown request id is named.
    const unknown = await runCli(['confirm', sessionId, 'conf_nope', 'allow', '--url', t.url], home);
    expect(unknown.exitCode).toBe(1);
    expect(unknown.stderr).toContain('no pending confirmation conf_nope');
    expect(unknown.stderr).toContain(`waiting: ${requestId}`);

    const allowed = await runCli(['confirm', sessionId, requestId, 'allow', '--url', t.url], home);
    expect(allowed.stderr).toBe('');
    expect(allowed.exitCode).toBe(0);
    expect(allowed.stdout.split('\n')).toContain(`    ${command}`);
    expect(allowed.stdout.endsWith(`${requestId}: allow`)).toBe(true);
    expect(await eventually(() => existsSync(join(t.workspace, 'tail-marker.txt')), 15_000)).toBe(true);
  }, 60_000);

  it('control characters in a command are shown as escapes by metis confirm and metis tail', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const sessionId = await t.createSession();
    const home = tempDir();
    const tail = spawnCli(['tail', sessionId, '--url', t.url], home);
    await tail.waitForStdout((out) => out.includes(`session ${sessionId}:`));
    const requestId = await waitingRequest(t, sessionId, `run: echo "a${CLEAR}b${CR}c${RLO}d"`);
    await tail.waitForStdout((out) => out.includes(`metis confirm ${sessionId} ${requestId}`));
    expect(tail.stdout()).toContain('echo "a\\x1b[2Jb\\rc\\u202ed"');
    expect(tail.stdout()).toContain('waiting for approval');

    const shown = await runCli(['confirm', sessionId, requestId, '--show', '--url', t.url], home);
    expect(shown.stdout).toContain('echo "a\\x1b[2Jb\\rc\\u202ed"');
    expect(RAW_CONTROLS.test(shown.stdout)).toBe(false);
    const denied = await runCli(['confirm', sessionId, requestId, 'deny', '--url', t.url], home);
    expect(denied.exitCode).toBe(0);
    await tail.waitForStdout((out) => out.includes('■ turn done'));
    // The command's output (the model echoes it back) is escaped too; no raw control reached the terminal.
    expect(RAW_CONTROLS.test(tail.stdout())).toBe(false);
    expect(await tail.stop('SIGINT')).toBe(0);
  }, 60_000);

  it('model text with control characters: send --follow and tail show escapes, never the raw bytes', async () => {
    const t = await startTestServer();
    const home = tempDir();
    const message = `clear${CLEAR}me${CR}over${RLO}written`;
    const sent = await runCli(['send', '--new', message, '--follow', '--url', t.url], home);
    expect(sent.exitCode).toBe(0);
    // The scripted model answers "You said: <message>".
    expect(sent.stdout).toContain('You said: clear\\x1b[2Jme\\rover\\u202ewritten');
    expect(RAW_CONTROLS.test(sent.stdout)).toBe(false);
    const sessionId = /created session (\S+)/.exec(sent.stderr)![1]!;

    const tail = spawnCli(['tail', sessionId, '--url', t.url], home);
    await tail.waitForStdout((out) => out.includes(`session ${sessionId}:`));
    await t.submit(sessionId, message);
    await tail.waitForStdout((out) => out.includes('■ turn done'));
    expect(tail.stdout()).toContain('You said: clear\\x1b[2Jme\\rover\\u202ewritten');
    expect(RAW_CONTROLS.test(tail.stdout())).toBe(false);
    expect(await tail.stop('SIGINT')).toBe(0);
  }, 60_000);
});

describe('a failure the CLI prints (issue 13, obs. 3)', () => {
  it('shows control characters of a server message as escapes', async () => {
    const t = await startTestServer();
    const home = tempDir('metis-home-');
    // The server's 404 quotes the session id it was given, control characters included.
    const result = await runCli(['tail', `sess_${CLEAR}x${CR}y${RLO}`, '--url', t.url], home);
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(/^error: /m);
    expect(result.stderr).not.toMatch(RAW_CONTROLS);
    expect(result.stderr).toContain('\\x1b[2J');
  });
});
