import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { cliNodeArgs } from './cli-command.js';
import { tempDir } from './tmp.js';

const ROOT = join(import.meta.dirname, '../..');
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences
const ANSI = /\u001b\[[0-9;?]*[A-Za-z]|\u001b\][^\u0007]*\u0007|\r/g;

export const KEY = { enter: '\r', down: '\u001b[B', ctrlC: '\u0003', ctrlD: '\u0004' };

/**
 * `metis <args>` in a real pseudo-terminal (util-linux `script`), driven by keystrokes as a user types
 * them: raw-mode prompts read the keys, and Ctrl-C during a turn reaches metis as SIGINT from the
 * terminal's line discipline.
 */
export function metisInPty(args: readonly string[], env: Record<string, string> = {}) {
  const command = `stty cols 120 rows 40; exec "${process.execPath}" ${cliNodeArgs()
    .map((arg) => `"${arg}"`)
    .join(' ')} ${args.join(' ')}`;
  const child: ChildProcess = spawn('script', ['-q', '-e', '-c', command, '/dev/null'], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: {
      ...process.env,
      METIS_HOME: tempDir(),
      TERM: 'xterm-256color',
      NO_COLOR: '1',
      METIS_URL: '',
      METIS_TOKEN: '',
      ...env,
    },
  });
  onTestFinished(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let screen = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    screen += chunk.toString().replace(ANSI, '');
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    screen: () => screen,
    type: (keys: string) => child.stdin!.write(keys),
    exited,
    async waitFor(text: string | RegExp, after = 0, timeoutMs = 20_000): Promise<number> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const rest = screen.slice(after);
        const at = typeof text === 'string' ? rest.indexOf(text) : rest.search(text);
        if (at >= 0) return after + at;
        if (Date.now() > deadline) throw new Error(`no ${String(text)} on screen:\n${screen.slice(-3000)}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
  };
}

/** `script` (util-linux, essential on Debian) gives the chat its pseudo-terminal. */
export const HAS_SCRIPT = spawnSync('script', ['--version']).status === 0;
if (!HAS_SCRIPT)
  console.warn(
    'skipping the terminal tests (metis chat, approvals in place): no `script` command (util-linux) on this machine',
  );
