import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const ROOT = join(import.meta.dirname, '../..');
const ENTRY = join(ROOT, 'test/helpers/cli-entry.ts');
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences
const ANSI = /\u001b\[[0-9;?]*[A-Za-z]|\u001b\][^\u0007]*\u0007|\r/g;

const KEY = { enter: '\r', down: '\u001b[B', ctrlC: '\u0003', ctrlD: '\u0004' };

/**
 * `metis chat` in a real pseudo-terminal (util-linux `script`), driven by keystrokes as a user types
 * them: raw-mode prompts read the keys, and Ctrl-C during a turn reaches metis as SIGINT from the
 * terminal's line discipline.
 */
function chatInPty(args: readonly string[]) {
  const command = `stty cols 120 rows 40; exec "${process.execPath}" --import tsx "${ENTRY}" chat ${args.join(' ')}`;
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
const HAS_SCRIPT = spawnSync('script', ['--version']).status === 0;
if (!HAS_SCRIPT)
  console.warn('skipping the metis chat terminal test: no `script` command (util-linux) on this machine');

describe('metis chat (issue 17)', () => {
  it.skipIf(!HAS_SCRIPT)(
    'asks, approves a tool with the arrow keys, cancels a turn with Ctrl-C and leaves with Ctrl-D, in one terminal',
    async () => {
      const t = await startTestServer({
        tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
        scripted: { slow_token_delay_ms: 20 },
      });
      const chat = chatInPty(['--url', t.url]);
      let at = await chat.waitFor('◆  you');
      const sessionId = /metis chat · (sess_\w+) \(new\)/.exec(chat.screen())![1]!;

      chat.type(`run: echo approved-here${KEY.enter}`);
      at = await chat.waitFor('Let shell run?', at);
      expect(chat.screen().slice(at - 400, at)).toContain('echo approved-here');
      chat.type(KEY.down); // "Allow for this session"
      await new Promise((resolve) => setTimeout(resolve, 200));
      chat.type(KEY.enter);
      at = await chat.waitFor('■ turn done', at);
      expect(chat.screen()).toContain('confirmation allow');
      expect(chat.screen()).toContain('approved-here');

      at = await chat.waitFor('◆  you', at);
      chat.type(`slow: a long story${KEY.enter}`);
      at = await chat.waitFor('Slowly about a long story', at);
      chat.type(KEY.ctrlC);
      at = await chat.waitFor('■ turn cancelled (user_cancel)', at);

      at = await chat.waitFor('◆  you', at);
      chat.type(KEY.ctrlD);
      await chat.waitFor(`resume with: metis chat ${sessionId}`, at);
      expect(await chat.exited).toBe(0);

      await t.context.flush();
      const ends = t.context.db
        .prepare(
          "SELECT type FROM events WHERE session_id = ? AND type IN ('turn.completed', 'turn.cancelled') ORDER BY id",
        )
        .pluck()
        .all(sessionId);
      expect(ends).toEqual(['turn.completed', 'turn.cancelled']);
    },
    60_000,
  );

  it('without a terminal it says to use send --follow, exit 2', async () => {
    const { runCli } = await import('../helpers/run-cli.js');
    const result = await runCli(['chat', '--url', 'http://127.0.0.1:9'], tempDir());
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('metis chat needs a terminal');
    expect(result.stderr).toContain('metis send <session> "message" --follow');
  }, 30_000);
});
