import { existsSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { cliNodeArgs } from '../helpers/cli-command.js';
import { tempDir } from '../helpers/tmp.js';

const ROOT = join(import.meta.dirname, '../..');

/**
 * `metis demo <args>` from source as a child process (as test/helpers/run-cli.ts does), with TMPDIR
 * pointing at a folder of its own, so the temporary database it makes (os.tmpdir()) is ours to check.
 */
async function runDemo(args: readonly string[] = []) {
  const tmp = tempDir('metis-demo-test-');
  const result = await execa(process.execPath, [...cliNodeArgs(), 'demo', ...args], {
    cwd: ROOT,
    reject: false,
    stdin: 'ignore',
    env: { METIS_HOME: tempDir(), NODE_ENV: 'test', NO_COLOR: '1', TMPDIR: tmp },
  });
  const stdout = String(result.stdout);
  const home = /\(database in (.+)\)\n/.exec(stdout)?.[1];
  return { tmp, home, exitCode: result.exitCode, stdout, stderr: String(result.stderr) };
}

/** Asserts that `parts` appear in `text` in this order (a string literally, a RegExp as a match). */
function expectInOrder(text: string, parts: readonly (string | RegExp)[]): void {
  let from = 0;
  for (const part of parts) {
    const rest = text.slice(from);
    const match =
      typeof part === 'string'
        ? { index: rest.indexOf(part), length: part.length }
        : ((m) => ({ index: m?.index ?? -1, length: m?.[0].length ?? 0 }))(part.exec(rest));
    expect(match.index, `${String(part)} after offset ${from} in:\n${text}`).toBeGreaterThanOrEqual(0);
    from += match.index + match.length;
  }
}

describe('metis demo', () => {
  it('runs one scripted turn live: route, thinking, current_time running → ok, the answer, the cost, then "Try next"', async () => {
    const { tmp, home, exitCode, stdout, stderr } = await runDemo();
    const launcher = `node ${relative(ROOT, cliNodeArgs().at(-1)!)}`;
    expect(stderr).toBe('');
    expect(exitCode).toBe(0);
    expect(stdout.includes('\u001b[')).toBe(false); // NO_COLOR
    // Each part starts at a line start and stops before its line break.
    expectInOrder(stdout, [
      /^metis demo: embedded server on http:\/\/127\.0\.0\.1:\d+ \(database in .+\)$/m,
      '\nyou: think: time',
      /\n› turn turn_\w+$/m,
      /\n {2}route → scripted:demo \(global_default: [^)]*\)$/m,
      '\nassistant: (thinking) The user asks: time. I will use current_time.',
      '\n  ⋯ current_time running',
      /\n {2}✓ current_time ok \(\d+ ms\)$/m,
      /\nassistant: The tool returned utc: \d{4}-\d\d-\d\dT[\d:.]+Z$/m,
      /\n■ turn done: 2 model calls, 1 tool, \$\d+\.\d{6}$/m,
      '\n\nTry next:',
      // metis is not on the PATH here: the commands run this same CLI with node, and say how to install it.
      `\n  ${launcher} serve `,
      `\n  ${launcher} send --new "think: time" --follow `,
      `\n  ${launcher} tail <session> --preset full `,
      `\n  ${launcher} send <session> "slow: a long story" `,
      `\n  ${launcher} trace stats `,
      '\n(metis is not on your PATH; to put it there: npm pack, then npm install -g ./metis-',
      '\nScripted triggers: ',
    ]);
    // Nothing failed or was cancelled on the way.
    expect(stdout).not.toMatch(/✗|failed|cancelled/);
    // Its temporary database was under os.tmpdir(), and it is gone.
    expect(home).toBeDefined();
    expect(home!.startsWith(join(tmp, 'metis-demo-'))).toBe(true);
    expect(existsSync(home!)).toBe(false);
    // (tsx keeps its compile cache in the same folder.)
    expect(readdirSync(tmp).filter((name) => name.startsWith('metis-demo-'))).toEqual([]);
  }, 60_000);

  it('--keep leaves the temporary database in place; --message sends another message', async () => {
    const { tmp, home, exitCode, stdout } = await runDemo(['--keep', '--message', 'hello']);
    expect(exitCode).toBe(0);
    expect(stdout).toContain('\nyou: hello\n');
    expect(stdout).toContain('assistant: You said: hello\n');
    expect(stdout).toMatch(/■ turn done: 1 model call, 0 tools/);
    expect(home!.startsWith(join(tmp, 'metis-demo-'))).toBe(true);
    expect(existsSync(join(home!, 'metis.db'))).toBe(true);
  }, 60_000);

  it('--json prints the frames as JSON lines, one per line, and nothing else; the turn completes', async () => {
    const { tmp, exitCode, stdout, stderr } = await runDemo(['--json', '--message', 'hello']);
    expect(exitCode, stderr).toBe(0);
    const frames = stdout
      .trim()
      .split('\n')
      .map(
        (line) =>
          JSON.parse(line) as {
            type: string;
            event?: { type: string; payload: { final_content?: unknown } };
          },
      );
    expect(frames[0]!.type).toBe('subscribe_ack');
    const types = frames.filter((f) => f.type === 'event').map((f) => f.event!.type);
    expect(types).toContain('message.complete');
    expect(types.at(-1)).toBe('turn.completed');
    expect(readdirSync(tmp).filter((name) => name.startsWith('metis-demo-'))).toEqual([]);
  }, 60_000);
});
