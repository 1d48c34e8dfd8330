import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 29, point 6: the README's command table lacked `dashboard`, `end`, `route`, `patterns clear` and
 * `store copy`. Every command the CLI registers (and each subcommand of a group) must have its row.
 */

const README = readFileSync(join(import.meta.dirname, '../../README.md'), 'utf8');

/** The command names `metis [group] --help` lists under "Commands:". */
async function commandsOf(args: string[]): Promise<string[]> {
  const help = await runCli([...args, '--help'], tempDir());
  expect(help.exitCode, help.stderr).toBe(0);
  const listed = help.stdout.split('Commands:')[1] ?? '';
  return listed
    .split('\n')
    .map((line) => /^ {2}([a-z][a-z-]*)/.exec(line)?.[1])
    .filter((name): name is string => name !== undefined && name !== 'help');
}

describe("the README's command table", () => {
  it('has a row for every command and subcommand of the CLI', async () => {
    const missing: string[] = [];
    const top = await commandsOf([]);
    expect(top.length).toBeGreaterThan(20);
    // One CLI start per command, side by side: each is a child process that mostly waits on its start.
    const subcommandsOf = await Promise.all(top.map((command) => commandsOf([command])));
    for (const [index, command] of top.entries()) {
      const subcommands = subcommandsOf[index]!;
      const names = subcommands.length === 0 ? [command] : subcommands.map((sub) => `${command} ${sub}`);
      // A group whose subcommands share one row names them as `group a|b`.
      for (const name of names) {
        const [group, sub] = name.split(' ');
        const row = new RegExp(`^\\| \`metis ${group}${sub === undefined ? '' : ` [^\`]*\\b${sub}\\b`}`, 'm');
        if (!row.test(README)) missing.push(name);
      }
    }
    expect(missing).toEqual([]);
  }, 120_000);
});
