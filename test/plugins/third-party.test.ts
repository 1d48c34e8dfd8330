import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { tempTraceContext } from '../helpers/tmp.js';
import { pluginProject, startProjectPlugins } from './plugin-harness.js';

function lines(path: string): any[] {
  return readFileSync(path, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
}

describe('a third-party plugin (plain .mjs default export, no metis import)', () => {
  it('is loaded by a path relative to the config file and receives matching events from a real bus', async () => {
    const { dir, configPath } = pluginProject(['collector.mjs'], {
      plugins: [['./collector.mjs', { out: 'seen.jsonl', event_types: ['turn.started', 'turn.completed'] }]],
    });
    const context = tempTraceContext();
    const host = await startProjectPlugins(configPath, context);

    const [status] = host.list();
    expect(status).toMatchObject({
      name: 'collector',
      specifier: './collector.mjs',
      path: join(dir, 'collector.mjs'),
      index: 0,
      fast_path: false,
      filter: { session_ids: null, event_types: ['turn.completed', 'turn.started'], actors: null },
    });

    context.bus.emit(sessionCreated('sess_a'));
    const started = context.bus.emit(turnStarted('sess_a'))!;
    context.bus.emit(turnStarted('sess_b', null, 'turn_2'));
    await context.flush();

    const seen = lines(join(dir, 'seen.jsonl'));
    expect(seen.map((l) => l.type)).toEqual(['turn.started', 'turn.started']);
    expect(seen[0]).toEqual({ id: started.id, type: 'turn.started', stored: true });
    expect(host.list()[0]).toMatchObject({ delivered: 2, failed: 0, dropped: 0, stats: { seen: 2 } });

    await host.stop();
    expect(lines(join(dir, 'seen.jsonl')).at(-1)).toEqual({ stopped: true, seen: 2 });
  });

  it('gets its options checked by its own hand-written schema before it starts', async () => {
    const { configPath } = pluginProject(['collector.mjs'], { plugins: [['./collector.mjs', { out: 42 }]] });
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_OPTIONS',
      message: `plugin "./collector.mjs" (plugins[0] in ${configPath}): invalid options: options.out: must be a file name`,
    });
  });
});
