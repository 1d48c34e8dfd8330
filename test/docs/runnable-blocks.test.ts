import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/core/config/load-config.js';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 17, "Docs true": the fenced blocks of README.md and docs/*.md marked `runnable` (```sh runnable,
 * ```yaml runnable, ```json runnable: GitHub highlights by the first word and ignores the rest) are run,
 * so a command or a config that stops working fails here, naming the file and the line.
 *
 * - `yaml` / `json`: written to a `metis.config.*` file and loaded with metis's own config loader.
 * - `sh`: each line that starts with `metis ` or `npx metis ` runs as a real CLI child against one
 *   scripted server started for the test (METIS_URL), from a temporary folder; a trailing `# comment` is
 *   dropped, `<session>` becomes a session of that server, and `http://127.0.0.1:8421` its URL. It must
 *   exit 0. Not run: `metis serve` (the test runs the server), `metis chat` (needs a terminal); `tail`
 *   gets `--timeout 2` when it has none. Other lines (npm, export, cd) are not run.
 * Blocks left unmarked are listed when the test runs, so none is forgotten silently.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const FILES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

interface Block {
  readonly file: string;
  readonly line: number;
  readonly lang: string;
  readonly runnable: boolean;
  readonly text: string;
}

function blocksOf(file: string): Block[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const open = /^```(\S*)(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((l, j) => j > i && l.startsWith('```'));
    const info = open[2]!.trim().split(/\s+/);
    blocks.push({
      file,
      line: i + 1,
      lang: open[1]!,
      runnable: info.includes('runnable'),
      text: lines.slice(i + 1, end).join('\n'),
    });
    i = end;
  }
  return blocks;
}

const ALL = FILES.flatMap(blocksOf);
const RUNNABLE = ALL.filter((b) => b.runnable);

/** Splits a command line as a shell would for plain words and double-quoted strings. */
function words(line: string): string[] {
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

function commandsOf(block: Block): string[][] {
  return block.text
    .split('\n')
    .map((line) => line.replace(/\s+#\s.*$/, '').trim())
    .filter((line) => /^(npx )?metis /.test(line))
    .map((line) => words(line.replace(/^npx /, '')).slice(1))
    .filter((args) => args[0] !== 'serve' && args[0] !== 'chat');
}

describe('docs: runnable blocks', () => {
  it('lists the blocks left unmarked', () => {
    const unmarked = ALL.filter((b) => !b.runnable && ['sh', 'yaml', 'json'].includes(b.lang));
    console.log(
      `runnable blocks: ${RUNNABLE.length}; sh/yaml/json blocks not run (${unmarked.length}):\n` +
        unmarked.map((b) => `  ${b.file}:${b.line} ${b.lang}`).join('\n'),
    );
    expect(RUNNABLE.length).toBeGreaterThan(0);
  });

  for (const block of RUNNABLE) {
    it(`${block.file}:${block.line} (${block.lang})`, async () => {
      if (block.lang === 'yaml' || block.lang === 'json') {
        const path = join(tempDir(), `metis.config.${block.lang}`);
        writeFileSync(path, block.text);
        await expect(loadConfig({ explicitPath: path })).resolves.toMatchObject({ filepath: path });
        return;
      }
      expect(block.lang).toBe('sh');
      const commands = commandsOf(block);
      expect(commands.length).toBeGreaterThan(0);
      const t = await startTestServer();
      const session = await t.createSession();
      for (const raw of commands) {
        const args = raw.map((w) =>
          w === '<session>' ? session : w.replace('http://127.0.0.1:8421', t.url),
        );
        if (args[0] === 'tail' && !args.includes('--timeout')) args.push('--timeout', '2');
        const result = await runCli(args, tempDir(), { METIS_URL: t.url });
        expect({
          command: `metis ${args.join(' ')}`,
          exit: result.exitCode,
          stderr: result.stderr,
        }).toMatchObject({
          exit: 0,
        });
      }
    }, 60_000);
  }
});
