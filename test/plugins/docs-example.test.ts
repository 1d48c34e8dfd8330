import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sessionCreated, sha256, turnCompleted, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { emitTurn, startProjectPlugins } from './plugin-harness.js';

const PLUGINS_DOC = join(import.meta.dirname, '../../docs/plugins.md');

interface CodeBlock {
  readonly lang: string;
  readonly code: string;
}

/** The fenced code blocks of a markdown file, in order. */
function codeBlocks(markdown: string): CodeBlock[] {
  // The info string may go on after the language (` ```json runnable`, test/docs/runnable-blocks.test.ts).
  return [...markdown.matchAll(/^```(\w*)[^\n]*\n([\s\S]*?)^```$/gm)].map((m) => ({
    lang: m[1]!,
    code: m[2]!,
  }));
}

/**
 * The complete plugin example of "Writing a plugin" in docs/plugins.md, read at test time so the doc and
 * this test cannot drift: the `js` block that starts with its file name as a comment, and the `json`
 * config block right after it that names that file.
 */
function docExample(): { file: string; code: string; config: unknown } {
  const blocks = codeBlocks(readFileSync(PLUGINS_DOC, 'utf8'));
  const index = blocks.findIndex((b) => b.lang === 'js' && /^\/\/ plugins\/[\w-]+\.mjs\n/.test(b.code));
  expect(index, 'docs/plugins.md has no js block starting with "// plugins/<name>.mjs"').toBeGreaterThan(-1);
  const { code } = blocks[index]!;
  const file = code.slice(3, code.indexOf('\n'));
  const configBlock = blocks[index + 1];
  expect(configBlock?.lang).toBe('json');
  expect(configBlock?.code).toContain(`./${file}`);
  return { file, code, config: JSON.parse(configBlock!.code) };
}

describe('the complete example of docs/plugins.md', () => {
  it('loads as a path plugin with the config the doc shows, and logs a slow turn with its tool count', async () => {
    const { file, code, config } = docExample();
    expect(file).toBe('plugins/slow-turns.mjs');
    const dir = tempDir('metis-doc-plugin-');
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), code);
    const configPath = join(dir, 'metis.config.json');
    writeFileSync(configPath, JSON.stringify(config));

    const { logger, at } = captureLogs();
    const context = tempTraceContext();
    const host = await startProjectPlugins(configPath, context, logger);
    expect(host.list()).toEqual([
      expect.objectContaining({
        name: 'slow-turns',
        specifier: `./${file}`,
        path: join(dir, file),
        fast_path: false,
        filter: { session_ids: null, event_types: ['turn.completed'], actors: null },
      }),
    ]);

    // A fast turn (1.2 s, under the doc's threshold of 30 s): nothing to say.
    context.bus.emit(sessionCreated('sess_fast'));
    emitTurn(context.bus, 'sess_fast');
    // A slow turn with two tool calls.
    context.bus.emit(sessionCreated('sess_slow'));
    const turn = context.bus.emit(turnStarted('sess_slow', null, 'turn_9'))!;
    for (const id of ['tu_1', 'tu_2']) {
      context.bus.emit({
        type: 'tool.called',
        session_id: 'sess_slow',
        turn_id: 'turn_9',
        parent_event_id: turn.id,
        payload: {
          tool_use_id: id,
          tool_name: 'current_time',
          input_hash: sha256('{}'),
          input_size_bytes: 2,
          side_effects: 'none',
        },
      });
    }
    const completed = turnCompleted('sess_slow', turn.id, 'turn_9');
    context.bus.emit({ ...completed, payload: { ...completed.payload, wall_time_seconds: 45 } });
    await context.flush();
    await settleLogs();

    const warnings = at(LEVEL.warn).filter((r) => r.plugin === 'slow-turns');
    expect(warnings).toEqual([
      expect.objectContaining({
        msg: 'slow turn',
        session_id: 'sess_slow',
        turn_id: 'turn_9',
        seconds: 45,
        tools: 2,
      }),
    ]);
    expect(host.list()[0]).toMatchObject({ delivered: 2, failed: 0, dropped: 0, stats: { slow_turns: 1 } });
  });

  it('its hand-written options schema rejects a bad threshold before it starts', async () => {
    const { file, code } = docExample();
    const dir = tempDir('metis-doc-plugin-');
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), code);
    const configPath = join(dir, 'metis.config.json');
    writeFileSync(configPath, JSON.stringify({ plugins: [[`./${file}`, { threshold_seconds: -1 }]] }));
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_OPTIONS',
      message: `plugin "./${file}" (plugins[0] in ${configPath}): invalid options: options.threshold_seconds: must be a positive number`,
    });
  });
});
