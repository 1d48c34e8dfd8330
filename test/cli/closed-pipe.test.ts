import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliNodeArgs } from '../helpers/cli-command.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const ROOT = join(import.meta.dirname, '../..');

/**
 * `metis <args> | head -1`: reads the first line, then closes the pipe as `head` does, and returns how
 * the command ended. The command keeps printing into the closed pipe (EPIPE).
 */
function firstLineThenClose(args: readonly string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [...cliNodeArgs(), ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, METIS_HOME: tempDir(), NO_COLOR: '1', METIS_URL: '', ...env },
  });
  let stderr = '';
  let stdout = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise<{ code: number | null; signal: string | null; stderr: string; firstLine: string }>(
    (resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`metis ${args.join(' ')} did not end after its reader left; stderr: ${stderr}`));
      }, 30_000);
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        if (stdout.includes('\n')) child.stdout.destroy();
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, stderr, firstLine: stdout.split('\n')[0]! });
      });
    },
  );
}

describe('a reader that goes away (`| head -1`) ends every command quietly (issue 17 obs. 4)', () => {
  it('demo', async () => {
    const ended = await firstLineThenClose(['demo', '--message', 'slow: a long story']);
    expect(ended.firstLine).not.toBe('');
    expect(ended.stderr).not.toMatch(/EPIPE|Error|at /);
    expect(ended.code).toBe(0);
    // Its temporary database goes with it.
    const home = /\(database in (.+)\)$/.exec(ended.firstLine)?.[1];
    expect(home).toBeDefined();
    expect(existsSync(home!)).toBe(false);
  }, 40_000);

  it('tail and send --follow', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 2000 } });
    const sessionId = await t.createSession();
    const env = { METIS_TOKEN: '' };
    const follow = await firstLineThenClose(
      ['send', sessionId, 'slow: a long story', '--follow', '--url', t.url],
      env,
    );
    expect(follow.firstLine).not.toBe('');
    expect(follow.stderr).not.toMatch(/EPIPE|Error|at /);
    expect(follow.code).toBe(0);
    const tail = await firstLineThenClose(['tail', sessionId, '--preset', 'full', '--url', t.url], env);
    expect(tail.firstLine).not.toBe('');
    expect(tail.stderr).not.toMatch(/EPIPE|Error|at /);
    expect(tail.code).toBe(0);
  }, 60_000);
});
